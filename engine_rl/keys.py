"""Keys shared by the engine, replay and handlers, and one error format for a missing TensorDict key."""

from __future__ import annotations

from collections.abc import Iterable

from tensordict import TensorDictBase

__all__ = ["MASK_KEY", "NestedKey", "format_key", "present_keys", "require_keys"]

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
