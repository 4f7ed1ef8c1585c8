"""The ``engine-rl`` command; each sub-command lives in :mod:`engine_rl.commands`."""

from __future__ import annotations

import argparse
import importlib

from engine_rl.commands import COMMANDS

__all__ = ["main", "build_parser"]


def _command(name: str):
    return importlib.import_module(f"engine_rl.commands.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engine-rl", description="Event-driven RL training on pytorch-ignite.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        _command(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _command(args.command).run(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
