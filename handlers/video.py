"""Videos during training: :class:`VideoRecording` records evaluation episodes of the final policy
(and of each new best) with :func:`engine_rl.video.record_episodes` and fires
:attr:`~engine_rl.events.VideoEvents.VIDEO_SAVED` on the trainer, where a dashboard or a tracker
picks the files up (:func:`handlers.attach_dashboard` posts them to visdom).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle

from engine_rl.checks import positive_int
from engine_rl.events import VideoEvents, register_video_events
from engine_rl.video import Video, VideoWarning, record_episodes

__all__ = ["VideoRecording"]

_NAME = re.compile(r"(final|best)_(\d+)_ep\d+\.mp4")


def _return_mean(evaluator: Engine) -> float:
    score = float(evaluator.state.metrics["return_mean"])
    return -math.inf if math.isnan(score) else score


class VideoRecording:
    """Record ``num_episodes`` evaluation episodes of the policy as MP4s in ``folder``: of the final
    policy at the trainer's ``Events.COMPLETED`` (``final_<frames>_ep<k>.mp4``), and with
    ``best`` of each policy whose evaluation scores higher than every earlier one (at the
    evaluator's ``Events.COMPLETED``: ``best_<frames>_ep<k>.mp4``), ``<frames>`` being the
    trainer's ``state.frames`` then.

    After each recording the trainer fires :attr:`~engine_rl.events.VideoEvents.VIDEO_SAVED`
    with ``state.videos`` (the :class:`~engine_rl.video.Video` of each episode), ``state.video_kind``
    (``"final"`` or ``"best"``) and ``state.frames`` (see the event's docstring). A recording
    that fails (a full disk, ffmpeg missing, an env that cannot render) is one
    :class:`~engine_rl.video.VideoWarning` naming why; no file of it is left, no event fires and
    training goes on. The best score so far is in :meth:`state_dict`, so a resumed run records a
    best only when it beats the scores before the checkpoint.

    Args:
        make_env: makes the env to record, one copy with ``render_mode="rgb_array"`` (see
            :func:`~engine_rl.video.record_episodes`).
        policy: the deterministic policy the evaluations score.
        num_episodes: episodes per recording.
        folder: where the MP4s go (created at the first recording).
        seed: the first reset's seed of each recording (the same episodes for every policy).
        device: the policy's device (``None``: from its parameters).
        best: also record each new best policy (give :meth:`attach` its evaluator).
        score_function: ``evaluator -> float``, the score a best must beat (default: the
            evaluation's ``return_mean``, a NaN one as ``-inf``).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> from engine_rl.collectors.gym_envs import make_one_env
        >>> def push_left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> p = torch.nn.Parameter(torch.zeros(()))
        >>> trainer = create_trainer([TensorDict({"x": torch.ones(2)}, [2])] * 2, lambda td: {"loss": (p - td["x"]).pow(2).mean()},
        ...                          torch.optim.SGD([p], lr=0.1))
        >>> videos = VideoRecording(lambda: make_one_env("CartPole-v1", render_mode="rgb_array"), push_left,
        ...                         num_episodes=1, folder=tempfile.mkdtemp(), seed=0)
        >>> _ = videos.attach(trainer)
        >>> saved = []
        >>> _ = trainer.add_event_handler(VideoEvents.VIDEO_SAVED, lambda e: saved.append(e.state.videos))
        >>> _ = trainer.run(max_epochs=1)
        >>> [(v.path.name, v.frames - v.length) for v in saved[0]], trainer.state.video_kind
        ([('final_4_ep1.mp4', 1)], 'final')
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env],
        policy: Callable[..., Any],
        *,
        num_episodes: int,
        folder: str | Path,
        seed: int | None = None,
        device: torch.device | str | None = None,
        best: bool = False,
        score_function: Callable[[Engine], float] = _return_mean,
    ) -> None:
        self.make_env = make_env
        self.policy = policy
        self.num_episodes = positive_int(num_episodes, name="argument num_episodes", owner="VideoRecording")
        self.folder = Path(folder)
        self.seed = seed
        self.device = device
        self.best = bool(best)
        self.score_function = score_function
        self.best_score = -math.inf
        self._trainer: Engine | None = None

    def record(self, trainer: Engine, kind: str) -> list[Video]:
        """Record now, as ``kind`` (``"final"``, ``"best"``); fire ``VIDEO_SAVED`` on ``trainer``.
        Returns the videos (none, after a failure's warning)."""
        frames = int(getattr(trainer.state, "frames", 0))
        try:
            videos = record_episodes(self.make_env, self.policy, self.num_episodes, self.folder,
                                     name=f"{kind}_{frames}", seed=self.seed, device=self.device)
        except Exception as err:  # noqa: BLE001  (a video is never worth the run)
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            warnings.warn(f"videos of the {kind} policy at frames {frames} not recorded ({type(err).__name__}: "
                          f"{lines[0] if lines else ''}); the run's other files are unaffected", VideoWarning,
                          stacklevel=2)
            return []
        trainer.state.videos = tuple(videos)
        trainer.state.video_kind = kind
        trainer.state.videos_saved = getattr(trainer.state, "videos_saved", 0) + 1
        trainer.fire_event(VideoEvents.VIDEO_SAVED)
        return videos

    def __call__(self, trainer: Engine) -> None:
        """The final policy's videos (the trainer's ``COMPLETED``)."""
        self.record(trainer, "final")

    def _evaluated(self, evaluator: Engine) -> None:
        score = self.score_function(evaluator)
        if score > self.best_score:
            self.best_score = score
            self.record(self._trainer, "best")

    def attach(self, trainer: Engine, *, evaluator: Engine | None = None) -> RemovableEventHandle:
        """Record at ``trainer``'s ``Events.COMPLETED`` (attach after the handler that runs the
        final evaluation, e.g. :class:`~handlers.ValidationRollout`, so that one comes first), and
        with ``best`` at ``evaluator``'s ``Events.COMPLETED``. Registers
        :class:`~engine_rl.events.VideoEvents` on ``trainer``. Returns the ``COMPLETED`` handle."""
        if not isinstance(trainer, Engine):
            raise TypeError(f"VideoRecording.attach: argument trainer must be an ignite Engine, got {type(trainer).__name__}")
        if self.best and not isinstance(evaluator, Engine):
            raise ValueError("VideoRecording.attach: best=True records each new best evaluation and needs the "
                             f"evaluator (argument evaluator), got {type(evaluator).__name__}")
        register_video_events(trainer)
        self._trainer = trainer
        if self.best:
            evaluator.add_event_handler(Events.COMPLETED, self._evaluated)
        return trainer.add_event_handler(Events.COMPLETED, self)

    def drop_after(self, frames: int) -> list[Path]:
        """Delete the videos of ``folder`` recorded after ``frames`` (by their names): a run resumed
        from an older checkpoint replaces what followed it. Returns the files deleted."""
        dropped = []
        for path in sorted(self.folder.glob("*.mp4")) if self.folder.is_dir() else []:
            match = _NAME.fullmatch(path.name)
            if match and int(match[2]) > frames:
                path.unlink(missing_ok=True)
                dropped.append(path)
        return dropped

    def state_dict(self) -> dict[str, Any]:
        """The best score so far (a float; ``-inf`` before the first evaluation)."""
        return {"best_score": float(self.best_score)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_score = float(state_dict["best_score"])
