"""Attachable handlers for :func:`engine_rl.create_trainer`: one file per concern.

Each handler is a thin adapter over a plain object (the maths lives in :mod:`engine_rl`):
construct it, then ``handler.attach(trainer)`` (most take ``event=`` and ``every=`` to move or
thin out their calls; see each one's ``attach``); it is also callable on the engine
(``handler(trainer)``), so ``trainer.add_event_handler(event, handler)`` works too.

============================  ===================================  ==============================
handler                       default event                        does
============================  ===================================  ==============================
:class:`ReplayExtender`       ``RLEvents.BATCH_COLLECTED``         ``buffer.extend(state.batch)``
:class:`NStepTransitions`     ``RLEvents.BATCH_COLLECTED``         n-step rows into the buffer
:class:`ReplaySampler`        ``RLEvents.SAMPLE_REQUESTED``        ``state.sample = buffer.sample``
:class:`GradClipper`          ``RLEvents.BACKWARD_COMPLETED``      clip; ``metrics["grad_norm"]``; stop on NaN/Inf
:class:`PriorityUpdater`      ``RLEvents.OPTIM_STEP_DONE``         priorities from ``td_error``
:class:`TargetNetUpdater`     ``RLEvents.OPTIM_STEP_DONE``         hard / soft target update
:class:`WeightSync`           ``Events.ITERATION_COMPLETED``       learner -> collector weights
:class:`ValidationRollout`    ``Events.ITERATION_COMPLETED``       ``metrics["eval_return_mean"]``...
:class:`EpisodeStats`         ``RLEvents.BATCH_COLLECTED``         ``metrics["train_return_mean"]``, info
:class:`Throughput`           ``Events.ITERATION_COMPLETED``       ``metrics["fps"]``, ``["utd"]``
:class:`MetricsLogger`        ``Events.ITERATION_COMPLETED``       ``metrics.jsonl`` lines
:class:`FramesProgressBar`    ``Events.ITERATION_COMPLETED``       tqdm bar over ``state.frames``
:class:`GAEAdvantage`         ``RLEvents.BATCH_COLLECTED``         advantages + value targets (GAE)
:class:`MinibatchSampler`     ``RLEvents.SAMPLE_REQUESTED``        shuffled minibatches of the batch
:class:`KLEarlyStop`          ``RLEvents.EPOCH_DONE``              ``state.end_optim_epochs`` on KL
:class:`FrameSchedule`        ``RLEvents.BATCH_COLLECTED``         lr / clip range over frames
:class:`ObservationNormalizer` ``RLEvents.BATCH_COLLECTED``        running obs statistics
:class:`RewardNormalizer`     ``RLEvents.BATCH_COLLECTED``         discounted-return reward scaling
:class:`RewardClipper`        ``RLEvents.BATCH_COLLECTED``         rewards to their sign (Atari)
:class:`NaNGuard`             ``RLEvents.BACKWARD_COMPLETED`` ...  stop on NaN/Inf, naming the key
``distributed.make_data_parallel`` several                     gradient all-reduce, synced stats
:class:`VideoRecording`       ``Events.COMPLETED``                 MP4s of evaluation episodes; ``VIDEO_SAVED``
:func:`attach_dashboard`      ``Events.ITERATION_COMPLETED``       live visdom plots (off-thread)
============================  ===================================  ==============================
"""

from handlers.advantage import GAEAdvantage
from handlers.dashboard import attach_dashboard
from handlers.episodes import EpisodeStats, Throughput
from handlers.gradients import GradClipper
from handlers.kl_stop import KLEarlyStop
from handlers.metrics_log import MetricsEvents, MetricsLogger
from handlers.minibatch import MinibatchSampler
from handlers.nan_guard import NaNGuard, NonFiniteError
from handlers.nstep import NStepTransitions
from handlers.normalization import ObservationNormalizer, RewardClipper, RewardNormalizer
from handlers.trackers import TrackerHandler
from handlers.progress import FramesProgressBar
from handlers.replay import PriorityUpdater, ReplayExtender, ReplaySampler
from handlers.schedule import FrameSchedule
from handlers.target import TargetNetUpdater
from handlers.validation import ValidationRollout
from handlers.video import VideoRecording
from handlers.weights import WeightSync

__all__ = [
    "FrameSchedule",
    "GAEAdvantage",
    "KLEarlyStop",
    "MinibatchSampler",
    "NaNGuard",
    "NStepTransitions",
    "NonFiniteError",
    "ObservationNormalizer",
    "RewardClipper",
    "RewardNormalizer",
    "EpisodeStats",
    "FramesProgressBar",
    "MetricsEvents",
    "MetricsLogger",
    "Throughput",
    "GradClipper",
    "PriorityUpdater",
    "ReplayExtender",
    "ReplaySampler",
    "TargetNetUpdater",
    "TrackerHandler",
    "ValidationRollout",
    "VideoRecording",
    "WeightSync",
    "attach_dashboard",
]
