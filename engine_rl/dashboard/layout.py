"""Which window each logged number goes to: one record (a ``metrics.jsonl`` line) -> plot rows.

The live dashboard (:func:`handlers.dashboard.attach_dashboard`) and the replay of a finished run
(:func:`engine_rl.dashboard.replay_metrics`) both go through :func:`plot_rows`, so a replayed run
shows the same windows, titles and points as it showed live. The x axis is always ``frames``.

Windows: ``eval_return`` (mean, a shaded mean ± std band, dotted min and max lines),
``train_return`` (mean and a shaded ± std band), one window per loss (``loss``, ``loss_actor``, ...),
``grad_norm``, ``lr``, ``fps``, ``optim_steps_per_s``, ``utd``, ``replay_size``, episode
lengths, and one window for every other number in the record (counters such as ``iteration``
and ``time`` excepted).
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "XLABEL", "SKIPPED_KEYS", "count_points", "plot_rows", "window_id", "window_opts", "window_rank", "window_title",
]

#: Label of every window's x axis.
XLABEL = "frames"

#: Record keys that are counters or bookkeeping, never plotted.
SKIPPED_KEYS = frozenset(
    {"kind", "frames", "optim_steps", "iteration", "time", "batches", "optim_epochs", "eval_frames", "episodes_ended"}
)

_BAND_FILL = "rgba(31, 119, 180, 0.2)"
_BAND_EDGE = {"width": 0, "color": "rgba(31, 119, 180, 0.3)"}

# window id -> (title, y label); windows not listed are titled by their key.
_TITLES: dict[str, tuple[str, str]] = {
    "eval_return": ("evaluation return", "return"),
    "train_return": ("training episode return", "return"),
    "grad_norm": ("gradient norm (before clipping)", "norm"),
    "lr": ("learning rate", "lr"),
    "fps": ("frames per second", "frames/s"),
    "optim_steps_per_s": ("optim steps per second", "optim steps/s"),
    "utd": ("UTD ratio (optim steps per frame)", "optim steps / frame"),
    "replay_size": ("replay buffer size", "transitions"),
    "train_length_mean": ("training episode length", "steps"),
    "eval_length_mean": ("evaluation episode length", "steps"),
    "episodes": ("training episodes finished", "episodes"),
}

_EVAL_LEGEND = ("min", "max", "mean - std", "mean ± std", "mean")
_TRAIN_LEGEND = ("mean - std", "mean ± std", "mean")
_LEGENDS: dict[str, tuple[str, ...]] = {"eval_return": _EVAL_LEGEND, "train_return": _TRAIN_LEGEND}
_LOWER = {"mode": "lines", "line": _BAND_EDGE, "showlegend": False}
_UPPER = {"mode": "lines", "line": _BAND_EDGE, "fill": "tonexty", "fillcolor": _BAND_FILL}
_TRACE_OPTS: dict[str, dict[str, Any]] = {
    "eval_return": {
        "min": {"mode": "lines", "line": {"dash": "dot", "width": 1, "color": "gray"}},
        "max": {"mode": "lines", "line": {"dash": "dot", "width": 1, "color": "gray"}},
        "mean - std": _LOWER,
        "mean ± std": _UPPER,
        "mean": {"mode": "lines+markers", "line": {"width": 2, "color": "rgb(31, 119, 180)"}},
    },
    "train_return": {
        "mean - std": _LOWER,
        "mean ± std": _UPPER,
        "mean": {"mode": "lines", "line": {"width": 2, "color": "rgb(31, 119, 180)"}},
    },
}
_BAND_KEYS = frozenset(
    {"eval_return_mean", "eval_return_std", "eval_return_min", "eval_return_max", "train_return_mean", "train_return_std"}
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def window_id(key: str) -> str:
    """A window id made of letters, digits, ``_`` and ``-`` (the record key, sanitized)."""
    return _UNSAFE.sub("_", key)


def window_rank(win: str) -> int:
    """Sort key placing returns first, then losses, then the rest (for laying windows out).

    Examples:
        >>> sorted(["fps", "loss", "eval_return", "train_return"], key=window_rank)
        ['eval_return', 'train_return', 'loss', 'fps']
    """
    return {"eval_return": 0, "train_return": 1}.get(win, 2 if win.startswith("loss") else 3)


def window_title(win: str) -> str:
    """The title shown on window ``win``."""
    return _TITLES.get(win, (win, win))[0]


def window_opts(win: str) -> dict[str, Any]:
    """Visdom ``opts`` of window ``win`` (a fresh dict: visdom's client edits the one it gets).

    Examples:
        >>> opts = window_opts("eval_return")
        >>> opts["title"], opts["xlabel"], opts["legend"][-1]
        ('evaluation return', 'frames', 'mean')
        >>> window_opts("loss_actor")["showlegend"]
        False
    """
    title, ylabel = _TITLES.get(win, (win, win))
    opts: dict[str, Any] = {"title": title, "xlabel": XLABEL, "ylabel": ylabel}
    legend = _LEGENDS.get(win)
    if legend is None:
        opts["legend"] = [win]
        opts["showlegend"] = False
    else:
        opts["legend"] = list(legend)
        opts["showlegend"] = True
        opts["traceopts"] = {"plotly": copy.deepcopy(_TRACE_OPTS[win])}
    return opts


def plot_rows(record: Mapping[str, Any]) -> list[tuple[str, float, list[float]]]:
    """The points one record adds: ``(window id, x, [y per trace])`` rows, x = ``record["frames"]``.

    A record is a ``metrics.jsonl`` line (or the same dict built live). Non-numeric and
    non-finite values are skipped; a band window needs its mean (a missing std counts as 0, a
    missing min/max as the mean).

    Args:
        record: ``frames`` and any numbers (losses, metrics, ``eval_*`` scores).

    Examples:
        >>> plot_rows({"kind": "train", "frames": 256, "optim_steps": 8, "episodes_ended": 2, "loss": 0.5, "fps": 900.0})
        [('loss', 256.0, [0.5]), ('fps', 256.0, [900.0])]
        >>> plot_rows({"kind": "eval", "frames": 512, "eval_return_mean": 20.0, "eval_return_std": 2.0,
        ...            "eval_return_min": 17.0, "eval_return_max": 25.0, "eval_frames": 512})
        [('eval_return', 512.0, [17.0, 25.0, 18.0, 22.0, 20.0])]
    """
    x = _finite(record.get("frames"))
    if x is None:
        return []
    rows: list[tuple[str, float, list[float]]] = []
    mean = _finite(record.get("eval_return_mean"))
    if mean is not None:
        std = _finite(record.get("eval_return_std")) or 0.0
        low = _finite(record.get("eval_return_min"))
        high = _finite(record.get("eval_return_max"))
        rows.append((
            "eval_return", x,
            [mean if low is None else low, mean if high is None else high, mean - std, mean + std, mean],
        ))
    mean = _finite(record.get("train_return_mean"))
    if mean is not None:
        std = _finite(record.get("train_return_std")) or 0.0
        rows.append(("train_return", x, [mean - std, mean + std, mean]))
    for key, value in record.items():
        if key in SKIPPED_KEYS or key in _BAND_KEYS:
            continue
        y = _finite(value)
        if y is not None:
            rows.append((window_id(key), x, [y]))
    return rows


def count_points(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Points per window that ``records`` produce (what a dashboard of them must hold).

    Examples:
        >>> count_points([{"frames": 1, "loss": 1.0}, {"frames": 2, "loss": 0.5, "fps": 10}])
        {'loss': 2, 'fps': 1}
    """
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(win for win, _, _ in plot_rows(record))
    return dict(counts)
