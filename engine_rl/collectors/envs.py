"""Gymnasium vector environments: :func:`make_vec_env` and the spec the collectors read.

Collectors support Box observations and Discrete or Box actions. ``vec_env_spec`` checks that
once, up front, so a wrong space fails with a message instead of deep inside a rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

__all__ = ["VecEnvSpec", "make_vec_env", "vec_env_spec"]

VecMode = Literal["vector_entry_point", "sync", "async"]


def make_vec_env(
    env_id: str,
    num_envs: int = 8,
    *,
    mode: VecMode | None = None,
    autoreset_mode: AutoresetMode | str | None = None,
    **env_kwargs: Any,
) -> VectorEnv:
    """Create a gymnasium vector env, choosing the fastest vectorization by default.

    Args:
        env_id: a registered gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: number of env copies (a positive int).
        mode: ``"vector_entry_point"`` (numpy-vectorized, e.g. CartPole; always next-step
            autoreset), ``"sync"`` or ``"async"``. ``None``: the vector entry point when the id
            registers one, else ``"sync"``.
        autoreset_mode: for ``"sync"``/``"async"`` only; defaults to ``AutoresetMode.SAME_STEP``
            (every step is a transition, the final observation is in ``infos["final_obs"]``).
            Collectors handle both same-step and next-step envs.
        **env_kwargs: passed to the environment, e.g. ``max_episode_steps=50``.

    Returns:
        A ``gymnasium.vector.VectorEnv``.

    Examples:
        >>> env = make_vec_env("CartPole-v1", num_envs=4, max_episode_steps=20)
        >>> env.num_envs, env.metadata["autoreset_mode"].name
        (4, 'NEXT_STEP')
        >>> env = make_vec_env("Pendulum-v1", num_envs=2)
        >>> env.metadata["autoreset_mode"].name
        'SAME_STEP'
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"make_vec_env: num_envs must be a positive int, got {num_envs!r}")
    if mode is None:
        has_vector = gym.spec(env_id).vector_entry_point is not None
        mode = "vector_entry_point" if has_vector else "sync"
    if mode not in ("vector_entry_point", "sync", "async"):
        raise ValueError(
            f"make_vec_env: mode must be 'vector_entry_point', 'sync' or 'async', got {mode!r}"
        )
    vector_kwargs: dict[str, Any] = {}
    if mode == "vector_entry_point":
        if autoreset_mode is not None:
            raise ValueError(
                "make_vec_env: autoreset_mode can only be chosen with mode='sync' or 'async' "
                f"(vector entry points fix their own), got {autoreset_mode!r}"
            )
    else:
        vector_kwargs["autoreset_mode"] = AutoresetMode(autoreset_mode or AutoresetMode.SAME_STEP)
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=mode,
        vector_kwargs=vector_kwargs,
        **env_kwargs,
    )


@dataclass(frozen=True, kw_only=True)
class VecEnvSpec:
    """What a collector needs to know about a vector env (see :func:`vec_env_spec`)."""

    num_envs: int
    """Number of env copies."""
    observation_shape: tuple[int, ...]
    """Shape of one env copy's observation (stored as float32)."""
    action_shape: tuple[int, ...]
    """Shape of one env copy's action: ``()`` for Discrete."""
    action_dtype: torch.dtype
    """``torch.int64`` for Discrete actions, ``torch.float32`` for Box."""
    num_actions: int | None
    """Number of discrete actions, ``None`` for Box actions."""
    autoreset_mode: AutoresetMode
    """``NEXT_STEP`` (the step after a done is a reset step) or ``SAME_STEP``."""

    @property
    def discrete(self) -> bool:
        """Whether actions are discrete indices."""
        return self.num_actions is not None


def vec_env_spec(env: VectorEnv, *, owner: str = "vec_env_spec") -> VecEnvSpec:
    """Read and check the spaces and autoreset mode of a gymnasium vector env.

    Args:
        env: a ``gymnasium.vector.VectorEnv`` with a Box observation space and a Discrete or Box
            action space, autoresetting (next-step or same-step).
        owner: the component named in error messages.

    Returns:
        A :class:`VecEnvSpec`.

    Examples:
        >>> spec = vec_env_spec(make_vec_env("CartPole-v1", num_envs=3))
        >>> spec.num_envs, spec.observation_shape, spec.action_shape, spec.num_actions
        (3, (4,), (), 2)
        >>> vec_env_spec(make_vec_env("Pendulum-v1", num_envs=1)).action_dtype
        torch.float32
    """
    if not isinstance(env, VectorEnv):
        raise TypeError(f"{owner}: env must be a gymnasium.vector.VectorEnv, got {type(env).__name__}")
    num_envs = int(env.num_envs)
    if num_envs < 1:
        raise ValueError(f"{owner}: env must have at least one env copy, got num_envs={num_envs}")
    obs_space = env.single_observation_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"{owner}: the observation space must be a Box, got {obs_space}")
    act_space = env.single_action_space
    if isinstance(act_space, gym.spaces.Discrete):
        action_shape, action_dtype, num_actions = (), torch.int64, int(act_space.n)
    elif isinstance(act_space, gym.spaces.Box):
        action_shape, action_dtype, num_actions = tuple(act_space.shape), torch.float32, None
    else:
        raise ValueError(f"{owner}: the action space must be Discrete or Box, got {act_space}")
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    mode = AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)
    if mode is AutoresetMode.DISABLED:
        raise ValueError(
            f"{owner}: the env must autoreset (NEXT_STEP or SAME_STEP), got AutoresetMode.DISABLED"
        )
    return VecEnvSpec(
        num_envs=num_envs,
        observation_shape=tuple(int(d) for d in obs_space.shape),
        action_shape=action_shape,
        action_dtype=action_dtype,
        num_actions=num_actions,
        autoreset_mode=mode,
    )

