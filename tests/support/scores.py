"""A set evaluation score, for tests whose subject is not learning: faults, resume, the best
policy and its rotation, early stopping.

Such a test needs evaluations that improve, or stop improving, at known frames. A real score
depends on what the network learned, and that differs between seeds and between CPUs (their
kernels round differently, so training takes another path): a kill "after the second best
policy" may then never happen. :func:`scored_by_frames` gives a recipe whose evaluations report
a mean return set by the test from the trainer's frames alone; the best checkpoint, early
stopping, ``metrics.jsonl`` and the summary all see that return. In a test::

    monkeypatch.setitem(RECIPES, "dqn-cartpole", scored_by_frames("dqn-cartpole", peaking_at(3072)))

and in a process the test starts (``support`` on its ``PYTHONPATH``), the same line with
``RECIPES[...] = ...`` before ``engine_rl.cli.main``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ignite.engine import Events

from engine_rl.engine import attached_objects
from engine_rl.recipes import RECIPES, Recipe
from handlers import ValidationRollout

__all__ = ["peaking_at", "scored_by", "scored_by_frames"]


def peaking_at(peak: int, *, per: int = 1024) -> Callable[[int], float]:
    """A score 1 higher every ``per`` frames up to ``peak`` frames, then 1 lower every ``per``:
    a new best at each evaluation up to the peak, none after it.

    Examples:
        >>> [peaking_at(3072)(frames) for frames in (1024, 2048, 3072, 4096, 6144)]
        [1.0, 2.0, 3.0, 2.0, 0.0]
    """

    def score(frames: int) -> float:
        return float(peak - abs(frames - peak)) / per

    return score


def scored_by_frames(name: str, score: Callable[[int], float]) -> Recipe:
    """The registered recipe ``name``, with each evaluation's ``return_mean`` replaced by
    ``score(trainer.state.frames)`` (its other figures stay measured)."""
    return scored_by(name, lambda config, frames: score(frames))


def scored_by(name: str, score: Callable[[Any, int], float]) -> Recipe:
    """The registered recipe ``name``, with each evaluation's ``return_mean`` replaced by
    ``score(config, trainer.state.frames)``, ``config`` being the one the recipe was built with
    (a tuning test scores its trials by their seeds); its other figures stay measured."""
    recipe = RECIPES[name]

    def build(config):
        setup = recipe.build(config)
        trainer = setup.trainer
        [validation] = [o for o in attached_objects(trainer) if isinstance(o, ValidationRollout)]

        def set_return(evaluator):  # before the runner's best checkpoint and early stopping, attached later
            evaluator.state.metrics["return_mean"] = score(config, int(trainer.state.frames))

        validation.evaluator.add_event_handler(Events.COMPLETED, set_return)
        return setup

    return dataclasses.replace(recipe, build=build)
