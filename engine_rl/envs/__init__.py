"""Batched torch environments: ``[num_envs]`` tensors on any device, no numpy round trip.

:class:`TorchEnv` is the interface (see :mod:`engine_rl.envs.base` for the autoreset
semantics); :class:`CartPole` and :class:`Pendulum` reproduce gymnasium's ``CartPole-v1`` and
``Pendulum-v1``; :class:`~engine_rl.collectors.TorchEnvCollector` turns them into batches.
"""

from __future__ import annotations

from typing import Any

import torch

from engine_rl.envs.base import TensorSpec, TorchEnv
from engine_rl.envs.cartpole import CartPole
from engine_rl.envs.pendulum import Pendulum
from engine_rl.envs.rng import CounterRNG

__all__ = ["TORCH_ENVS", "CartPole", "CounterRNG", "Pendulum", "TensorSpec", "TorchEnv", "make_torch_env"]

#: gymnasium ids with a torch implementation.
TORCH_ENVS: dict[str, type[TorchEnv]] = {"CartPole-v1": CartPole, "Pendulum-v1": Pendulum}


def make_torch_env(
    env_id: str, num_envs: int = 8, *, device: torch.device | str | None = None, **kwargs: Any
) -> TorchEnv:
    """Create the torch version of a gymnasium env id (see :data:`TORCH_ENVS`).

    Args:
        env_id: ``"CartPole-v1"`` or ``"Pendulum-v1"``.
        num_envs: number of copies.
        device: where the env runs.
        **kwargs: passed to the env, e.g. ``dtype=torch.float64`` or ``max_episode_steps=50``.

    Examples:
        >>> make_torch_env("CartPole-v1", 16)
        CartPole(num_envs=16, device=cpu, dtype=torch.float32, max_episode_steps=500)
    """
    try:
        cls = TORCH_ENVS[env_id]
    except KeyError:
        raise ValueError(f"make_torch_env: no torch env for {env_id!r}; available: {sorted(TORCH_ENVS)}") from None
    return cls(num_envs, device=device, **kwargs)
