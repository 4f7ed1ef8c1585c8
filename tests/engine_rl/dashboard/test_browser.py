"""The dashboard as a person sees it: headless Chromium loads a live run's page, the plots render
with every point, and a screenshot is kept as a test artifact (artifacts/dashboard.png)."""

import shutil
from pathlib import Path

import pytest

from engine_rl.dashboard import VisdomServer, count_points, read_metrics
from engine_rl.dashboard.browser import find_chromium, render_dashboard
from engine_rl.dashboard.layout import window_opts, window_title

pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")
pytest.importorskip("websocket", reason="websocket-client (a visdom dependency) is not installed")
if find_chromium() is None:
    pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)",
                allow_module_level=True)

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"


def test_live_run_renders_in_chromium(tmp_path):
    from engine_rl.run.driver import make_config, train

    out = tmp_path / "browser-run"
    cfg = make_config("dqn-cartpole", {"total_frames": 2048, "learning_starts": 512, "optim_steps_per_batch": 8,
                                       "eval_every": 2, "eval_episodes": 2, "seed": 0})
    with VisdomServer(port=0, env_path=tmp_path / "envs") as server:
        train("dqn-cartpole", cfg, out, progress=False, visdom=server.url)
        expected = count_points(read_metrics(out))
        expected["lr"] = 8
        png = tmp_path / "dashboard.png"
        plots = render_dashboard(server.env_url(out.name), screenshot=png, min_plots=len(expected),
                                 min_points={window_title(w): n for w, n in expected.items()}, timeout=90)
    by_title = plots.by_title()
    assert len(plots) == len(expected)
    for win, n in expected.items():
        plot = by_title[window_title(win)]
        names = [name for name, _ in plot["traces"]]
        assert names == window_opts(win)["legend"], win
        assert all(points == n for _, points in plot["traces"]), (win, plot)
        assert plot["svg_traces"] == len(names)  # plotly drew every trace
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(png, ARTIFACTS / "dashboard.png")
