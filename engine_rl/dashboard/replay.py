"""Rebuild a run's dashboard from its ``metrics.jsonl`` (the run's source of truth).

Works for finished and crashed runs alike (a torn last line is skipped): every window gets the
points the live dashboard would have shown (:mod:`engine_rl.dashboard.layout`). A file that holds
no metrics record (empty, binary, another JSON file such as ``config.json``) is a ``ValueError``
naming it (:func:`metrics_series`), before any server is asked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine_rl.dashboard.client import DEFAULT_URL, make_client
from engine_rl.dashboard.layout import plot_rows, window_opts, window_rank

__all__ = ["metrics_series", "read_metrics", "replay_metrics"]

Series = dict[str, tuple[list[float], list[list[float]]]]


def _metrics_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"replay_metrics: no metrics file at {path} (expected a run folder or its metrics.jsonl)")
    return path


def read_metrics(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (or of the run folder holding one); lines that are not
    complete JSON objects (a crash mid-write, bytes that are not text) are skipped.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.jsonl").write_text('{"frames": 8, "loss": 1.0}\\n{"frames": 16, "lo')
        >>> list(read_metrics(run))
        [{'frames': 8, 'loss': 1.0}]
    """
    with open(_metrics_file(path), "rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:  # JSONDecodeError, UnicodeDecodeError
                continue
            if isinstance(record, dict):
                yield record


def metrics_series(path: str | os.PathLike, *, who: str = "replay_metrics") -> Series:
    """Each window's points in a ``metrics.jsonl`` (or in the run folder holding one): window id ->
    ``(xs, [ys per x])``. A file with no metrics record (a JSON object with ``frames``) is a
    ``ValueError`` naming ``who`` and the file, and what it holds instead.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.jsonl").write_text('{"kind": "train", "frames": 8, "loss": 1.0}\\n')
        >>> metrics_series(run)
        {'loss': ([8.0], [[1.0]])}
        >>> _ = (run / "metrics.jsonl").write_text('{\\n  "recipe": "dqn-cartpole"\\n}\\n')
        >>> metrics_series(run)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: replay_metrics: .../metrics.jsonl is not a run's metrics.jsonl: none of its lines is a JSON object with 'frames'
    """
    file = _metrics_file(path)
    series: Series = {}
    records = 0
    for record in read_metrics(file):
        if "frames" not in record:
            continue
        records += 1
        for win, x, ys in plot_rows(record):
            xs, rows = series.setdefault(win, ([], []))
            xs.append(x)
            rows.append(ys)
    if not records:
        with open(file, "rb") as f:
            head = f.read(4096)
        if not head:
            raise ValueError(f"{who}: {file} is empty: its run logged nothing yet, so there is nothing to plot")
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(head) - 3:  # not a character cut at the end of the head
                raise ValueError(f"{who}: {file} is not a run's metrics.jsonl: it is not text "
                                 f"(byte {head[err.start]:#04x} at offset {err.start})") from None
        raise ValueError(f"{who}: {file} is not a run's metrics.jsonl: none of its lines is a JSON object with "
                         "'frames'")
    return series


def replay_metrics(
    path: str | os.PathLike,
    *,
    server: str = DEFAULT_URL,
    env: str | None = None,
    clear: bool = True,
    timeout: float = 30.0,
    client: Any = None,
    series: Series | None = None,
) -> dict[str, int]:
    """Plot a run's ``metrics.jsonl`` on a visdom server; returns the points per window.

    Args:
        path: the run folder (holding ``metrics.jsonl``) or the file itself.
        server: the visdom server's URL.
        env: the visdom env to draw in (default: the run folder's name).
        clear: close the env's windows first (so a replay over a live dashboard does not
            double its points).
        timeout: seconds per request.
        client: a visdom client to use instead of one for ``server``.
        series: the file's points, already read by :func:`metrics_series`.

    Raises:
        FileNotFoundError: no metrics file there.
        ValueError: the file holds no metrics record (:func:`metrics_series`).
        ConnectionError: the server did not answer (start one with ``engine-rl dashboard``).
    """
    file = _metrics_file(path)
    if env is None:
        env = file.parent.name or "main"
    if series is None:
        series = metrics_series(file)
    vis = client if client is not None else make_client(server, env=env, timeout=timeout)
    try:
        if clear and env in vis.get_env_list():
            vis.close(win=None, env=env)
        for win, (xs, rows) in sorted(series.items(), key=lambda item: window_rank(item[0])):
            vis.line(X=np.asarray(xs), Y=np.asarray(rows), win=win, env=env, opts=window_opts(win))
        vis.save([env])
    except Exception as err:
        raise ConnectionError(
            f"replay_metrics: could not post to the visdom server at {server} ({type(err).__name__}: {err}); "
            "start one with `engine-rl dashboard`"
        ) from err
    return {win: len(xs) for win, (xs, _) in series.items()}
