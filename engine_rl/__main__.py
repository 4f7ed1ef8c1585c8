"""``python -m engine_rl`` is the ``engine-rl`` command."""

from engine_rl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
