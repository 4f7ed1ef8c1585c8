"""The seeds the tests give to runs, shifted by the suite's seed offset.

A test writes ``seed(1)`` where it would write the seed ``1`` (``--seed``, a config's ``seed=``, a
collector's, a sampler's, an evaluation's), and derives any fact that depends on the seed from
that value. ``python -m pytest --seed-offset 3`` (or ``ENGINE_RL_TEST_SEED_OFFSET=3``; the option
wins; default 0) then runs the same tests on other seeds: what holds on every CPU holds on every
seed too, and a learning test's margin can be checked over several. ``tests/conftest.py`` reads
the option at start-up and puts the offset in the environment, where processes the tests start
read it too.

Examples:
    >>> seed(1) == 1 + offset() and seed_arg(1) == str(seed(1))
    True
"""

from __future__ import annotations

import os

__all__ = ["ENV", "offset", "parse_offset", "seed", "seed_arg", "shift_seed_args"]

#: The environment variable holding the offset (``--seed-offset`` sets it for the test session).
ENV = "ENGINE_RL_TEST_SEED_OFFSET"


def parse_offset(value: str, *, where: str) -> int:
    """``value`` as an offset (an int >= 0); ``ValueError`` naming ``where`` otherwise."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"{where} must be an int >= 0, got {value!r}")
    return number


def offset() -> int:
    """The suite's seed offset: ``ENGINE_RL_TEST_SEED_OFFSET``, 0 when unset."""
    return parse_offset(os.environ.get(ENV, "0") or "0", where=ENV)


def seed(base: int) -> int:
    """The seed a test gives where it would give ``base``: ``base`` plus the offset."""
    return base + offset()


def seed_arg(base: int) -> str:
    """:func:`seed` as a command-line argument (``"--seed", seed_arg(1)``)."""
    return str(seed(base))


def shift_seed_args(args: list[str]) -> list[str]:
    """A copy of command-line ``args`` whose ``--seed N`` reads ``--seed`` :func:`seed` ``(N)``.

    Examples:
        >>> shift_seed_args(["--frames", "10", "--seed", "2"]) == ["--frames", "10", "--seed", seed_arg(2)]
        True
    """
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == "--seed":
            out[i + 1] = seed_arg(int(out[i + 1]))
    return out
