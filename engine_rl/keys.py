"""Keys shared by the engine, replay and handlers, and one error format for a missing TensorDict key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tensordict import TensorDictBase

__all__ = [
    "IS_INIT", "MASK_KEY", "NEXT_RECURRENT_STATE", "RECURRENT_STATE", "NestedKey", "flatten_keys", "format_key",
    "nest_keys", "present_keys", "recurrent_state_shape", "refuse_recurrent", "require_keys",
]

NestedKey = str | tuple[str, ...]

#: Optional boolean entry of a batch, shaped like it, marking its valid frames: the trainer counts
#: only those, a replay buffer stores only those (and never stores the mask itself).
MASK_KEY = ("collector", "mask")

#: A recurrent policy's state at each step, float32 ``[..., *recurrent_state_shape]``: the state it acted
#: from (zeros where an episode starts). :mod:`engine_rl.collectors.memory` says who writes what.
RECURRENT_STATE = "recurrent_state"
#: Bool ``[...]``: this step's observation is the first of its episode (a recurrent policy starts from zeros).
IS_INIT = "is_init"
#: A recurrent policy's state after its step (carried by the collector to the next step, not stored).
NEXT_RECURRENT_STATE = ("next", "recurrent_state")


def format_key(key: NestedKey) -> str:
    """``("next", "reward")`` -> ``'next.reward'``; ``"action"`` -> ``'action'``."""
    return ".".join(key) if isinstance(key, tuple) else key


def present_keys(td: TensorDictBase) -> list[str]:
    """The leaf keys of ``td``, formatted and sorted (for error messages)."""
    return sorted(format_key(k) for k in td.keys(include_nested=True, leaves_only=True))


def require_keys(td: TensorDictBase, keys: Iterable[NestedKey], *, consumer: str) -> None:
    """Raise a ``KeyError`` naming the missing keys, ``consumer`` and the keys present.

    Args:
        td: the TensorDict to check.
        keys: keys that must be present (strings or tuples for nested keys).
        consumer: who needs them, e.g. ``"DQNLoss"`` or ``"PriorityUpdater"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"observation": torch.zeros(2, 4)}, batch_size=[2])
        >>> require_keys(td, ["observation"], consumer="demo")
        >>> require_keys(td, [("next", "reward")], consumer="demo")
        Traceback (most recent call last):
        ...
        KeyError: "demo needs key(s) ['next.reward'] but the TensorDict has ['observation']"
    """
    missing = [format_key(k) for k in keys if k not in td.keys(include_nested=True)]
    if missing:
        raise KeyError(f"{consumer} needs key(s) {missing} but the TensorDict has {present_keys(td)}")


def nest_keys(flat: Mapping[NestedKey, Any]) -> dict[str, Any]:
    """``{("next", "reward"): x, "action": y}`` -> ``{"next": {"reward": x}, "action": y}``."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = (key,) if isinstance(key, str) else key
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return root


def flatten_keys(nested: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """``{"next": {"reward": x}}`` -> ``{("next", "reward"): x}`` (inverse of :func:`nest_keys`; keys are tuples)."""
    flat: dict[tuple[str, ...], Any] = {}
    for name, value in nested.items():
        if isinstance(value, Mapping):
            flat.update(flatten_keys(value, (*prefix, name)))
        else:
            flat[(*prefix, name)] = value
    return flat


def recurrent_state_shape(policy: Any) -> tuple[int, ...] | None:
    """A policy's ``recurrent_state_shape`` (one env copy's state) as a tuple; ``None`` for a
    feed-forward policy (it has no such attribute)."""
    shape = getattr(policy, "recurrent_state_shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


def refuse_recurrent(module: Any, *, owner: str, use: str) -> None:
    """A ``ValueError`` naming ``owner`` when ``module`` is a recurrent policy (what ``owner`` does
    not support); ``use`` says what to do instead."""
    if recurrent_state_shape(module) is not None:
        raise ValueError(
            f"{owner}: {type(module).__name__} is a recurrent policy (recurrent_state_shape "
            f"{recurrent_state_shape(module)}), which {owner} does not support; {use}"
        )
