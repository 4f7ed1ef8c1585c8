"""Live visdom dashboard of a run: :func:`attach_dashboard` wires ignite's ``VisdomLogger``.

One call plots, against frames, everything the run logs to ``metrics.jsonl``: losses, gradient
norm, learning rate, training episode return (mean ± std band) and length, evaluation return
(mean, ± std band, min/max), frames/s, optim steps/s, UTD ratio, replay size — titled windows,
one visdom env per run. The windows are those of :mod:`engine_rl.dashboard.layout`, so
``engine-rl dashboard --replay RUN_DIR`` rebuilds the same plots from ``metrics.jsonl``.

The dashboard never hurts training: the training thread only copies a few numbers into a
bounded queue; a background thread (:class:`engine_rl.dashboard.BackgroundPoster`) posts them.
A server that is not running, dies mid-run or hangs costs one warning; training goes on at full
speed, and the plots catch up if the server comes back.

Videos: each :attr:`~engine_rl.events.VideoEvents.VIDEO_SAVED` (``engine-rl train --video N``,
:class:`handlers.VideoRecording`) posts its MP4s through the same thread, one window per episode
(``video_final_ep1``, ``video_best_ep1``, ...: a new best replaces the previous one's).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers.base_logger import BaseHandler
from ignite.handlers.visdom_logger import VisdomLogger

from engine_rl.checks import positive_int
from engine_rl.dashboard.client import DEFAULT_URL, make_client
from engine_rl.dashboard.layout import plot_rows, window_opts
from engine_rl.dashboard.poster import BackgroundPoster, Call
from engine_rl.events import VideoEvents, register_video_events

__all__ = ["DashboardLogger", "EvalPlots", "TrainPlots", "attach_dashboard"]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return None


class DashboardLogger(VisdomLogger):
    """ignite's ``VisdomLogger`` that posts from a background thread and never raises or waits.

    It is a ``VisdomLogger``: ignite's own log handlers (``OutputHandler``,
    ``OptimizerParamsHandler``, ``GradsScalarHandler``, ...) attach to it as usual, and their
    posts go through the same background thread. Unlike ignite's, building it makes no request
    (a server that is down is no error), ``_save`` after each log costs nothing (the env is
    saved by the posting thread at most once a minute and at flush), and :meth:`close` does not
    close the windows.

    Args:
        server: the visdom server's URL.
        env: the visdom env (one per run).
        timeout: seconds before a request to the server counts as failed.
        interval: seconds between posting rounds (points in between are sent together).
        client: a visdom client to post with (default: one for ``server``); anything with
            visdom's ``line(X=, Y=, win=, env=, update=, opts=)`` and ``save(envs)``.
        **poster_options: more :class:`~engine_rl.dashboard.BackgroundPoster` options
            (``maxsize``, ``max_history``, ``max_duty``, ``retry_min``, ``retry_max``).
    """

    def __init__(
        self,
        server: str = DEFAULT_URL,
        *,
        env: str = "main",
        timeout: float = 5.0,
        interval: float = 2.0,
        client: Any = None,
        **poster_options: Any,
    ) -> None:
        # No super().__init__(): ignite's posts on the caller's thread and raises when the
        # server is down; here nothing touches the network until the posting thread does.
        if not isinstance(env, str) or not env:
            raise ValueError(f"DashboardLogger: argument env must be a non-empty string, got {env!r}")
        self.server = server
        self.env = env
        self.vis = client if client is not None else make_client(server, env=env, timeout=timeout)
        self._opts: dict[str, dict[str, Any]] = {}
        self.executor = BackgroundPoster(
            name=f"dashboard (visdom at {server}, env {env!r})",
            hint="the run's metrics.jsonl keeps every value and `engine-rl dashboard --replay RUN_DIR` rebuilds the plots",
            interval=interval,
            after_round=self._save_env,
            after_round_interval=60.0,
            **poster_options,
        )

    # -- posting --------------------------------------------------------------------------------
    def plot(self, record: Mapping[str, Any]) -> None:
        """Queue one record (``frames`` and numbers, like a ``metrics.jsonl`` line) for plotting."""
        self.executor.submit_lazy(self._calls, record)

    def post_videos(self, videos: Sequence[Any], *, kind: str, frames: int) -> None:
        """Queue ``videos`` (:class:`engine_rl.video.Video`: ``path``, ``episode``, ``length``,
        ``episode_return``, ``fps``) for posting, window ``video_<kind>_ep<k>`` each, titled with
        the policy's frames and the episode's return; the file is read on the posting thread."""
        for video in videos:
            title = (f"{kind} policy at {frames:,} frames: episode {video.episode}, return {video.episode_return:g}, "
                     f"{video.length} steps")
            self.executor.submit(self._post_video, path=str(video.path), win=f"video_{kind}_ep{video.episode}",
                                 opts={"title": title, "fps": max(1, round(video.fps))})

    def _post_video(self, *, path: str, win: str, opts: dict[str, Any]) -> None:
        self.vis.video(videofile=path, win=win, env=self.env, opts=dict(opts))

    def _calls(self, record: Mapping[str, Any]) -> Iterator[Call]:
        line = self.vis.line
        for win, x, ys in plot_rows(record):
            opts = self._opts.get(win)
            if opts is None:  # the poster copies opts before visdom's client edits them
                opts = self._opts[win] = window_opts(win)
            yield line, {"X": [x], "Y": [ys], "win": win, "env": self.env, "update": "append", "opts": opts}

    def _save(self) -> None:
        """Called by ignite's handlers after each log; the posting thread saves instead."""

    def _save_env(self) -> None:
        self.vis.save([self.env])

    # -- lifetime -------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 10.0) -> bool:
        """Post what is queued, waiting up to ``timeout`` s; True if the server has every point."""
        return self.executor.flush(timeout)

    def close(self, timeout: float | None = 10.0) -> bool:  # type: ignore[override]
        """Post what is pending (up to ``timeout`` s) and stop the posting thread; the windows stay."""
        return self.executor.shutdown(timeout=timeout)


class TrainPlots(BaseHandler):
    """Log handler: the trainer's losses (``state.output``), its non-``eval_`` metrics and the
    learning rate of each optimizer, at x = ``state.frames``.

    The learning rate is ``lr`` (one optimizer) or ``lr_0``, ``lr_1``, ... (its first param group).
    """

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer] = ()) -> None:
        self.optimizers = list(optimizers)

    def record(self, engine: Engine) -> dict[str, float]:
        """The numbers plotted now, as a ``metrics.jsonl`` train line would hold them."""
        s = engine.state
        rec: dict[str, float] = {"frames": float(getattr(s, "frames", s.iteration))}
        if isinstance(s.output, Mapping):
            for k, v in s.output.items():
                number = _number(v)
                if number is not None and isinstance(k, str):
                    rec[k] = number
        for k, v in s.metrics.items():
            if not k.startswith("eval_"):
                number = _number(v)
                if number is not None:
                    rec[k] = number
        if len(self.optimizers) == 1:
            rec["lr"] = float(self.optimizers[0].param_groups[0]["lr"])
        else:
            for i, opt in enumerate(self.optimizers):
                rec[f"lr_{i}"] = float(opt.param_groups[0]["lr"])
        return rec

    def __call__(self, engine: Engine, logger: DashboardLogger, event_name: Any) -> None:
        logger.plot(self.record(engine))


class EvalPlots(BaseHandler):
    """Log handler: evaluation scores (``eval_return_mean``, ``_std``, ``_min``, ``_max``,
    ``eval_length_mean``, ...) at the trainer's ``state.frames``.

    Attached to the trainer, it plots the ``eval_*`` metrics whenever ``eval_frames`` changes
    (what :class:`handlers.ValidationRollout` publishes). Attached to an evaluator engine, it
    plots the evaluator's metrics each time it is called, adding an ``eval_`` prefix where a
    name lacks one.

    Args:
        trainer: the engine whose ``state.frames`` is the x axis.
    """

    def __init__(self, trainer: Engine) -> None:
        self.trainer = trainer
        self._last_marker: Any = None

    def __call__(self, engine: Engine, logger: DashboardLogger, event_name: Any) -> None:
        metrics = engine.state.metrics
        if engine is self.trainer:
            marker = metrics.get("eval_frames")
            if marker is None or marker == self._last_marker:
                return
            self._last_marker = marker
        own = engine is self.trainer  # the trainer's metrics: only its eval_* ones are scores
        record: dict[str, float] = {"frames": float(getattr(self.trainer.state, "frames", 0))}
        for k, v in metrics.items():
            if own and not k.startswith("eval_"):
                continue
            number = _number(v)
            if number is not None and math.isfinite(number):
                record[k if k.startswith("eval_") else f"eval_{k}"] = number
        logger.plot(record)


def attach_dashboard(
    trainer: Engine,
    evaluator: Engine | None = None,
    *,
    env: str = "engine-rl",
    server: str = DEFAULT_URL,
    every: int = 1,
    optimizers: Sequence[torch.optim.Optimizer] | None = None,
    timeout: float = 5.0,
    interval: float = 2.0,
    flush_timeout: float = 10.0,
    client: Any = None,
) -> DashboardLogger:
    """Plot a run live on a visdom server; returns the :class:`DashboardLogger` (call
    :meth:`DashboardLogger.close` when done with it in a long-lived process).

    Training plots are posted every ``every`` iterations (``Events.ITERATION_COMPLETED``),
    evaluation plots whenever new scores appear, videos at each ``VideoEvents.VIDEO_SAVED``
    (registered on ``trainer`` here); at ``Events.COMPLETED`` the logger waits up to
    ``flush_timeout`` seconds for the last points to reach the server. Start a server with
    ``engine-rl dashboard`` (or :class:`engine_rl.dashboard.VisdomServer`).

    Args:
        trainer: the trainer (its ``state.frames`` is the x axis of every window).
        evaluator: an evaluation engine whose ``state.metrics`` hold the scores at its
            ``Events.COMPLETED``; None: plot the trainer's ``eval_*`` metrics (from
            :class:`handlers.ValidationRollout`).
        env: the visdom env of this run (e.g. the run's name).
        server: the visdom server's URL.
        every: plot training numbers every this many iterations.
        optimizers: optimizers whose learning rate is plotted (default: the trainer's).
        timeout: seconds before a request counts as failed (then: one warning, retries).
        interval: seconds between posts (points in between are sent together).
        flush_timeout: the longest wait at the end of the run.
        client: a visdom client to use instead of one for ``server`` (see :class:`DashboardLogger`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> class Recorder:  # stands in for visdom's client: counts the points posted per window
        ...     points = {}
        ...     def line(self, X, Y, win, **kwargs):
        ...         self.points[win] = self.points.get(win, 0) + len(X)
        ...     def save(self, envs):
        ...         pass
        >>> p = torch.nn.Parameter(torch.zeros(()))
        >>> data = [TensorDict({"x": torch.ones(4)}, [4])] * 3
        >>> trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()},
        ...                          torch.optim.SGD([p], lr=0.1))
        >>> dashboard = attach_dashboard(trainer, env="demo", client=Recorder(), interval=0.01)
        >>> _ = trainer.run(max_epochs=1)
        >>> dashboard.close()
        True
        >>> Recorder.points
        {'loss': 3, 'lr': 3}
    """
    if not isinstance(trainer, Engine):
        raise TypeError(f"attach_dashboard: argument trainer must be an ignite Engine, got {type(trainer).__name__}")
    if evaluator is not None and not isinstance(evaluator, Engine):
        raise TypeError(
            f"attach_dashboard: argument evaluator must be an ignite Engine or None, got {type(evaluator).__name__}"
        )
    every = positive_int(every, name="argument every", owner="attach_dashboard")
    if optimizers is None:
        optimizers = getattr(trainer, "optimizers", ())
    logger = DashboardLogger(server, env=env, timeout=timeout, interval=interval, client=client)
    logger.attach(trainer, TrainPlots(optimizers), Events.ITERATION_COMPLETED(every=every))
    evals = EvalPlots(trainer)
    if evaluator is None:
        logger.attach(trainer, evals, Events.ITERATION_COMPLETED)
        logger.attach(trainer, evals, Events.COMPLETED)
    else:
        logger.attach(evaluator, evals, Events.COMPLETED)
    register_video_events(trainer)
    trainer.add_event_handler(VideoEvents.VIDEO_SAVED, lambda e: logger.post_videos(
        e.state.videos, kind=e.state.video_kind, frames=int(getattr(e.state, "frames", 0))))
    trainer.add_event_handler(Events.COMPLETED, lambda _: logger.flush(flush_timeout))
    return logger
