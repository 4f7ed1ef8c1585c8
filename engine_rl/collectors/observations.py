"""How one env copy's observation space maps to batch entries: :func:`observation_fields`.

A Box, Discrete, MultiBinary or MultiDiscrete observation is one entry, ``"observation"``. A
``Dict`` observation is one entry per leaf key under ``"observation"`` (``("observation", "image")``;
nested Dicts nest further, ``("observation", "arm", "joints")``), so batches and replay hold a nested
TensorDict and a network reads each key with its own encoder
(:func:`~engine_rl.algos.encoders.make_encoder`). Stored dtypes: uint8 Boxes (images, Atari RAM)
stay uint8, other Boxes and MultiBinary are float32,
Discrete and MultiDiscrete indices are int64. Other spaces (Text, Tuple, Sequence, Graph) cannot be
stored: :func:`observation_fields` refuses them, naming the key that holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from engine_rl.keys import NestedKey, format_key, nest_keys

__all__ = ["ObservationField", "field_key", "nest_paths", "observation_fields", "pick", "stack_final"]

#: What a leaf of the observation space may be, for error messages.
STORABLE = "Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict of these"


@dataclass(frozen=True)
class ObservationField:
    """One stored entry of an observation: a leaf of the space."""

    path: tuple[str, ...]
    """Keys from the observation to the leaf: ``()`` for a non-Dict observation."""
    shape: tuple[int, ...]
    """Shape of the leaf in one env copy (``()`` for Discrete)."""
    dtype: torch.dtype
    """Stored dtype: uint8 for uint8 Boxes (images, Atari RAM), int64 for Discrete and MultiDiscrete, else float32."""


def observation_fields(space: gym.Space, *, owner: str = "observation_fields") -> tuple[ObservationField, ...]:
    """The stored entries of observations from ``space``, in the space's key order.

    Examples:
        >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "door": gym.spaces.Discrete(3)})
        >>> [(f.path, f.shape, f.dtype) for f in observation_fields(space)]
        [(('door',), (), torch.int64), (('pos',), (2,), torch.float32)]
        >>> observation_fields(gym.spaces.Dict({"note": gym.spaces.Text(5)}), owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: observation key 'note' is Text(1, 5, charset=...), which cannot be stored; each leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict of these; drop the key (wrappers=FilterObservation(filter_keys=[...]))
    """
    fields: list[ObservationField] = []
    _collect(space, (), fields, owner)
    return tuple(fields)


def _collect(space: gym.Space, path: tuple[str, ...], out: list[ObservationField], owner: str) -> None:
    if isinstance(space, gym.spaces.Dict):
        if not space.spaces:
            raise ValueError(f"{owner}: observation {_where(path)}is an empty Dict")
        for key, sub in space.spaces.items():
            if not isinstance(key, str):
                raise ValueError(f"{owner}: observation Dict keys must be strings, got {key!r} {_where(path)}")
            _collect(sub, (*path, key), out, owner)
        return
    if isinstance(space, gym.spaces.Box):
        dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
    elif isinstance(space, gym.spaces.Discrete):
        dtype = torch.int64
    elif isinstance(space, gym.spaces.MultiBinary):
        dtype = torch.float32
    elif isinstance(space, gym.spaces.MultiDiscrete) and len(space.nvec.shape) == 1:
        dtype = torch.int64
    else:
        what = f"observation key {format_key(path)!r}" if path else "the observation space"
        hint = ("; drop the key (wrappers=FilterObservation(filter_keys=[...]))" if path else
                "; flatten it (wrappers=FlattenObservation: Discrete, Tuple and Dict spaces to a 1-D Box)")
        raise ValueError(f"{owner}: {what} is {space}, which cannot be stored; each leaf must be a {STORABLE}{hint}")
    out.append(ObservationField(path, tuple(int(d) for d in space.shape), dtype))



def _where(path: tuple[str, ...]) -> str:
    return f"(under key {format_key(path)!r}) " if path else ""


def field_key(prefix: tuple[str, ...], field: ObservationField) -> NestedKey:
    """The batch key of ``field`` under ``prefix``: ``("next", "observation", "pos")``; a one-part key is a str."""
    key = (*prefix, *field.path)
    return key[0] if len(key) == 1 else key


def pick(obs: Any, path: tuple[str, ...]) -> Any:
    """The leaf at ``path`` in an observation (the observation itself for ``()``)."""
    for key in path:
        obs = obs[key]
    return obs


def stack_final(final_obs: np.ndarray, path: tuple[str, ...]) -> np.ndarray:
    """Stack the leaf at ``path`` of per-copy observations (gymnasium's ``info["final_obs"][idx]``)."""
    return np.stack([pick(obs, path) for obs in final_obs])


def nest_paths(leaves: Mapping[tuple[str, ...], Any]) -> Any:
    """``{(): x}`` -> ``x``; ``{("a",): x, ("b", "c"): y}`` -> ``{"a": x, "b": {"c": y}}``."""
    return leaves[()] if () in leaves else nest_keys(leaves)
