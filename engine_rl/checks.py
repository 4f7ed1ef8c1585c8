"""Argument checks: each returns the value it accepts or raises a ``ValueError`` that names the
owner, the argument, what it accepts and the value it got, ``"<owner>: <name> must be <accepted>,
got <value!r>"``. ``name`` is the argument as the message names it (``"argument every"`` or
``"num_envs"``).

Ints are ``numbers.Integral`` and numbers ``numbers.Real``, never a bool; an accepted int comes
back as an ``int``, an accepted number as a ``float``. ``optional=True`` also accepts ``None``
(and says ``or None``).

Examples:
    >>> positive_int(4, name="argument every", owner="MetricsLogger")
    4
    >>> positive_int(True, name="argument every", owner="MetricsLogger")
    Traceback (most recent call last):
    ...
    ValueError: MetricsLogger: argument every must be a positive int, got True
    >>> fraction(float("nan"), name="gamma", owner="DQNLoss")
    Traceback (most recent call last):
    ...
    ValueError: DQNLoss: gamma must be a number in [0, 1], got nan
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NoReturn

__all__ = [
    "fail", "finite_number", "fraction", "int_in", "is_int", "is_number", "nonnegative_int", "nonnegative_number",
    "positive_int", "positive_number",
]


def is_int(value: Any) -> bool:
    """An int (``numbers.Integral``: also a numpy int), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A real number (``numbers.Real``: an int, a float, a numpy number), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def fail(value: Any, accepted: str, *, name: str, owner: str) -> NoReturn:
    """Raise ``ValueError("<owner>: <name> must be <accepted>, got <value!r>")``."""
    raise ValueError(f"{owner}: {name} must be {accepted}, got {value!r}")


def _int(value: Any, ok: bool, accepted: str, name: str, owner: str, optional: bool) -> int | None:
    if optional and value is None:
        return None
    if not ok:
        fail(value, accepted + (" or None" if optional else ""), name=name, owner=owner)
    return int(value)


def _number(value: Any, ok: bool, accepted: str, name: str, owner: str, optional: bool) -> float | None:
    if optional and value is None:
        return None
    if not ok:
        fail(value, accepted + (" or None" if optional else ""), name=name, owner=owner)
    return float(value)


def positive_int(value: Any, *, name: str, owner: str, optional: bool = False) -> int | None:
    """An int >= 1: ``"... must be a positive int, got 0"``."""
    return _int(value, is_int(value) and value >= 1, "a positive int", name, owner, optional)


def nonnegative_int(value: Any, *, name: str, owner: str, optional: bool = False) -> int | None:
    """An int >= 0: ``"... must be a non-negative int, got -1"``."""
    return _int(value, is_int(value) and value >= 0, "a non-negative int", name, owner, optional)


def int_in(value: Any, low: int, high: int, *, name: str, owner: str) -> int:
    """An int in ``[low, high]``: ``"... must be an int in [0, 65535], got -1"``."""
    if not (is_int(value) and low <= value <= high):
        fail(value, f"an int in [{low}, {high}]", name=name, owner=owner)
    return int(value)


def positive_number(value: Any, *, name: str, owner: str, finite: bool = False, optional: bool = False) -> float | None:
    """A number > 0 (not NaN; ``inf`` unless ``finite``): ``"... must be a positive [finite] number, got 0"``."""
    ok = is_number(value) and value > 0 and (not finite or math.isfinite(value))
    return _number(value, ok, "a positive finite number" if finite else "a positive number", name, owner, optional)


def nonnegative_number(value: Any, *, name: str, owner: str) -> float:
    """A number >= 0 (not NaN; ``inf`` accepted): ``"... must be a non-negative number, got -1"``."""
    if not (is_number(value) and value >= 0):
        fail(value, "a non-negative number", name=name, owner=owner)
    return float(value)


def finite_number(value: Any, *, name: str, owner: str) -> float:
    """A number, neither NaN nor infinite: ``"... must be a finite number, got nan"``."""
    if not (is_number(value) and math.isfinite(value)):
        fail(value, "a finite number", name=name, owner=owner)
    return float(value)


def fraction(value: Any, *, name: str, owner: str, zero: bool = True, optional: bool = False) -> float | None:
    """A number in [0, 1] (``zero=False``: in (0, 1]): ``"... must be a number in [0, 1], got 1.5"``."""
    ok = is_number(value) and (0 <= value if zero else 0 < value) and value <= 1
    return _number(value, ok, f"a number in {'[0' if zero else '(0'}, 1]", name, owner, optional)
