"""Write training and evaluation metrics as JSON lines: the run's source of truth on disk.

The lines are standard JSON (RFC 8259), which has no NaN or Infinity: a non-finite number is
written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` rather than dropped, so a
diverging loss stays visible; ``float()`` reads each back.

One file, one writer per engine: a second :class:`MetricsLogger` on the same file (symlinks
resolved) attached to the same engine is refused (every line would be written twice). A new
trainer may log on to the file of one whose run has ended (a notebook that stops a trainer and
continues with a new one on the same run folder); two engines running at once on one file are
not detected.

After writing a line, the logger fires :class:`MetricsEvents` ``TRAIN_LOGGED`` or ``EVAL_LOGGED``
with the line in ``engine.state.logged``: a tracker (:mod:`handlers.trackers`) subscribes to them,
so it receives exactly what ``metrics.jsonl`` records, at the frames it records.
"""

from __future__ import annotations

import json
import math
import os
import time
import weakref
from pathlib import Path
from typing import IO, Any

from ignite.engine import Engine, EventEnum, Events

from engine_rl.checks import positive_int
from handlers._attach import add_handler

__all__ = ["MetricsEvents", "MetricsLogger", "json_number"]

#: The logger of each file (by realpath) of each engine, for the one-writer-per-file check; weak, so
#: an engine that is gone lets its files go.
_FILES: weakref.WeakKeyDictionary[Engine, dict[str, MetricsLogger]] = weakref.WeakKeyDictionary()


class MetricsEvents(EventEnum):
    """Fired by :class:`MetricsLogger` after it writes a line; ``engine.state.logged`` holds the
    line (the dict written, with ``kind``, ``frames``, ...). Their Ignite event attribute is
    ``frames``, so a handler's default global step is the frame count."""

    TRAIN_LOGGED = "train_logged"
    """A ``train`` line was written."""
    EVAL_LOGGED = "eval_logged"
    """An ``eval`` line was written."""


#: Each event's ``engine.state`` attribute (Ignite's ``event_to_attr``): the x axis of trackers.
METRICS_EVENT_TO_ATTR = {MetricsEvents.TRAIN_LOGGED: "frames", MetricsEvents.EVAL_LOGGED: "frames"}


def json_number(value: float) -> float | str:
    """``value``, or for a non-finite one the string standard JSON can hold.

    Examples:
        >>> [json_number(x) for x in (0.5, float("nan"), float("inf"), float("-inf"))]
        [0.5, 'NaN', 'Infinity', '-Infinity']
        >>> float("-Infinity")
        -inf
    """
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _plain_number(value: Any) -> float | int | str | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return json_number(value)
    if hasattr(value, "numel") and value.numel() == 1:  # 0-d or 1-element tensor
        return json_number(float(value.item()))
    return None


class MetricsLogger:
    """Append one JSON object per line to ``path``: ``kind="train"`` and ``kind="eval"`` lines.

    Every line has ``kind``, ``frames``, ``optim_steps``, ``iteration`` and ``time`` (seconds since
    the run started). Train lines add the iteration's mean losses (``state.output``) and the
    numeric ``state.metrics`` whose names do not start with ``eval_``. An eval line is written
    whenever an evaluation published new ``eval_*`` metrics (detected through
    ``state.metrics["eval_frames"]``, which :class:`handlers.ValidationRollout` sets), with all
    ``eval_*`` metrics. Lines are flushed as they are written, so a crash loses nothing logged.
    A NaN, Inf or -Inf value is written as the string ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (standard JSON has no such numbers; see :func:`json_number`).

    Args:
        path: the ``.jsonl`` file; parent folders are created; an existing file is appended to
            (a resumed run continues its log). One logger per file: see the module docstring
            (:meth:`attach` and the run's start raise a ``ValueError`` naming the file).

    Examples:
        >>> import json, tempfile, torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> p = torch.nn.Parameter(torch.zeros(()))
        >>> data = [TensorDict({"x": torch.ones(4)}, [4])] * 3
        >>> trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()},
        ...                          torch.optim.SGD([p], lr=0.1))
        >>> path = tempfile.mkdtemp() + "/metrics.jsonl"
        >>> logger = MetricsLogger(path).attach(trainer, every=2)
        >>> _ = trainer.run(max_epochs=1)
        >>> [json.loads(line)["frames"] for line in open(path)]
        [8]
        >>> trainer.state.metrics["grad_norm"] = float("inf")
        >>> logger.log_train(trainer); logger.close()
        >>> json.loads(open(path).readlines()[-1])["grad_norm"]
        'Infinity'
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None
        self._start = time.perf_counter()
        self._last_eval_frames: Any = None
        self._last_train_iteration: int | None = None

    def attach(
        self, engine: Engine, *, every: int = 1, event: Any = Events.ITERATION_COMPLETED, episode_ends: bool = True
    ) -> MetricsLogger:
        """Log a train line on ``event(every=every)`` and eval lines when new ones appear.

        With ``every > 1`` and ``episode_ends``, an iteration in which training episodes ended
        (``state.metrics["episodes_ended"] > 0``, from :class:`handlers.EpisodeStats`) is logged
        too, so the log still holds the return of every training episode.
        """
        every = positive_int(every, name="argument every", owner="MetricsLogger")
        file = os.path.realpath(self.path)
        holder = _FILES.get(engine, {}).get(file, self)
        if holder is not self and engine.has_event_handler(holder.log_train):  # (one removed no longer counts)
            raise ValueError(
                f"MetricsLogger.attach: another MetricsLogger attached to this engine writes {self.path} (every line "
                "would be written twice); attach one logger per file, or give this one another path"
            )
        # attached twice, it would write every line twice (the first claim also guards the rest)
        add_handler(engine, self.log_train, event, every, owner=type(self).__name__, exclusive=self,
                    twice="every line would be written twice")
        _FILES.setdefault(engine, {})[file] = self
        if every > 1 and episode_ends:  # after the periodic handler, so one iteration is one line
            engine.add_event_handler(Events.ITERATION_COMPLETED, self._log_episode_ends)
        if not engine.has_registered_events(MetricsEvents.TRAIN_LOGGED):
            engine.register_events(*MetricsEvents, event_to_attr=METRICS_EVENT_TO_ATTR)
        engine.add_event_handler(Events.STARTED, self._open)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self.log_eval_if_new)
        engine.add_event_handler(Events.COMPLETED, self.log_eval_if_new)
        engine.add_event_handler(Events.COMPLETED, self.close)
        # No EXCEPTION_RAISED handler on purpose: Ignite would then swallow the exception unless
        # the handler re-raises, which would skip other handlers. Lines are flushed as written.
        return self

    # -- writing ------------------------------------------------------------------------
    def _open(self, _: Engine | None = None) -> None:
        if self._file is None or self._file.closed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # line-buffered
            self._start = time.perf_counter()

    def write(self, record: dict[str, Any]) -> None:
        """Write one JSON line (opening the file if needed) and flush it."""
        self._open()
        assert self._file is not None
        self._file.write(json.dumps(record, allow_nan=False) + "\n")  # standard JSON: see json_number

    def _base(self, engine: Engine, kind: str) -> dict[str, Any]:
        s = engine.state
        return {
            "kind": kind,
            "frames": int(getattr(s, "frames", 0)),
            "optim_steps": int(getattr(s, "optim_steps", 0)),
            "iteration": int(s.iteration),
            "time": round(time.perf_counter() - self._start, 3),
        }

    def log_train(self, engine: Engine) -> None:
        """Write a ``train`` line: counters, ``state.output`` losses, non-eval metrics."""
        record = self._base(engine, "train")
        output = engine.state.output
        if isinstance(output, dict):
            for k, v in output.items():
                number = _plain_number(v)
                if number is not None:
                    record[k] = number
        for k, v in engine.state.metrics.items():
            if not k.startswith("eval_"):
                number = _plain_number(v)
                if number is not None:
                    record[k] = number
        self.write(record)
        self._last_train_iteration = engine.state.iteration
        self._announce(engine, record, MetricsEvents.TRAIN_LOGGED)

    def _log_episode_ends(self, engine: Engine) -> None:
        """A train line for an iteration in which training episodes ended, unless it has one."""
        if engine.state.metrics.get("episodes_ended", 0) and self._last_train_iteration != engine.state.iteration:
            self.log_train(engine)

    def log_eval_if_new(self, engine: Engine) -> None:
        """Write an ``eval`` line if ``state.metrics['eval_frames']`` changed since the last one."""
        marker = engine.state.metrics.get("eval_frames")
        if marker is None or marker == self._last_eval_frames:
            return
        self._last_eval_frames = marker
        record = self._base(engine, "eval")
        for k, v in engine.state.metrics.items():
            if k.startswith("eval_"):
                number = _plain_number(v)
                if number is not None:
                    record[k] = number
        self.write(record)
        self._announce(engine, record, MetricsEvents.EVAL_LOGGED)

    @staticmethod
    def _announce(engine: Engine, record: dict[str, Any], event: MetricsEvents) -> None:
        """Fire ``event`` with the line written in ``state.logged`` (on an engine :meth:`attach` set up)."""
        if engine.has_registered_events(event):
            engine.state.logged = record
            engine.fire_event(event)

    def close(self, _: Engine | None = None) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"last_eval_frames": -1 if self._last_eval_frames is None else int(self._last_eval_frames)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        value = int(state["last_eval_frames"])
        self._last_eval_frames = None if value < 0 else value
