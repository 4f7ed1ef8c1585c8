"""Which collector a recipe trains with: its ``collector`` field, ``'local'`` or ``'ray'``.

``'local'`` steps the envs in the trainer's process (:func:`~engine_rl.recipes.env_source.recipe_collector`);
``'ray'`` in ``ray_workers`` Ray actors (:class:`~engine_rl.collectors.ray_collector.RayCollector`),
synchronously for PPO and asynchronously for the replay recipes. :func:`check_collector_fields`
checks the fields (in the config's ``__post_init__``), :func:`check_ray_reachable` that Ray is
installed and the cluster answers (with the env check), :func:`train_collector` makes the
collector and :func:`attach_collector` wires its weight sync and ``policy_lag``.

Examples:
    >>> from engine_rl.recipes.dqn_cartpole import DQNConfig
    >>> DQNConfig(collector="ray", ray_workers=0)
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: ray_workers must be a positive int, got 0
    >>> DQNConfig(collector="ray", async_collection=True)
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: collector 'ray' collects in Ray actors, so async_collection (a worker process) does not apply; drop one of them
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ignite.engine import Engine
from torch import nn

from engine_rl.collectors.base import BatchCollector
from engine_rl.collectors.ray_collector import RayCollector, check_ray_address, ray_missing
from engine_rl.recipes.env_source import recipe_collector
from handlers import WeightSync

__all__ = ["COLLECTORS", "attach_collector", "check_collector_fields", "check_ray_reachable", "train_collector"]

#: Values of the ``collector`` field.
COLLECTORS = ("local", "ray")


def check_collector_fields(cfg: Any) -> None:
    """``collector``, ``ray_workers`` and ``ray_address`` alone, then where ``'ray'`` cannot apply:
    a ``ValueError``, one line naming the config, the field and what is accepted."""
    owner = type(cfg).__name__
    if cfg.collector not in COLLECTORS:
        raise ValueError(f"{owner}: collector must be one of {', '.join(map(repr, COLLECTORS))}, got {cfg.collector!r}")
    if not (isinstance(cfg.ray_workers, int) and not isinstance(cfg.ray_workers, bool) and cfg.ray_workers > 0):
        raise ValueError(f"{owner}: ray_workers must be a positive int, got {cfg.ray_workers!r}")
    if cfg.ray_address is not None and not (isinstance(cfg.ray_address, str) and cfg.ray_address.count(":") >= 1):
        raise ValueError(f"{owner}: ray_address must be HOST:PORT of a running Ray head (e.g. 127.0.0.1:6379) or None, "
                         f"got {cfg.ray_address!r}")
    if cfg.collector != "ray":
        return
    if cfg.env_backend != "gymnasium":
        raise ValueError(f"{owner}: collector 'ray' steps gymnasium envs in Ray actors, so env_backend "
                         f"{cfg.env_backend!r} does not apply; set env_backend=gymnasium or collector=local")
    if getattr(cfg, "async_collection", False):
        raise ValueError(f"{owner}: collector 'ray' collects in Ray actors, so async_collection (a worker process) "
                         "does not apply; drop one of them")
    if getattr(cfg, "core", None) is not None:
        raise ValueError(f"{owner}: collector 'ray' takes feed-forward policies, not core={cfg.core!r} (a recurrent "
                         "policy's state is not carried across Ray actors); set collector=local")
    if getattr(cfg, "n_step", 1) > 1:
        raise ValueError(f"{owner}: collector 'ray' hands the replay each actor's batches in turn, so n_step "
                         f"{cfg.n_step} (rows over several batches of one env copy) does not apply; set n_step=1 "
                         "or collector=local")
    if cfg.num_envs % cfg.ray_workers:
        raise ValueError(f"{owner}: with collector 'ray' num_envs ({cfg.num_envs}) must be a multiple of ray_workers "
                         f"({cfg.ray_workers}): each actor steps num_envs / ray_workers env copies")


def check_ray_reachable(cfg: Any) -> None:
    """With ``collector='ray'``: a ``ValueError`` if Ray is not installed, or if nothing answers at
    ``ray_address`` within seconds (:func:`~engine_rl.collectors.ray_collector.check_ray_address`)."""
    if cfg.collector != "ray":
        return
    missing = ray_missing()
    if missing is not None:
        raise ValueError(f"{type(cfg).__name__}: collector 'ray' needs Ray: {missing}")
    if cfg.ray_address is not None:
        check_ray_address(cfg.ray_address, owner=type(cfg).__name__)


def train_collector(
    cfg: Any, make_env: Callable[[int], Any], policy: nn.Module, *, device: torch.device,
    storing_device: torch.device, sync: bool,
) -> BatchCollector | RayCollector:
    """The training collector: with ``collector='ray'`` a :class:`RayCollector` whose actors make
    their envs with ``make_env(n)`` (picklable: it runs in the actors) and act with CPU copies of
    ``policy``, ``sync`` or not; else :func:`~engine_rl.recipes.env_source.recipe_collector` of
    ``make_env(cfg.num_envs)`` in this process."""
    if cfg.collector == "ray":
        return RayCollector(make_env, policy, num_envs=cfg.num_envs, frames_per_batch=cfg.frames_per_batch,
                            num_workers=cfg.ray_workers, sync=sync, seed=cfg.seed, address=cfg.ray_address,
                            storing_device=storing_device, info_keys=cfg.info_keys)
    return recipe_collector(cfg, make_env(cfg.num_envs), policy, device=device, storing_device=storing_device)


def attach_collector(trainer: Engine, collector: Any, policy: nn.Module) -> None:
    """For a :class:`RayCollector`: ``policy``'s weights to the actors after every batch
    (:class:`~handlers.WeightSync`, and before the first), ``policy_lag`` in the metrics, the
    actors stopped when training completes. Nothing for a collector acting with ``policy`` itself."""
    if isinstance(collector, RayCollector):
        WeightSync(policy, collector).attach(trainer)
        collector.attach(trainer)
