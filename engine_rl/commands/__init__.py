"""Sub-commands of ``engine-rl``: each module has ``add_parser(subparsers)`` and ``run(args) -> int``.

A new sub-command is one new module listed in :data:`COMMANDS`.
"""

COMMANDS = ("train", "eval", "recipes", "dashboard")
