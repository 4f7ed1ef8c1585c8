"""``engine-rl dashboard``: serve visdom on 127.0.0.1 (offline), or replay a run's plots into it.

    engine-rl dashboard [--port 8097]            # serve until Ctrl-C; prints the URL
    engine-rl dashboard --replay runs/RUN        # plot RUN's metrics.jsonl (starts a server if none)
    engine-rl dashboard --install-assets         # fetch visdom's page assets from npm, once
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine_rl.commands import fail


def add_parser(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("dashboard", help="serve the visdom dashboard offline on 127.0.0.1, or replay a run into it",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--port", type=int, default=8097, help="port (default 8097; 0: any free port)")
    d.add_argument("--host", default="127.0.0.1",
                   help="loopback address to bind (default 127.0.0.1; ::1 or localhost: the dashboard has no "
                        "authentication, so other addresses are refused)")
    d.add_argument("--env-path", default=None, help="where visdom saves envs (default ~/.visdom)")
    d.add_argument("--replay", metavar="RUN_DIR", default=None,
                   help="plot a run's metrics.jsonl (finished or crashed) into the server at --host/--port, "
                        "starting one if none answers")
    d.add_argument("--env", default=None, help="visdom env for --replay (default: the run folder's name)")
    d.add_argument("--screenshot", metavar="PNG", default=None,
                   help="with --replay: also render the page in headless Chromium and save a PNG, then exit")
    d.add_argument("--install-assets", action="store_true",
                   help="install visdom's JS/CSS/fonts from npm packages (needs npm once) and exit")


def _server_answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _metrics_path(replay: str) -> Path:
    """The ``metrics.jsonl`` that ``--replay`` names (a run folder or the file); a ``ValueError``
    if there is none, or it is not a regular file."""
    path = Path(replay)
    if not path.exists():
        raise ValueError(f"--replay: no run folder or metrics file at {replay}")
    if path.is_dir():
        if not (path / "metrics.jsonl").exists():
            raise ValueError(f"--replay: {replay} holds no metrics.jsonl (a run folder has one from its first "
                             "logged batch); name a run folder or its metrics.jsonl")
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"--replay: {path} is not a regular file; name a run folder or its metrics.jsonl")
    return path


def run(args: argparse.Namespace) -> int:
    from engine_rl.dashboard import VisdomServer, install_assets, missing_assets, replay_metrics
    from engine_rl.dashboard.replay import metrics_series

    try:
        if args.install_assets:
            written = install_assets()
            print(f"visdom assets: {len(written)} files written" if written else "visdom assets: already installed")
            return 0
        if args.screenshot and not args.replay:
            raise ValueError("--screenshot needs --replay RUN_DIR")
        series = None
        if args.replay is not None:  # what it names is read before a server is started or asked
            series = metrics_series(_metrics_path(args.replay), who="--replay")
        server = VisdomServer(port=args.port, host=args.host, env_path=args.env_path, log_path="-")
        host = f"[{args.host}]" if ":" in args.host else args.host
        existing = f"http://{host}:{args.port}" if args.replay and args.port else None
        if existing and _server_answers(existing):
            url, server = existing, None
        else:
            if missing_assets():
                print("visdom assets missing: installing them from npm (once)...", file=sys.stderr)
            server.start()
            url = server.url
    except (ValueError, RuntimeError, ModuleNotFoundError, OSError) as err:
        return fail(err, 2, debug=getattr(args, "debug", False))
    assert url is not None
    try:
        if args.replay:
            env = args.env or Path(args.replay).resolve().name
            if env == "metrics.jsonl":
                env = Path(args.replay).resolve().parent.name
            counts = replay_metrics(args.replay, server=url, env=env, series=series)
            print(f"replayed {sum(counts.values())} points into {len(counts)} windows: {url}/env/{env}", flush=True)
            if args.screenshot:
                from engine_rl.dashboard.browser import render_dashboard

                render_dashboard(f"{url}/env/{env}", screenshot=args.screenshot, min_plots=len(counts))
                print(f"screenshot: {args.screenshot}", flush=True)
                return 0
            if server is None:
                return 0
        print(f"visdom dashboard at {url} (Ctrl-C stops it)", flush=True)
        assert server is not None
        return server.wait()
    except KeyboardInterrupt:
        return 0
    except (ConnectionError, FileNotFoundError, TimeoutError) as err:
        return fail(err, 1, debug=getattr(args, "debug", False))
    finally:
        if server is not None:
            server.stop()
