"""The visdom server process: visdom's tornado application, bound to one address, offline.

Run by :class:`engine_rl.dashboard.VisdomServer` as ``python .../serve.py --port P`` (by path,
so the child does not import ``engine_rl`` and torch). Unlike ``python -m visdom.server`` it
never calls visdom's asset download (install the assets first:
:func:`engine_rl.dashboard.install_assets`), binds only ``--host`` (127.0.0.1 by default),
accepts ``--port 0`` (a free port) and prints one line once it accepts connections::

    engine-rl-dashboard ready http://127.0.0.1:8097

after which it writes nothing more to stdout; or, if it cannot start (the port is in use, a
missing package), one line ``engine-rl-dashboard failed REASON`` and exits with status 1. With
``--parent-pid`` it exits when that process is gone, so a crashed test run leaves no server behind.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any

READY = "engine-rl-dashboard ready"
FAILED = "engine-rl-dashboard failed"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Serve visdom offline (assets must be installed).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8097)
    p.add_argument("--env-path", default=None, help="where visdom saves envs (default ~/.visdom)")
    p.add_argument("--parent-pid", type=int, default=None)
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        loop = _start(args)
    except Exception as err:  # the parent reads the reason from this line
        print(f"{FAILED} {type(err).__name__}: {err}".replace("\n", " "), flush=True)
        return 1
    if loop is None:
        return 1
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # later prints go to the log, not the pipe
    try:
        loop.start()
    except KeyboardInterrupt:
        pass
    return 0


def _start(args: argparse.Namespace) -> Any:
    """Bind, build visdom's app and print the READY line; return the IO loop to run (``None``:
    the FAILED line is printed)."""
    # visdom imports torch if it can; the server never needs it (and it costs seconds).
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    import logging

    import tornado.httpserver
    import tornado.ioloop
    import tornado.netutil
    import visdom.server.app as visdom_app
    from visdom.server.defaults import DEFAULT_ENV_PATH

    logging.basicConfig(level=args.log_level.upper(), format="visdom %(levelname)s %(message)s")
    # visdom turns tornado's debug mode on, whose autoreload re-executes the server whenever
    # an imported file changes; keep the process we started.
    visdom_app.tornado_settings["autoreload"] = False
    env_path = os.path.expanduser(args.env_path) if args.env_path else DEFAULT_ENV_PATH
    try:
        sockets = tornado.netutil.bind_sockets(args.port, address=args.host)
    except OSError as err:
        hint = " (another server on this port? port 0 picks a free one)" if err.errno == errno.EADDRINUSE else ""
        print(f"{FAILED} cannot bind: {err.strerror or err}{hint}", flush=True)
        return None
    port = sockets[0].getsockname()[1]
    app = visdom_app.Application(port=port, env_path=env_path)
    server = tornado.httpserver.HTTPServer(app, max_buffer_size=1024**3)
    server.add_sockets(sockets)
    loop = tornado.ioloop.IOLoop.current()
    if args.parent_pid is not None:
        parent = args.parent_pid

        def _check_parent() -> None:
            if os.getppid() != parent:
                loop.stop()

        tornado.ioloop.PeriodicCallback(_check_parent, 1000).start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"{READY} http://{host}:{port}", flush=True)
    return loop


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # run by path: don't let this folder's modules shadow others
    raise SystemExit(main())
