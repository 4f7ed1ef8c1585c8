"""Keys shared by the engine, replay and handlers, and one error format for a missing TensorDict key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tensordict import TensorDictBase

__all__ = ["MASK_KEY", "NestedKey", "flatten_keys", "format_key", "nest_keys", "present_keys", "require_keys"]

NestedKey = str | tuple[str, ...]

#: Optional boolean entry of a batch, shaped like it, marking its valid frames: the trainer counts
#: only those, a replay buffer stores only those (and never stores the mask itself).
MASK_KEY = ("collector", "mask")


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
