"""Scalars from a gymnasium vector env's ``info`` dict, one float per env copy and step.

Vector envs return ``info`` as a dict of arrays ``[num_envs]``, each with a boolean mask under
``"_" + key`` saying which copies reported it this step. With same-step autoreset, the copies
that just finished report their last step under ``info["final_info"]`` and ``info`` itself holds
the reset step's entries. :func:`info_scalars` reads ``key`` the same way in both modes, giving
NaN for copies that did not report it, and checks that it is a number per copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import warnings

import numpy as np

__all__ = ["INFO_KEY", "InfoKeyWarning", "InfoKeysSeen", "info_scalars", "check_info_keys"]

#: Where a batch holds the recorded info scalars: ``("next", "info", key)``.
INFO_KEY = ("next", "info")


def check_info_keys(info_keys: Any, *, owner: str) -> tuple[str, ...]:
    """``info_keys`` as a tuple of non-empty strings, or a ValueError naming ``owner``."""
    if (isinstance(info_keys, str) or not isinstance(info_keys, Iterable)
            or not all(isinstance(k, str) and k for k in info_keys)):
        raise ValueError(f"{owner}: argument info_keys must be a sequence of non-empty strings, got {info_keys!r}")
    keys = tuple(info_keys)
    if len(set(keys)) != len(keys):
        raise ValueError(f"{owner}: argument info_keys has duplicates: {list(keys)}")
    return keys


class InfoKeyWarning(UserWarning):
    """A recorded info key that the env's ``info`` did not hold by the end of the first episode."""


class InfoKeysSeen:
    """Warns (:class:`InfoKeyWarning`) when a recorded info key is not in the env's ``info`` by
    the end of the first episode.

    A key that no step reported by then (in ``info`` or, with same-step autoreset, in
    ``info["final_info"]``) is most likely misspelled: it would record nothing (NaN), silently.
    It is a warning, not an error, since an env may report a key only on some episodes (a
    success flag set on success only). Call :meth:`step` with each step's ``info`` and done
    flags until :attr:`checked`.

    Args:
        info_keys: the keys to look for.
        owner: the component named in the warning.

    Examples:
        >>> import warnings
        >>> seen = InfoKeysSeen(["is_success"], owner="GymCollector")
        >>> seen.step({"lives": np.array([3])}, np.array([False]))
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     seen.step({"lives": np.array([3]), "_lives": np.array([True])}, np.array([True]))
        >>> print(caught[0].message)
        GymCollector: info_keys 'is_success' never appeared in the env's info by the end of the first episode; the info has: 'lives' (a misspelt key records nothing)
    """

    def __init__(self, info_keys: Iterable[str], *, owner: str) -> None:
        self.missing = set(info_keys)
        self.owner = owner
        self.present: set[str] = set()
        self.checked = not self.missing

    def step(self, info: Mapping[str, Any], done: np.ndarray) -> None:
        """Note ``info``'s keys; at the first episode end, warn naming the keys never seen and
        the keys the info had."""
        final = info.get("final_info")
        for entries in (info, final if isinstance(final, Mapping) else {}):
            self.present.update(k for k in entries if not k.startswith("_") and k not in ("final_info", "final_obs"))
        self.missing -= self.present
        if not self.missing:
            self.checked = True
        elif done.any():
            self.checked = True
            has = ", ".join(repr(k) for k in sorted(self.present)) or "no entries"
            warnings.warn(
                f"{self.owner}: info_keys {', '.join(repr(k) for k in sorted(self.missing))} never appeared in the "
                f"env's info by the end of the first episode; the info has: {has} (a misspelt key records nothing)",
                InfoKeyWarning, stacklevel=3,
            )


def _read(info: Mapping[str, Any], key: str, num_envs: int, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, reported) of ``key`` in ``info``; nothing reported if absent."""
    if key not in info:
        return np.full(num_envs, np.nan), np.zeros(num_envs, dtype=bool)
    try:
        values = np.asarray(info[key], dtype=np.float64).reshape(num_envs)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{owner}: env info {key!r} must hold one number per env copy (shape [{num_envs}]), "
            f"got {type(info[key]).__name__} {np.shape(info[key])}"
        ) from err
    mask = info.get("_" + key)
    reported = np.ones(num_envs, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(num_envs)
    return values, reported


def info_scalars(
    info: Mapping[str, Any], key: str, *, num_envs: int, done: np.ndarray, same_step: bool, owner: str
) -> np.ndarray:
    """``key``'s value per env copy for the step just taken (float64 ``[num_envs]``, NaN where unreported).

    Args:
        info: the ``info`` returned by ``env.step``.
        key: the entry to read.
        num_envs: number of env copies.
        done: which copies' episodes ended at this step.
        same_step: the env autoresets in the same step (finished copies report under ``final_info``).
        owner: the component named in errors.

    Examples:
        >>> info = {"x": np.array([1.0, 2.0]), "_x": np.array([True, False])}
        >>> info_scalars(info, "x", num_envs=2, done=np.zeros(2, bool), same_step=False, owner="demo")
        array([ 1., nan])
        >>> info = {"final_info": {"x": np.array([0.0, 7.0]), "_x": np.array([False, True])}}
        >>> info_scalars(info, "x", num_envs=2, done=np.array([False, True]), same_step=True, owner="demo")
        array([nan,  7.])
    """
    values, reported = _read(info, key, num_envs, owner)
    out = np.where(reported, values, np.nan)
    if same_step and done.any():
        final = info.get("final_info")
        if isinstance(final, Mapping):
            final_values, final_reported = _read(final, key, num_envs, owner)
            out = np.where(done, np.where(final_reported, final_values, np.nan), out)
        else:
            out = np.where(done, np.nan, out)
    return out
