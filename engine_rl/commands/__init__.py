"""Sub-commands of ``engine-rl``: each module has ``add_parser(subparsers)`` and ``run(args) -> int``.

A new sub-command is one new module listed in :data:`COMMANDS`. A command reports a failure
with :func:`fail` (one ``engine-rl: error: ...`` line, or the traceback with ``--debug``), or
lets the exception reach :func:`engine_rl.cli.main`, which does the same.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator

__all__ = ["COMMANDS", "fail", "one_line", "one_line_output"]

COMMANDS = ("train", "eval", "tune", "recipes", "dashboard")


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


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Python warnings as one line, ``engine-rl: warning: <category>: <message>``."""
    text = " ".join(str(message).split())
    print(f"engine-rl: warning: {category.__name__}: {text}", file=file or sys.stderr, flush=True)


_SPAWN_LOGGERS = ("ignite.distributed.launcher.Parallel", "torch.multiprocessing.spawn")
"""Loggers with their own level (set when ``--nproc`` spawns): "spawning 2 processes", "terminating process 123"."""


def _below_critical(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.CRITICAL


@contextlib.contextmanager
def _library_logs(*, shown: bool):
    """Ignite's log lines and ``--nproc``'s process-spawning lines, hidden unless ``shown`` (restored after).

    ``ignite`` gets a level that its child loggers inherit; the spawning loggers set their own
    level when they are made, so a filter drops their records instead.
    """
    if shown:
        yield
        return
    logger = logging.getLogger("ignite")
    before = logger.level
    spawn_loggers = [logging.getLogger(name) for name in _SPAWN_LOGGERS]
    logger.setLevel(logging.CRITICAL)
    for spawn_logger in spawn_loggers:
        spawn_logger.addFilter(_below_critical)
    try:
        yield
    finally:
        logger.setLevel(before)
        for spawn_logger in spawn_loggers:
            spawn_logger.removeFilter(_below_critical)


@contextlib.contextmanager
def one_line_output(*, debug: bool) -> Iterator[None]:
    """While the block runs, Python warnings print as one line each (``engine-rl: warning: ...``)
    and library log lines are hidden unless ``debug``: in ``engine-rl`` itself and in each process
    that ``--nproc`` spawns (a spawned process starts with Python's defaults)."""
    with warnings.catch_warnings(), _library_logs(shown=debug):
        warnings.showwarning = _show_warning
        yield

