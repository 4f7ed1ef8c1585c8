"""Sub-commands of ``engine-rl``: each module has ``add_parser(subparsers)`` and ``run(args) -> int``.

A new sub-command is one new module listed in :data:`COMMANDS`. A command reports a failure
with :func:`fail` (one ``engine-rl: error: ...`` line, or the traceback with ``--debug``), or
lets the exception reach :func:`engine_rl.cli.main`, which does the same.
"""

from __future__ import annotations

import sys

__all__ = ["COMMANDS", "fail", "one_line"]

COMMANDS = ("train", "eval", "recipes", "dashboard")


def one_line(err: BaseException) -> str:
    """``err``'s message on one line: its first non-empty line, prefixed by its type unless it is
    a ``ValueError`` or one of this project's errors (whose messages name the problem).

    Examples:
        >>> one_line(ValueError("DQNConfig: lr must be a positive finite number, got nan"))
        'DQNConfig: lr must be a positive finite number, got nan'
        >>> one_line(KeyError("observation"))
        "KeyError: 'observation'"
        >>> one_line(RuntimeError("the server did not start: address in use\\n<its log>"))
        'RuntimeError: the server did not start: address in use'
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    message = lines[0] if lines else ""
    if _expected(err) and message:
        return message
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


def _expected(err: BaseException) -> bool:
    """A ``ValueError`` (bad input) or an error of this project, whose message says it all."""
    return isinstance(err, ValueError) or type(err).__module__.split(".")[0] in ("engine_rl", "handlers")


def fail(err: BaseException, status: int | None = None, *, debug: bool = False, who: str = "") -> int:
    """Print ``err`` as one line, ``engine-rl: error<who>: <message>``, on stderr and return the
    exit status; with ``debug``, re-raise ``err`` instead (the traceback).

    Args:
        err: the exception (call from its ``except`` block).
        status: the exit status; default 2 for a ``ValueError`` (bad input), else 1 (a failed run).
        debug: the ``--debug`` flag.
        who: put after ``error``, e.g. ``" (rank 1 of 2)"``.

    Examples:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     fail(ValueError("--threads must be >= 1, got 0"))
        2
        >>> err.getvalue()
        'engine-rl: error: --threads must be >= 1, got 0\\n'
    """
    if debug:
        raise err
    if status is None:
        status = 2 if isinstance(err, ValueError) else 1
    hint = "" if _expected(err) else " (--debug shows the traceback)"
    print(f"engine-rl: error{who}: {one_line(err)}{hint}", file=sys.stderr, flush=True)
    return status
