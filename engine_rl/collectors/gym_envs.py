"""Gymnasium vector environments: :func:`make_vec_env` and the spec the collectors read.

Collectors support Box, Discrete, MultiBinary, MultiDiscrete and Dict observations
(:mod:`engine_rl.collectors.observations`) and Discrete, MultiDiscrete or Box actions. ``vec_env_spec`` checks that
once, up front, so a wrong space fails with a message instead of deep inside a rollout.

The ids themselves are looked up in :mod:`engine_rl.collectors.registry` (its :func:`env_spec`,
:func:`is_atari_id` and :data:`EXTRAS` are importable from here too).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import gymnasium as gym
import torch
from gymnasium.envs.registration import EnvSpec, load_env_creator
from gymnasium.vector import AutoresetMode, VectorEnv

from engine_rl.checks import positive_int
from engine_rl.collectors.env_factory import EnvFactory, callable_name, make_checked_env
from engine_rl.collectors.mujoco_warnings import is_mujoco_spec, route_for
from engine_rl.collectors.observations import ObservationField, observation_fields
from engine_rl.collectors.registry import EXTRAS, env_spec, is_atari_id
from engine_rl.collectors.wrappers import EnvWrapper, apply_wrappers, parse_wrappers
from engine_rl.spaces import is_multi_discrete

__all__ = [
    "EXTRAS", "VecEnvSpec", "env_spaces", "env_spec", "is_atari_id", "make_one_env", "make_vec_env", "vec_env_spec",
]

VecMode = Literal["auto", "vector_entry_point", "sync", "async"]


_SPACES: dict[tuple[Any, ...], tuple[EnvSpec | None, gym.Space, gym.Space]] = {}


def env_spaces(
    env_id: str | EnvFactory, *, wrappers: tuple[str, ...] = (), env_kwargs: Mapping[str, Any] | None = None,
    owner: str = "env_spaces",
) -> tuple[gym.Space, gym.Space]:
    """``(observation_space, action_space)`` of one copy of ``env_id`` (a registered id, or a
    callable making one env, :mod:`engine_rl.collectors.env_factory`), made with ``env_kwargs``
    and wrapped by ``wrappers`` (names, see :mod:`engine_rl.collectors.wrappers`).

    The env is made once per registration (or callable), keyword arguments and wrappers, then
    closed, and its spaces kept; a ``ValueError`` naming ``owner`` if the id is not registered,
    the env cannot be made (one of gymnasium's MuJoCo envs without ``mujoco``: naming the extra) or a
    wrapper does not apply.

    Examples:
        >>> env_spaces("CartPole-v1")
        (Box([-4.8 ...], [4.8 ...], (4,), float32), Discrete(2))
    """
    spec = None if callable(env_id) else env_spec(env_id, owner=owner)
    route_for(spec)  # MuJoCo's model warnings said once, not printed for every copy
    wraps = parse_wrappers(wrappers, owner=owner)
    kwargs = dict(env_kwargs or {})
    key = (env_id, tuple(wrappers), tuple(sorted(kwargs.items())))
    try:
        cached = _SPACES.get(key)
    except TypeError:  # a callable or an argument that cannot be hashed: made every time
        key, cached = None, None
    if cached is not None and cached[0] is spec:
        return cached[1], cached[2]
    if spec is None:
        env = make_checked_env(env_id, owner=owner, **kwargs)
    else:
        try:
            env = gym.make(env_id, **kwargs)
        except Exception as err:  # noqa: BLE001  (a missing dependency, a failing constructor, ...)
            if isinstance(err, gym.error.DependencyNotInstalled) and is_mujoco_spec(spec):
                raise ValueError(f"{owner}: env_id {env_id!r} needs {EXTRAS['mujoco']}") from err
            with_kwargs = f" with env_kwargs {kwargs}" if kwargs else ""
            raise ValueError(
                f"{owner}: env_id {env_id!r} cannot be made{with_kwargs}: {type(err).__name__}: {err}"
            ) from err
    try:
        env = apply_wrappers(env, wraps, owner=owner)
        spaces = env.observation_space, env.action_space
    finally:
        env.close()
    if key is not None:
        _SPACES[key] = (spec, *spaces)
    return spaces


def _make_one(
    make_env: EnvFactory, wrappers: Sequence[Callable[[gym.Env], gym.Env]], env_kwargs: dict[str, Any]
) -> gym.Env:
    """One env copy of a ``make_env`` callable, wrapped (a top-level function, so async workers can pickle it)."""
    env = make_checked_env(make_env, owner="make_vec_env", **env_kwargs)
    return apply_wrappers(env, wrappers, owner="make_vec_env")


def make_one_env(
    env_id: str | EnvFactory, *, wrappers: Sequence[str] = (), owner: str = "make_one_env", **env_kwargs: Any
) -> gym.Env:
    """One copy of ``env_id`` (a registered id, or a callable making one env) made with
    ``env_kwargs`` and wrapped by ``wrappers``, as each copy of :func:`make_vec_env` is, but not
    vectorized: e.g. an env made with ``render_mode="rgb_array"`` to record (:mod:`engine_rl.video`).

    A wrapper name that does not parse, an unregistered id or a ``make_env`` that fails is a
    ``ValueError`` naming ``owner``; ``gymnasium.make``'s own errors are raised as they are.

    Examples:
        >>> env = make_one_env("CartPole-v1", wrappers=("TimeLimit(max_episode_steps=5)",), render_mode="rgb_array")
        >>> env.spec.max_episode_steps, env.render_mode
        (5, 'rgb_array')
    """
    wraps = parse_wrappers(wrappers, owner=owner)
    if callable(env_id):
        env = make_checked_env(env_id, owner=owner, **env_kwargs)
    else:
        route_for(env_spec(env_id, owner=owner))
        env = gym.make(env_id, **env_kwargs)
    return apply_wrappers(env, wraps, owner=owner)


def make_vec_env(
    env_id: str | EnvFactory,
    num_envs: int = 8,
    *,
    mode: VecMode | None = None,
    autoreset_mode: AutoresetMode | str | None = None,
    wrappers: Sequence[str] = (),
    **env_kwargs: Any,
) -> VectorEnv:
    """Create a gymnasium vector env, choosing the fastest vectorization by default.

    Args:
        env_id: a registered gymnasium id, e.g. ``"CartPole-v1"``, or a callable that makes one
            env copy (:mod:`engine_rl.collectors.env_factory`; ``env_kwargs`` are passed to it), made
            ``num_envs`` times; such an env gets no ``TimeLimit`` from a registration (add one to
            ``wrappers`` or inside the callable if its episodes do not end).
        num_envs: number of env copies (a positive int).
        mode: ``"vector_entry_point"`` (numpy-vectorized, e.g. CartPole; always next-step
            autoreset), ``"sync"`` or ``"async"``. ``None`` or ``"auto"``: the vector entry point
            when the id registers one that takes the ``env_kwargs`` (and no ``wrappers`` are given), else
            ``"sync"`` (always for a callable).
        autoreset_mode: for ``"sync"``/``"async"`` only; defaults to ``AutoresetMode.SAME_STEP``
            (every step is a transition, the final observation is in ``infos["final_obs"]``).
            Collectors handle both same-step and next-step envs.
        wrappers: gymnasium wrappers applied to each env copy, in order, by name (e.g.
            ``("FlattenObservation",)``; :mod:`engine_rl.collectors.wrappers`); not with
            ``mode="vector_entry_point"``, which batches the copies itself.
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
    num_envs = positive_int(num_envs, name="num_envs", owner="make_vec_env")
    if mode is not None and mode not in ("auto", "vector_entry_point", "sync", "async"):
        raise ValueError(
            f"make_vec_env: mode must be 'auto', 'vector_entry_point', 'sync' or 'async', got {mode!r}"
        )
    from_callable = callable(env_id)
    spec = None if from_callable else env_spec(env_id, owner="make_vec_env")
    route_for(spec)
    wraps = parse_wrappers(wrappers, owner="make_vec_env")
    mode, vector_kwargs = _vectorization(env_id, spec, mode, autoreset_mode, wrappers, wraps, env_kwargs)
    if from_callable:
        copies = [partial(_make_one, env_id, wraps, env_kwargs)] * num_envs
        vector_cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
        return vector_cls(copies, **vector_kwargs)
    if wraps:
        return gym.make_vec(
            env_id, num_envs=num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs,
            wrappers=[partial(apply_wrappers, wrappers=wraps, owner="make_vec_env")], **env_kwargs,
        )
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=mode,
        vector_kwargs=vector_kwargs,
        **env_kwargs,
    )


def _vectorization(
    env_id: str | EnvFactory, spec: EnvSpec | None, mode: VecMode | None, autoreset_mode: AutoresetMode | str | None,
    wrappers: Sequence[str], wraps: Sequence[EnvWrapper], env_kwargs: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """The vectorization mode of :func:`make_vec_env` (``mode``, or for ``None``/``"auto"`` the
    fastest that makes the env) and its ``vector_kwargs``; a ``ValueError`` if ``mode`` cannot."""
    has_vector = spec is not None and spec.vector_entry_point is not None
    if mode is None or mode == "auto":
        vector = has_vector and not wraps and _vector_entry_point_takes(spec, env_kwargs)
        mode = "vector_entry_point" if vector else "sync"
    if mode != "vector_entry_point":
        return mode, {"autoreset_mode": AutoresetMode(autoreset_mode or AutoresetMode.SAME_STEP)}
    if wraps:
        raise ValueError(
            f"make_vec_env: wrappers {tuple(wrappers)} wrap each env copy, which mode='vector_entry_point' "
            "does not make; use mode 'auto', 'sync' or 'async'"
        )
    if not has_vector:
        what = f"make_env {callable_name(env_id)} (a callable) has" if callable(env_id) else f"{env_id} registers"
        raise ValueError(
            f"make_vec_env: {what} no vector entry point, so mode='vector_entry_point' "
            "cannot make it; use mode='sync' or 'async' (or None: the fastest available)"
        )
    if autoreset_mode is not None:
        raise ValueError(
            "make_vec_env: autoreset_mode can only be chosen with mode='sync' or 'async' "
            f"(vector entry points fix their own), got {autoreset_mode!r}"
        )
    return mode, {}


def _vector_entry_point_takes(spec: EnvSpec, env_kwargs: Mapping[str, Any]) -> bool:
    """Whether the vector entry point of ``spec`` accepts ``env_kwargs`` (ale_py's does not take ``obs_type``)."""
    entry = spec.vector_entry_point
    creator = entry if callable(entry) else load_env_creator(entry)
    params = inspect.signature(creator).parameters
    return any(p.kind is p.VAR_KEYWORD for p in params.values()) or set(env_kwargs) <= set(params)


@dataclass(frozen=True, kw_only=True)
class VecEnvSpec:
    """What a collector needs to know about a vector env (see :func:`vec_env_spec`)."""

    num_envs: int
    """Number of env copies."""
    observation_fields: tuple[ObservationField, ...]
    """The stored entries of one env copy's observation: one with path ``()`` for a non-Dict space,
    one per leaf key for a Dict; each with its shape and stored dtype (``torch.uint8`` for images:
    pixels stay bytes in batches and replay and the network scales them; int64 for Discrete)."""
    action_shape: tuple[int, ...]
    """Shape of one env copy's action: ``()`` for Discrete, ``(k,)`` for MultiDiscrete and 1-D Box."""
    action_dtype: torch.dtype
    """``torch.int64`` for Discrete and MultiDiscrete actions, ``torch.float32`` for Box."""
    num_actions: int | None
    """Number of discrete actions, ``None`` for MultiDiscrete and Box actions."""
    autoreset_mode: AutoresetMode
    """``NEXT_STEP`` (the step after a done is a reset step) or ``SAME_STEP``."""

    @property
    def observation_shape(self) -> tuple[int, ...] | None:
        """Shape of one env copy's observation; ``None`` for a Dict observation."""
        (first, *rest) = self.observation_fields
        return None if rest or first.path else first.shape

    @property
    def discrete(self) -> bool:
        """Whether actions are discrete indices."""
        return self.num_actions is not None


def vec_env_spec(env: VectorEnv, *, owner: str = "vec_env_spec") -> VecEnvSpec:
    """Read and check the spaces and autoreset mode of a gymnasium vector env.

    Args:
        env: a ``gymnasium.vector.VectorEnv`` with an observation space that
            :func:`~engine_rl.collectors.observations.observation_fields` accepts and a Discrete,
            1-D MultiDiscrete or Box action space, autoresetting (next-step or same-step).
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
    fields = observation_fields(env.single_observation_space, owner=owner)
    act_space = env.single_action_space
    if isinstance(act_space, gym.spaces.Discrete):
        action_shape, action_dtype, num_actions = (), torch.int64, int(act_space.n)
    elif is_multi_discrete(act_space):
        action_shape, action_dtype, num_actions = tuple(act_space.shape), torch.int64, None
    elif isinstance(act_space, gym.spaces.Box):
        action_shape, action_dtype, num_actions = tuple(act_space.shape), torch.float32, None
    else:
        raise ValueError(f"{owner}: the action space must be Discrete, 1-D MultiDiscrete or Box, got {act_space}")
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    mode = AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)
    if mode is AutoresetMode.DISABLED:
        raise ValueError(
            f"{owner}: the env must autoreset (NEXT_STEP or SAME_STEP), got AutoresetMode.DISABLED"
        )
    return VecEnvSpec(
        num_envs=num_envs,
        observation_fields=fields,
        action_shape=action_shape,
        action_dtype=action_dtype,
        num_actions=num_actions,
        autoreset_mode=mode,
    )

