"""Send what ``metrics.jsonl`` records to TensorBoard, MLflow or W&B: :class:`TrackerHandler`.

A thin adapter: Ignite's ``OutputHandler`` (and ``OptimizerParamsHandler`` for learning rates),
attached to :class:`handlers.metrics_log.MetricsEvents`, so the tracker gets every train and eval
line the trainer's :class:`handlers.MetricsLogger` writes, each scalar under ``train/<key>`` or
``eval/<key>``, with frames as the x axis; videos a :class:`handlers.VideoRecording` saves too
(:func:`engine_rl.trackers.log_videos`). A tracker that fails mid-run (a full disk, a server
gone) costs one warning and is dropped; training goes on and ``metrics.jsonl`` stays the record.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ignite.engine import Engine

from engine_rl.events import VideoEvents, register_video_events
from engine_rl.trackers import log_videos, output_handlers
from handlers.metrics_log import MetricsEvents

__all__ = ["TrackerHandler", "TrackerWarning"]

#: Line entries that are not scalars to plot: the kind, and the x axis itself.
_NOT_PLOTTED = ("kind", "frames")


class TrackerWarning(UserWarning):
    """A tracker failed during the run and was dropped (training goes on)."""


def _scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """A ``metrics.jsonl`` line's numbers (``"NaN"``/``"Infinity"`` strings back to floats)."""
    return {k: float(v) for k, v in record.items() if k not in _NOT_PLOTTED and not isinstance(v, bool)}


class TrackerHandler:
    """Log each ``metrics.jsonl`` line of an engine to an Ignite tracker logger.

    Args:
        logger: Ignite's ``TensorboardLogger``, ``MLflowLogger`` or ``WandBLogger``
            (:func:`engine_rl.trackers.open_tracker` opens one with the run's defaults).
        optimizers: name -> optimizer whose learning rates to log with each train line
            (Ignite's tags: ``<name>/lr/group_<i>`` on TensorBoard and W&B, ``<name> lr group_<i>`` on MLflow).
        after_frames: send nothing logged at or before these frames (a resumed run whose tracker
            cannot hide what the killed process sent, MLflow and W&B: the points up to its last line
            are there already, and a bitwise resume would send the same values again).

    Examples:
        >>> import tempfile, torch
        >>> from ignite.handlers.tensorboard_logger import TensorboardLogger
        >>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> from handlers import MetricsLogger
        >>> p = torch.nn.Parameter(torch.zeros(()))
        >>> optimizer = torch.optim.SGD([p], lr=0.1)
        >>> data = [TensorDict({"x": torch.ones(4)}, [4])] * 3
        >>> trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, optimizer)
        >>> folder = tempfile.mkdtemp()
        >>> _ = MetricsLogger(folder + "/metrics.jsonl").attach(trainer)
        >>> tracker = TrackerHandler(TensorboardLogger(log_dir=folder + "/tb"), optimizers={"sgd": optimizer})
        >>> _ = tracker.attach(trainer)
        >>> _ = trainer.run(max_epochs=1); tracker.close()
        >>> events = EventAccumulator(folder + "/tb"); _ = events.Reload()
        >>> [(e.step, round(e.value, 4)) for e in events.Scalars("train/loss")]
        [(4, 1.0), (8, 0.64), (12, 0.4096)]
        >>> [e.value for e in events.Scalars("sgd/lr/group_0")]
        [0.10000000149011612, 0.10000000149011612, 0.10000000149011612]
    """

    def __init__(self, logger: Any, *, optimizers: Mapping[str, Any] | None = None,
                 after_frames: int | None = None) -> None:
        self.logger = logger
        self.after_frames = after_frames
        self.failed = False
        output, optimizer_params = output_handlers(logger)
        self._handlers: list[tuple[Any, MetricsEvents]] = []
        for tag, event in (("train", MetricsEvents.TRAIN_LOGGED), ("eval", MetricsEvents.EVAL_LOGGED)):
            transform = self._logged_scalars  # Ignite passes state.output; the line is in state.logged
            self._handlers.append((output(tag=tag, output_transform=transform), event))
        for name, optimizer in (optimizers or {}).items():
            self._handlers.append((optimizer_params(optimizer, param_name="lr", tag=name),
                                   MetricsEvents.TRAIN_LOGGED))

    def attach(self, engine: Engine) -> TrackerHandler:
        """Log on the engine's :class:`~handlers.metrics_log.MetricsEvents`: attach a
        :class:`handlers.MetricsLogger` first (the tracker logs the lines it writes)."""
        if not engine.has_registered_events(MetricsEvents.TRAIN_LOGGED):
            raise ValueError("TrackerHandler.attach: the engine has no handlers.MetricsLogger; attach one first "
                             "(the tracker logs the lines it writes to metrics.jsonl)")
        self._engine = engine
        for handler, event in self._handlers:
            engine.add_event_handler(event, self._send, handler, event)
        register_video_events(engine)  # videos a handlers.VideoRecording saves, attached before or after
        engine.add_event_handler(VideoEvents.VIDEO_SAVED, self._send, self._videos, VideoEvents.VIDEO_SAVED)
        return self

    @staticmethod
    def _videos(engine: Engine, logger: Any, _event: Any) -> None:
        log_videos(logger, engine.state.videos, kind=engine.state.video_kind, step=int(engine.state.frames))

    def _logged_scalars(self, _output: Any) -> dict[str, float]:
        return _scalars(self._engine.state.logged)

    def _send(self, engine: Engine, handler: Any, event: MetricsEvents) -> None:
        if self.failed or (self.after_frames is not None and engine.state.frames <= self.after_frames):
            return
        try:
            handler(engine, self.logger, event)
        except Exception as err:  # the tracker must never stop training: metrics.jsonl has every line
            self.failed = True
            message = " ".join(str(err).split())[:300]
            warnings.warn(TrackerWarning(
                f"{type(self.logger).__name__} failed at frames {engine.state.frames} ({type(err).__name__}: "
                f"{message}); it logs nothing more in this run, metrics.jsonl keeps every line"), stacklevel=1)

    def close(self) -> None:
        """Flush and close the tracker (a failure to do so is a warning)."""
        try:
            self.logger.close()
        except Exception as err:
            warnings.warn(TrackerWarning(f"{type(self.logger).__name__} failed to close: {err}"), stacklevel=1)

