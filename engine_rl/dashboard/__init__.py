"""Visdom dashboards that work offline: assets, a local server, posting off the training
thread, and replay from ``metrics.jsonl``.

- :func:`install_assets` puts visdom's JS/CSS/fonts in place once, from npm packages.
- :class:`VisdomServer` runs a server on 127.0.0.1 (context manager; ``engine-rl dashboard``
  runs one in the foreground).
- :class:`BackgroundPoster` posts plot updates from a daemon thread (never blocks the caller).
- :func:`replay_metrics` rebuilds a run's plots from its ``metrics.jsonl``.
- :mod:`engine_rl.dashboard.layout` decides which window each number goes to.

The trainer side is :func:`handlers.dashboard.attach_dashboard`.
"""

from engine_rl.dashboard.assets import ASSETS, install_assets, missing_assets, visdom_static_dir
from engine_rl.dashboard.client import DEFAULT_URL, make_client, split_url
from engine_rl.dashboard.layout import count_points, plot_rows, window_opts
from engine_rl.dashboard.poster import BackgroundPoster, DashboardWarning
from engine_rl.dashboard.replay import read_metrics, replay_metrics
from engine_rl.dashboard.server import VisdomServer

__all__ = [
    "ASSETS",
    "DEFAULT_URL",
    "BackgroundPoster",
    "DashboardWarning",
    "VisdomServer",
    "count_points",
    "install_assets",
    "make_client",
    "missing_assets",
    "plot_rows",
    "read_metrics",
    "replay_metrics",
    "split_url",
    "visdom_static_dir",
    "window_opts",
]
