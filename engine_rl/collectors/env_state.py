"""Capture and restore the state of gymnasium vector envs, so a collector resumes mid-episode.

Gymnasium envs keep their state in plain attributes: CartPole's numpy-vectorized env holds
``state``, ``steps``, ``prev_done`` and ``np_random``; a ``SyncVectorEnv`` holds one env per copy,
each behind wrappers (``TimeLimit._elapsed_steps``, ``OrderEnforcing._has_reset``, ...), plus
its own autoreset flags. :func:`get_env_state` walks the vector env, its wrappers and (for
``SyncVectorEnv``) every sub-env and wrapper layer, and records each attribute it can encode:

- ``None``, bools, ints, floats, strings, and lists/tuples/deques of encodable values;
- numpy arrays and scalars (raw bytes + dtype + shape, so they come back bit for bit);
- ``numpy.random.Generator`` (its bit generator's state: a dict of ints and strings);
- torch tensors (copied);
- gymnasium spaces: only their random generator (``Space.sample`` draws).

Everything else (sub-envs, specs, render objects, dicts) is skipped. The result holds
only tensors, numbers, strings and plain containers, so ``torch.load(..., weights_only=True)``
reads it. :func:`set_env_state` writes the attributes back (arrays in place when they match).

Native simulators are recorded through their own APIs: a MuJoCo env's physics (its ``model``
and ``data`` attributes) with ``mujoco.mj_getState`` (``mjSTATE_INTEGRATION``: everything
``mj_step`` reads, warm start included) and ``mj_setState``; an Atari env's emulator (its ``ale``)
with ``cloneState(include_rng=True)`` serialized to bytes and ``restoreState``. Deques (the frame
stack of ``FrameStackObservation``) are recorded as lists. So MuJoCo and Atari runs resume exactly.

Limits: ``AsyncVectorEnv`` runs its envs in subprocesses and EnvPool in C++ threads: neither is
supported (:class:`UnsupportedEnvState`, :func:`unsupported_reason`); envs whose state lives in
other objects (another native simulator, a ``random.Random``) are not restored exactly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium.spaces import Space

__all__ = ["UnsupportedEnvState", "get_env_state", "seed_spaces", "set_env_state", "unsupported_reason"]

#: Attributes never recorded: links to other layers, configuration objects, render handles.
_SKIP = frozenset({"env", "envs", "env_fns", "spec", "metadata", "_saved_kwargs", "_cached_spec", "unwrapped"})


class UnsupportedEnvState(TypeError):
    """The env's state cannot be captured (e.g. an ``AsyncVectorEnv``)."""


class _Skip(Exception):
    pass


def _encode(value: Any) -> Any:
    # numpy scalars first: numpy.float64 is also a Python float, but torch.load(weights_only=True)
    # refuses it (MountainCar keeps its state as a tuple of them)
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise _Skip
        raw = torch.from_numpy(np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8).copy())
        return {"__ndarray__": raw, "dtype": array.dtype.str, "shape": list(array.shape),
                "scalar": isinstance(value, np.generic)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Space):
        rng = value._np_random  # None until seeded or sampled
        return {"__space__": None if rng is None else rng.bit_generator.state}
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, deque):
        return {"__deque__": [_encode(v) for v in value], "maxlen": value.maxlen}
    raise _Skip


def _generator(state: dict[str, Any], current: Any = None) -> np.random.Generator:
    if not isinstance(current, np.random.Generator) or current.bit_generator.state["bit_generator"] != state["bit_generator"]:
        current = np.random.Generator(getattr(np.random, state["bit_generator"])())
    current.bit_generator.state = state
    return current


def _decode(value: Any, current: Any = None) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            array = np.frombuffer(value["__ndarray__"].numpy().tobytes(), dtype=np.dtype(value["dtype"]))
            array = array.reshape(value["shape"])
            if value.get("scalar"):
                return array[()]
            if (
                isinstance(current, np.ndarray)
                and current.shape == array.shape
                and current.dtype == array.dtype
                and current.flags.writeable
            ):
                current[...] = array  # keep arrays the env may hold references to
                return current
            return array.copy()
        if "__generator__" in value:
            return _generator(value["__generator__"], current)
        if "__deque__" in value:
            items = [_decode(v) for v in value["__deque__"]]
            if isinstance(current, deque) and current.maxlen == value["maxlen"]:
                current.clear()
                current.extend(items)
                return current
            return deque(items, maxlen=value["maxlen"])
        if "__space__" in value:
            if isinstance(current, Space):
                state = value["__space__"]
                current._np_random = None if state is None else _generator(state, current._np_random)
            return current
        raise ValueError(f"set_env_state: unknown encoded value with keys {sorted(value)}")
    if isinstance(value, (list, tuple)):
        cur = list(current) if isinstance(current, (list, tuple)) and len(current) == len(value) else [None] * len(value)
        items = [_decode(v, c) for v, c in zip(value, cur)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, torch.Tensor):
        if isinstance(current, torch.Tensor) and current.shape == value.shape and current.dtype == value.dtype:
            current.copy_(value)
            return current
        return value.clone()
    return value


def _mujoco(obj: Any) -> tuple[Any, Any, Any] | None:
    """``(mujoco, model, data)`` if ``obj`` holds a MuJoCo model and data (gymnasium's MujocoEnv), else None."""
    model, data = vars(obj).get("model"), vars(obj).get("data")
    if model is None or data is None or type(data).__module__.split(".")[0] != "mujoco":
        return None
    import mujoco

    if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
        return None
    return mujoco, model, data


def _layer_state(obj: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if name in _SKIP:
            continue
        try:
            attrs[name] = _encode(value)
        except _Skip:
            continue
    state: dict[str, Any] = {"class": type(obj).__qualname__, "attrs": attrs}
    physics = _mujoco(obj)
    if physics is not None:
        mujoco, model, data = physics
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        array = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
        mujoco.mj_getState(model, data, array, spec)
        state["mujoco"] = torch.from_numpy(array)
    if _is_ale(vars(obj).get("ale")):
        emulator = obj.ale.cloneState(include_rng=True).serialize()
        state["ale"] = torch.frombuffer(bytearray(emulator), dtype=torch.uint8)
    return state


def _is_ale(value: Any) -> bool:
    """Whether ``value`` is an Arcade Learning Environment interface (an Atari env's ``ale``)."""
    return type(value).__module__.split(".")[0] == "ale_py" and type(value).__name__ == "ALEInterface"


def _set_layer(obj: Any, state: dict[str, Any], where: str) -> None:
    if type(obj).__qualname__ != state["class"]:
        raise ValueError(
            f"set_env_state: {where} is a {type(obj).__qualname__}, but the state was saved from a {state['class']}"
        )
    for name, value in state["attrs"].items():
        current = getattr(obj, name, None) if name in vars(obj) else None
        decoded = _decode(value, current)
        if decoded is not current:
            setattr(obj, name, decoded)
    if "mujoco" in state:
        physics = _mujoco(obj)
        if physics is None:
            raise ValueError(f"set_env_state: {where} was saved with MuJoCo physics but holds no MuJoCo model and data")
        mujoco, model, data = physics
        array = state["mujoco"].numpy()
        if array.shape[0] != mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION):
            raise ValueError(f"set_env_state: {where}: the saved MuJoCo state does not fit this model")
        mujoco.mj_setState(model, data, array, mujoco.mjtState.mjSTATE_INTEGRATION)
    if "ale" in state:
        if not _is_ale(vars(obj).get("ale")):
            raise ValueError(f"set_env_state: {where} was saved with an Atari emulator state but holds no emulator")
        import ale_py

        obj.ale.restoreState(ale_py.ALEState(state["ale"].numpy().tobytes()))


def _chain(env: Any) -> Iterator[Any]:
    """The env and the layers it wraps (``.env`` links), outermost first."""
    seen = set()
    while env is not None and id(env) not in seen:
        seen.add(id(env))
        yield env
        env = vars(env).get("env")


def _sub_envs(vector_env: Any) -> list[Any] | None:
    envs = vars(vector_env).get("envs")
    return list(envs) if isinstance(envs, (list, tuple)) else None


def seed_spaces(env: Any, seed: int) -> None:
    """Seed the action and observation spaces (batched and single) of every layer of a vector env
    and of its env copies.

    Gymnasium seeds a space it has not been given a seed for from OS entropy, and a wrapper
    (``ClipAction``) holds spaces of its own in front of the env's: seeding only the outermost
    layer leaves the inner spaces' generators, which :func:`get_env_state` records, differing
    between two identical runs.
    """
    names = ("action_space", "single_action_space", "observation_space", "single_observation_space")
    layers = list(_chain(env))
    for sub in _sub_envs(layers[-1]) or ():  # and each copy's wrappers (FrameStackObservation's space)
        layers += _chain(sub)
    for layer in layers:
        for name in names:
            space = vars(layer).get(name, vars(layer).get(f"_{name}"))
            if isinstance(space, Space):
                space.seed(seed)


def unsupported_reason(env: Any) -> str | None:
    """Why :func:`get_env_state` cannot record the vector env ``env`` (or its layers), or None if it can.

    ``AsyncVectorEnv`` runs its envs in subprocesses; a vector env class that keeps its copies'
    state out of reach says why in a ``state_unsupported`` class attribute
    (:class:`~engine_rl.collectors.envpool_env.EnvPoolVectorEnv`).

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> unsupported_reason(make_vec_env("CartPole-v1", 2)) is None
        True
    """
    base = list(_chain(env))[-1]
    if hasattr(base, "parent_pipes"):
        return (f"{type(base).__name__} runs its envs in subprocesses; their state cannot be captured "
                "(use vectorization 'sync' or 'vector_entry_point' for exact resume)")
    reason = getattr(type(base), "state_unsupported", None)
    return reason if isinstance(reason, str) else None


def get_env_state(env: Any) -> dict[str, Any]:
    """Record the state of a gymnasium vector env (see the module docstring).

    Args:
        env: a ``gymnasium.vector.VectorEnv`` (numpy-vectorized or ``SyncVectorEnv``, possibly
            wrapped).

    Returns:
        ``{"vector": [layer, ...], "envs": [[layer, ...] per copy] or None}``, each layer
        ``{"class": name, "attrs": {...}}``; only tensors, numbers, strings and containers.

    Raises:
        UnsupportedEnvState: for ``AsyncVectorEnv`` (its envs live in other processes).

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> env = make_vec_env("CartPole-v1", 2)
        >>> _ = env.reset(seed=0)
        >>> state = get_env_state(env)
        >>> first = env.step(np.array([0, 1]))[0]
        >>> _ = env.step(np.array([1, 1]))
        >>> set_env_state(env, state)
        >>> bool((env.step(np.array([0, 1]))[0] == first).all())
        True
    """
    layers = list(_chain(env))
    base = layers[-1]
    reason = unsupported_reason(env)
    if reason is not None:
        raise UnsupportedEnvState(f"get_env_state: {reason}")
    subs = _sub_envs(base)
    return {
        "vector": [_layer_state(layer) for layer in layers],
        "envs": None if subs is None else [[_layer_state(layer) for layer in _chain(sub)] for sub in subs],
    }


def set_env_state(env: Any, state: dict[str, Any]) -> None:
    """Restore what :func:`get_env_state` recorded into an env built the same way.

    Raises:
        ValueError: naming the layer or env copy whose class or count differs from the saved one.
    """
    layers = list(_chain(env))
    saved = state["vector"]
    if len(layers) != len(saved):
        raise ValueError(
            f"set_env_state: the env has {len(layers)} layers ({[type(x).__qualname__ for x in layers]}), "
            f"the state was saved from {len(saved)} ({[s['class'] for s in saved]})"
        )
    for i, (layer, layer_state) in enumerate(zip(layers, saved)):
        if type(layer).__qualname__ != layer_state["class"]:
            raise ValueError(
                f"set_env_state: vector env layer {i} is a {type(layer).__qualname__}, but the state was saved "
                f"from a {layer_state['class']}"
            )
    subs = _sub_envs(layers[-1])
    saved_subs = state.get("envs")
    if (subs is None) != (saved_subs is None) or (subs is not None and len(subs) != len(saved_subs)):
        n_now = None if subs is None else len(subs)
        n_saved = None if saved_subs is None else len(saved_subs)
        raise ValueError(f"set_env_state: the env has {n_now} sub-envs, the state was saved from {n_saved}")
    for i, (layer, layer_state) in enumerate(zip(layers, saved)):
        _set_layer(layer, layer_state, f"vector env layer {i}")
    if subs is not None:
        for i, (sub, sub_state) in enumerate(zip(subs, saved_subs)):
            chain = list(_chain(sub))
            if len(chain) != len(sub_state):
                raise ValueError(
                    f"set_env_state: env copy {i} has {len(chain)} wrapper layers, the state was saved from "
                    f"{len(sub_state)}"
                )
            for j, (layer, layer_state) in enumerate(zip(chain, sub_state)):
                _set_layer(layer, layer_state, f"env copy {i} layer {j}")
