"""The ``engine-rl`` command; each sub-command lives in :mod:`engine_rl.commands`.

Every failure ends in one line on stderr, ``engine-rl: error: ...``, naming what was wrong,
and an exit status: 2 for bad input (arguments, config fields, files that cannot be used),
1 for a run that failed. ``--debug`` (before or after the sub-command) shows the traceback
instead. Python warnings print as one line too, ``engine-rl: warning: ...``. Ignite's own log
lines about a run ending on an exception ("Current run is terminating due to exception", ...)
repeat that error, so they are shown only with ``--debug``; so are ``--nproc``'s lines about
spawning and terminating processes.

Examples:
    >>> main(["train", "dqn-cartpole", "--set", "gamma=2"])  # stderr: the line below
    2

    prints ``engine-rl: error: DQNConfig: gamma must be a number in [0, 1], got 2.0``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from engine_rl.commands import COMMANDS, fail, one_line_output

__all__ = ["main", "build_parser"]


def _command(name: str):
    return importlib.import_module(f"engine_rl.commands.{name}")


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one ``engine-rl: error:`` line (status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        where = self.prog.removeprefix("engine-rl").strip()
        self.exit(2, f"engine-rl: error: {where + ': ' if where else ''}{message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="engine-rl", description="Event-driven RL training on pytorch-ignite.")
    parser.add_argument("--debug", action="store_true", help="on an error, show the traceback")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        _command(name).add_parser(sub)
    for command in sub.choices.values():  # `engine-rl train ... --debug` too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="on an error, show the traceback")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``engine-rl`` with ``argv``; return the exit status (0 ok, 2 bad input, 1 failed run)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed as one line
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        with one_line_output(debug=args.debug):
            return _command(args.command).run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("engine-rl: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # the last resort: nothing leaves as a raw traceback without --debug
        return fail(err, debug=args.debug)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
