import math
import re

import numpy as np
import pytest

from engine_rl import checks

OWNER = dict(name="argument n", owner="Demo")


def refused(function, value, accepted, **kwargs):
    """``function(value)`` raises the ValueError ``Demo: argument n must be <accepted>, got <value!r>``."""
    with pytest.raises(ValueError, match=f"^{re.escape(f'Demo: argument n must be {accepted}, got {value!r}')}$"):
        function(value, **OWNER, **kwargs)


def test_is_int_and_is_number_refuse_bools():
    assert checks.is_int(3) and checks.is_int(np.int64(3)) and checks.is_int(-1)
    assert not checks.is_int(True) and not checks.is_int(3.0) and not checks.is_int("3") and not checks.is_int(None)
    assert checks.is_number(3) and checks.is_number(0.5) and checks.is_number(np.float32(0.5))
    assert checks.is_number(math.nan) and checks.is_number(math.inf)
    assert not checks.is_number(False) and not checks.is_number("0.5") and not checks.is_number(None)


def test_fail_names_owner_argument_accepted_and_value():
    with pytest.raises(ValueError, match=r"^Demo: argument n must be in \[0, 1\], got 'x'$"):
        checks.fail("x", "in [0, 1]", **OWNER)


def test_positive_int():
    assert checks.positive_int(1, **OWNER) == 1
    value = checks.positive_int(np.int64(5), **OWNER)
    assert value == 5 and type(value) is int
    assert checks.positive_int(None, **OWNER, optional=True) is None
    for value in (0, -3, True, 2.0, "2", None):
        refused(checks.positive_int, value, "a positive int")
    refused(checks.positive_int, 0, "a positive int or None", optional=True)
    refused(checks.positive_int, False, "a positive int or None", optional=True)


def test_nonnegative_int():
    assert checks.nonnegative_int(0, **OWNER) == 0
    assert checks.nonnegative_int(None, **OWNER, optional=True) is None
    for value in (-1, False, 0.0, None):
        refused(checks.nonnegative_int, value, "a non-negative int")
    refused(checks.nonnegative_int, -2, "a non-negative int or None", optional=True)


def test_int_in():
    assert checks.int_in(0, 0, 4, **OWNER) == 0 and checks.int_in(4, 0, 4, **OWNER) == 4
    for value in (-1, 5, True, 1.0):
        refused(checks.int_in, value, "an int in [0, 4]", low=0, high=4)


def test_positive_number():
    value = checks.positive_number(2, **OWNER)
    assert value == 2.0 and type(value) is float
    assert checks.positive_number(math.inf, **OWNER) == math.inf
    assert checks.positive_number(None, **OWNER, optional=True) is None
    for value in (0, -0.5, math.nan, True, "1", None):
        refused(checks.positive_number, value, "a positive number")
    refused(checks.positive_number, 0.0, "a positive number or None", optional=True)
    assert checks.positive_number(1e-3, **OWNER, finite=True) == 1e-3
    for value in (math.inf, math.nan, 0, -1.0, True):
        refused(checks.positive_number, value, "a positive finite number", finite=True)


def test_nonnegative_number():
    assert checks.nonnegative_number(0, **OWNER) == 0.0
    assert checks.nonnegative_number(math.inf, **OWNER) == math.inf
    for value in (-1, -0.1, math.nan, False, None):
        refused(checks.nonnegative_number, value, "a non-negative number")


def test_finite_number():
    assert checks.finite_number(-2, **OWNER) == -2.0
    for value in (math.nan, math.inf, -math.inf, True, "1"):
        refused(checks.finite_number, value, "a finite number")


def test_fraction():
    assert checks.fraction(0, **OWNER) == 0.0 and checks.fraction(1, **OWNER) == 1.0
    assert checks.fraction(None, **OWNER, optional=True) is None
    for value in (-0.1, 1.5, math.nan, math.inf, True, "0.5"):
        refused(checks.fraction, value, "a number in [0, 1]")
    assert checks.fraction(0.5, **OWNER, zero=False) == 0.5
    refused(checks.fraction, 0, "a number in (0, 1]", zero=False)
    refused(checks.fraction, 0.0, "a number in (0, 1] or None", zero=False, optional=True)
