"""What a recipe builds, and the registry of recipes by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from ignite.engine import Engine

__all__ = ["Recipe", "SearchSpace", "Setup", "RECIPES", "register", "get_recipe"]


@dataclass(kw_only=True)
class Setup:
    """Everything a built recipe hands to the runner."""

    trainer: Engine
    """The trainer (an :class:`engine_rl.RLTrainer`) with the recipe's handlers attached."""
    to_save: dict[str, Any]
    """Objects with ``state_dict``/``load_state_dict`` that a checkpoint holds."""
    eval_policy: torch.nn.Module
    """The deterministic policy used for evaluation (what an inference checkpoint holds)."""
    total_frames: int
    """Frame budget of the run."""
    log_every: int = 1
    """Batches between train lines of ``metrics.jsonl`` (and dashboard points); a batch in which
    training episodes ended is logged too (``handlers.MetricsLogger``)."""
    closers: list[Callable[[], None]] = field(default_factory=list)
    """Called when the run ends (close envs, collectors)."""

    def close(self) -> None:
        for close in self.closers:
            close()


SearchSpace = Callable[[Any, Any], dict[str, Any]]
"""A recipe's tuning search space: ``search_space(trial, config) -> {field: value}`` samples the
config fields it tunes with an Optuna trial's ``suggest_*`` methods, ``config`` being the trial's
base config (the recipe's defaults with the user's ``--set``), and returns them
(:mod:`engine_rl.tune`)."""


@dataclass(frozen=True)
class Recipe:
    name: str
    config_cls: type
    build: Callable[[Any], Setup]
    summary: str
    search_space: SearchSpace | None = None
    """What ``engine-rl tune`` searches (None: the recipe cannot be tuned)."""


RECIPES: dict[str, Recipe] = {}


def register(
    name: str, config_cls: type, summary: str, *, search_space: SearchSpace | None = None
) -> Callable[[Callable[[Any], Setup]], Callable[[Any], Setup]]:
    """Decorator registering a recipe's ``build(config) -> Setup`` under ``name``, with the
    ``search_space`` that ``engine-rl tune`` samples (see :data:`SearchSpace`), if it has one."""

    def deco(build: Callable[[Any], Setup]) -> Callable[[Any], Setup]:
        RECIPES[name] = Recipe(name, config_cls, build, summary, search_space)
        return build

    return deco


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; ``ValueError`` listing the known ones otherwise."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]
