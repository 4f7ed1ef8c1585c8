"""Look at a dashboard page the way a person would: headless Chromium loads it, runs its
scripts, and reports the plotly plots it rendered (titles, traces, points), with a screenshot.

Useful where no display exists (CI, clusters): ``engine-rl dashboard --replay RUN --screenshot
run.png``. Drives Debian's ``chromium`` over the DevTools protocol (``websocket-client``, a
visdom dependency); the browser runs with a fresh profile and without background networking.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "PagePlots", "find_chromium", "render_dashboard"]

#: Flags of every Chromium run here (headless, no sandbox for root in containers, no network of
#: its own: no background updates, sync, or first-run pages).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

# What the page rendered: every plotly plot, its title and its traces' point counts.
_PLOTS_JS = """(() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  title: ((gd.layout || {}).title || {}).text || (gd.layout || {}).title || '',
  traces: (gd.data || []).map(t => [String(t.name), (t.x || []).length]),
  svg_traces: gd.querySelectorAll('g.trace.scatter').length,
})))()"""


def find_chromium() -> str | None:
    """Path of a Chromium executable (``chromium``, ``chromium-browser``, ``google-chrome``), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class PagePlots(list):
    """The plots a page rendered: dicts with ``title``, ``traces`` ([name, points] per trace)
    and ``svg_traces`` (the ``g.trace.scatter`` elements drawn)."""

    def by_title(self) -> dict[str, dict[str, Any]]:
        return {p["title"]: p for p in self}


class _DevTools:
    def __init__(self, ws_url: str, timeout: float) -> None:
        import websocket  # websocket-client, installed with visdom

        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"Chromium DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def close(self) -> None:
        self.ws.close()


def _wait_devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout: float) -> int:
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.is_file():
            lines = port_file.read_text().split()
            if lines:
                return int(lines[0])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"render_dashboard: Chromium did not open its DevTools port within {timeout:.0f} s")


def _wait_for_plots(
    tools: _DevTools, url: str, min_plots: int, min_points: dict[str, int], *, deadline: float, timeout: float
) -> PagePlots:
    """The page's plots once ``min_plots`` exist and each ``min_points`` title's first trace holds
    that many points; a ``TimeoutError`` showing what the page had at ``deadline``."""
    while True:
        plots = PagePlots(tools.evaluate(_PLOTS_JS) or [])
        titles = plots.by_title()
        ready = len(plots) >= min_plots and all(
            t in titles and titles[t]["traces"] and titles[t]["traces"][0][1] >= n
            for t, n in min_points.items()
        )
        if ready:
            return plots
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"render_dashboard: {url} did not render {min_plots} plots with {min_points} "
                f"within {timeout:.0f} s; it had {list(plots)}"
            )
        time.sleep(0.25)


def _save_screenshot(tools: _DevTools, screenshot: str | os.PathLike, window_size: tuple[int, int]) -> None:
    """A PNG of the whole page, not just the window: the viewport grown to the content first."""
    height = tools.evaluate("document.documentElement.scrollHeight") or window_size[1]
    tools.call("Emulation.setDeviceMetricsOverride", width=window_size[0],
               height=max(int(height), window_size[1]), deviceScaleFactor=1, mobile=False)
    time.sleep(1.0)  # let plotly redraw after the resize
    shot = tools.call("Page.captureScreenshot", format="png")
    Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
    Path(screenshot).write_bytes(base64.b64decode(shot["data"]))


def render_dashboard(
    url: str,
    *,
    screenshot: str | os.PathLike | None = None,
    min_plots: int = 1,
    min_points: dict[str, int] | None = None,
    timeout: float = 60.0,
    window_size: tuple[int, int] = (1600, 1200),
    chromium: str | None = None,
) -> PagePlots:
    """Load ``url`` in headless Chromium, wait until plots rendered, return them (and a PNG).

    Waits until at least ``min_plots`` plotly plots exist and, for each title in
    ``min_points``, that plot's first trace holds at least that many points (the page receives
    windows over a websocket after it loads); then saves ``screenshot`` if given.

    Args:
        url: the page (e.g. ``http://127.0.0.1:8097/env/my-run``).
        screenshot: where to write the PNG.
        min_plots: plots to wait for.
        min_points: title -> points its first trace must hold before the page counts as ready.
        timeout: seconds for the whole check.
        window_size: the browser window in pixels (the screenshot's size).
        chromium: the browser executable (default: :func:`find_chromium`).

    Raises:
        FileNotFoundError: no Chromium executable.
        TimeoutError: the page did not render what was waited for (the message shows what it had).
    """
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("render_dashboard: no chromium executable (Debian: apt-get install chromium)")
    min_points = dict(min_points or {})
    deadline = time.monotonic() + timeout
    # chromium's helper processes may still write the profile while it is removed: best effort
    with tempfile.TemporaryDirectory(prefix="engine-rl-chromium-", ignore_cleanup_errors=True) as profile:
        cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
               f"--window-size={window_size[0]},{window_size[1]}", "--hide-scrollbars", "about:blank"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            port = _wait_devtools_port(Path(profile), proc, max(1.0, deadline - time.monotonic()))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                targets = json.loads(resp.read())
            page = next(t for t in targets if t.get("type") == "page")
            tools = _DevTools(page["webSocketDebuggerUrl"], timeout=max(1.0, deadline - time.monotonic()))
            try:
                tools.call("Page.enable")
                tools.call("Page.navigate", url=url)
                plots = _wait_for_plots(tools, url, min_plots, min_points, deadline=deadline, timeout=timeout)
                if screenshot is not None:
                    _save_screenshot(tools, screenshot, window_size)
                return plots
            finally:
                tools.close()
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
