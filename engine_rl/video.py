"""Videos of evaluation episodes: :func:`record_episodes` plays whole episodes of a policy on an
env that renders and writes each episode as an MP4.

The episodes are an evaluation's: :func:`engine_rl.evaluation.create_evaluator` runs them (the
policy in eval mode under ``torch.no_grad()``, stepped by the collector's own code; there is no
second rollout loop), on one env copy that ``make_env`` makes with ``render_mode="rgb_array"``
(:func:`engine_rl.recipes.env_source.recipe_render_env` makes it as a recipe's evaluation does:
its id or ``make_env``, ``env_kwargs`` and ``wrappers``). The policy sees what the wrappers make
of the observations (Atari's stacked 84x84 grayscale frames); the video shows what the env
renders (the game's 210x160 colour screen): :class:`FrameRecorder`, the outermost wrapper, calls
``render()`` after the reset and after each step, so an episode of ``length`` steps is a video of
``length + 1`` frames, played at the env's ``metadata["render_fps"]`` (30 if it names none; an
Atari env whose wrappers skip 4 frames a step therefore plays at 4 times its speed). The first
reset is seeded with ``seed``; the later episodes follow on from it, as copy 0 of an evaluation
with that seed plays them.

Frames go to ffmpeg as they come (an episode is never held in memory), through ``imageio-ffmpeg``
(the ``[video]`` extra): one small, maintained package whose wheels carry an ffmpeg binary. Not
gymnasium's ``RecordVideo``: it keeps a whole episode's frames in memory, then encodes them with
moviepy, a larger dependency that adds nothing here. Each file is written as ``.NAME.partial``
beside its place and renamed when its episode ends, so a recording killed or failing midway
leaves no truncated MP4 (a resumed run's :func:`engine_rl.run.checkpoint.remove_partial_files`
removes the partial file). Frames with an odd height or width get one edge row or column added
(H.264's 4:2:0 colour needs even sizes).

Headless rendering: :func:`prepare_rendering` (called by :func:`check_renders` and
:func:`record_episodes` before any env is made) sets ``MUJOCO_GL=osmesa`` when the user has not
set ``MUJOCO_GL`` and no display is available on Linux (neither ``DISPLAY`` nor
``WAYLAND_DISPLAY``), so MuJoCo renders offscreen through OSMesa (Debian: ``apt-get install
libosmesa6``). MuJoCo reads it when an env first creates its renderer, so it takes effect even if
``mujoco`` was imported before. Classic control renders through pygame (with SDL's dummy drivers
there), Atari through ALE itself.

Examples:
    >>> import tempfile, torch
    >>> from engine_rl.collectors.gym_envs import make_one_env
    >>> def push_left(td):
    ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
    >>> make_env = lambda: make_one_env("CartPole-v1", render_mode="rgb_array")
    >>> videos = record_episodes(make_env, push_left, 2, tempfile.mkdtemp(), name="left", seed=0)
    >>> [(v.path.name, v.frames == v.length + 1, v.fps) for v in videos]
    [('left_ep1.mp4', True, 50), ('left_ep2.mp4', True, 50)]
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from engine_rl.checks import positive_int
from engine_rl.collectors.errors import EnvError
from engine_rl.collectors.policy import Policy
from engine_rl.evaluation import create_evaluator

__all__ = [
    "FrameRecorder", "Video", "VideoError", "VideoWarning", "check_renders", "prepare_rendering", "record_episodes",
]

#: What the ``[video]`` extra installs, as errors name it.
VIDEO_EXTRA = "the video extra: pip install engine_rl[video] (imageio-ffmpeg, pygame)"

_RENDERS: set[str] = set()  # make_env reprs whose env rendered (check_renders runs each once per process)


class VideoError(RuntimeError):
    """A video could not be recorded or written; the message names the file and the reason."""


class VideoWarning(UserWarning):
    """Videos during training were not recorded (:class:`handlers.VideoRecording`); the run went on."""


@dataclass(frozen=True)
class Video:
    """One recorded episode."""

    path: Path
    """The MP4 file."""
    episode: int
    """The episode's number in its recording: 1, 2, ..."""
    frames: int
    """Frames in the file: the reset frame and one per step (``length + 1``)."""
    length: int
    """The episode's steps."""
    episode_return: float
    """The episode's return (the sum of its rewards)."""
    fps: float
    """Frames per second the file plays at."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``path`` as a string, ``return`` for ``episode_return``."""
        return {"path": str(self.path), "episode": self.episode, "frames": self.frames, "length": self.length,
                "return": self.episode_return, "fps": self.fps}


def prepare_rendering() -> str | None:
    """Before an env is made to render: pygame's greeting off (``PYGAME_HIDE_SUPPORT_PROMPT``);
    on Linux without a display, ``MUJOCO_GL=osmesa`` (see the module docstring) and SDL's dummy
    video and audio drivers for pygame (``SDL_VIDEODRIVER``, ``SDL_AUDIODRIVER``), each only if
    the user has not set it. Returns the ``MUJOCO_GL`` it set, else None.
    """
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if not sys.platform.startswith("linux") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if "MUJOCO_GL" in os.environ:
        return None
    os.environ["MUJOCO_GL"] = "osmesa"
    return "osmesa"


def _ffmpeg() -> Any:
    """The ``imageio_ffmpeg`` module, with its ffmpeg binary found; a ``VideoError`` naming the extra otherwise."""
    try:
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError) as err:
        raise VideoError(f"videos need {VIDEO_EXTRA} ({type(err).__name__}: {err})") from err
    return imageio_ffmpeg


def _rgb(frame: Any, where: str = "") -> np.ndarray:
    """``frame`` as an H x W x 3 uint8 array of even sizes (an alpha channel dropped, an odd
    size padded by one edge row or column); a ``VideoError`` starting with ``where`` for anything else."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] not in (3, 4):
        what = (f"an array of shape {frame.shape} and dtype {frame.dtype}" if isinstance(frame, np.ndarray)
                else type(frame).__name__)
        raise VideoError(f"{where}render() returned {what}, not an RGB image (H x W x 3 uint8)")
    frame = frame[:, :, :3]
    odd_h, odd_w = frame.shape[0] % 2, frame.shape[1] % 2
    if odd_h or odd_w:
        frame = np.pad(frame, ((0, odd_h), (0, odd_w), (0, 0)), mode="edge")
    return np.ascontiguousarray(frame)


def _render_fps(env: gym.Env) -> float:
    fps = env.metadata.get("render_fps")
    return fps if isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0 else 30


class FrameRecorder(gym.Wrapper):
    """Write the first ``len(paths)`` episodes of ``env`` to ``paths``, one MP4 each.

    After the reset that starts an episode and after each of its steps, ``env.render()`` (an
    ``rgb_array`` env's H x W x 3 uint8 frame) goes to ffmpeg; the file is written as
    ``.NAME.partial`` and renamed to its path at the step that ends the episode (terminated or
    truncated), when its frame count joins :attr:`frame_counts`. A reset before the end (an
    episode cut short) or :meth:`close` drops the unfinished file. Later episodes are not recorded.

    Raises:
        VideoError: a frame that is no RGB image, or a file ffmpeg cannot write (its path and why).
    """

    def __init__(self, env: gym.Env, paths: Sequence[str | Path], *, fps: float | None = None) -> None:
        super().__init__(env)
        self.paths = [Path(p) for p in paths]
        self.fps = fps if fps is not None else _render_fps(env)
        #: frames written to each finished episode's file, in order
        self.frame_counts: list[int] = []
        self._path: Path | None = None  # the episode being recorded
        self._writer: Any = None
        self._size: tuple[int, int] | None = None
        self._frames = 0

    @property
    def _partial(self) -> Path:
        return self._path.with_name(f".{self._path.name}.partial")

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._drop()
        if len(self.frame_counts) < len(self.paths):
            self._path, self._frames = self.paths[len(self.frame_counts)], 0
            self._add(self.env.render())
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._path is not None:
            self._add(self.env.render())
            if terminated or truncated:
                self._finish()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        try:
            self._drop()
        finally:
            super().close()

    def _add(self, frame: Any) -> None:
        frame = _rgb(frame, f"video {self._path}: ")
        size = (frame.shape[1], frame.shape[0])
        try:
            if self._writer is None:
                self._size = size
                self._writer = _ffmpeg().write_frames(
                    str(self._partial), size, fps=self.fps, codec="libx264", macro_block_size=1,
                    ffmpeg_log_level="error", output_params=["-f", "mp4"],
                )
                self._writer.send(None)  # starts ffmpeg
            if size != self._size:
                raise VideoError(f"video {self._path}: frame {self._frames + 1} is {size[0]}x{size[1]}, "
                                 f"the first was {self._size[0]}x{self._size[1]}")
            self._writer.send(frame)
        except VideoError:
            raise
        except Exception as err:  # noqa: BLE001  (ffmpeg's failures: a full disk, a folder that is gone...)
            raise VideoError(f"video {self._path}: cannot be written ({_first_line(err)})") from err
        self._frames += 1

    def _finish(self) -> None:
        path, partial = self._path, self._partial
        writer, self._writer, self._path = self._writer, None, None
        try:
            writer.close()  # waits for ffmpeg to write the file
            os.replace(partial, path)
        except Exception as err:  # noqa: BLE001
            partial.unlink(missing_ok=True)
            raise VideoError(f"video {path}: cannot be written ({_first_line(err)})") from err
        self.frame_counts.append(self._frames)

    def _drop(self) -> None:
        """Drop the episode being recorded (its partial file too)."""
        if self._path is None:
            return
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
        except Exception:  # noqa: BLE001  (ffmpeg already failed: that error is the one raised)
            pass
        finally:
            self._partial.unlink(missing_ok=True)
            self._path = None


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def check_renders(make_env: Callable[[], gym.Env], *, label: str, owner: str) -> None:
    """Check that videos can be recorded: ``imageio-ffmpeg`` is installed and ``make_env()`` makes
    an env whose ``render()`` after a reset is an RGB image. Once per ``make_env`` (by its repr) a
    process; the env is closed again.

    Raises:
        ValueError: one line, ``"{owner}: {label} cannot record videos: <why>"``, naming what is needed.
    """
    key = repr(make_env)
    if key in _RENDERS:
        return
    prepare_rendering()
    try:
        _ffmpeg()
    except VideoError as err:
        raise ValueError(f"{owner}: {err}") from None
    with warnings.catch_warnings():  # gymnasium's warning about a render_mode the env does not list: the error says it
        warnings.simplefilter("ignore")
        try:
            env = make_env()
        except Exception as err:  # noqa: BLE001  (the env's constructor: any failure)
            raise _cannot(owner, label, f"making it with render_mode='rgb_array' failed ({_first_line(err)})") from err
        try:
            env.reset(seed=0)
            _rgb(env.render())
        except Exception as err:  # noqa: BLE001
            raise _cannot(owner, label, _render_failure(env, err)) from err
        finally:
            env.close()
    _RENDERS.add(key)


def _render_failure(env: gym.Env, err: BaseException) -> str:
    reason = str(err) if isinstance(err, VideoError) else f"rendering failed ({_first_line(err)})"
    if isinstance(err, gym.error.DependencyNotInstalled):
        reason += f"; {VIDEO_EXTRA} installs pygame, which classic control renders with"
    elif type(env.unwrapped).__module__.startswith("gymnasium.envs.mujoco") and os.environ.get("MUJOCO_GL") == "osmesa":
        reason += "; MuJoCo renders here through OSMesa (MUJOCO_GL=osmesa, no display): apt-get install libosmesa6"
    return reason


def _cannot(owner: str, label: str, reason: str) -> ValueError:
    return ValueError(f"{owner}: {label} cannot record videos: {reason}; videos need an env that renders RGB images "
                      "with render_mode='rgb_array'")


def record_episodes(
    make_env: Callable[[], gym.Env],
    policy: Policy,
    num_episodes: int,
    folder: str | Path,
    *,
    name: str = "episode",
    seed: int | None = None,
    device: torch.device | str | None = None,
) -> list[Video]:
    """Play ``num_episodes`` evaluation episodes of ``policy`` and write each to
    ``folder/{name}_ep{k}.mp4`` (k = 1, 2, ...); return them (see the module docstring).

    Args:
        make_env: makes one env copy with ``render_mode="rgb_array"``, wrapped as the policy
            expects (e.g. :func:`~engine_rl.recipes.env_source.recipe_render_env`); called once.
        policy: the deterministic policy, as :func:`~engine_rl.evaluation.create_evaluator` takes it.
        num_episodes: episodes to record (a positive int).
        folder: where the files go (created if missing); files of the same names are replaced.
        name: the files' name before ``_ep{k}.mp4``.
        seed: the first reset's seed (``None``: unseeded).
        device: the policy's device (``None``: from its parameters).

    Raises:
        VideoError: ``imageio-ffmpeg`` is missing, a frame is no RGB image, or a file cannot be
            written (naming it); no partial file is left. The env's and policy's own errors
            (an evaluation's :class:`~engine_rl.finite.NonFiniteError`) are raised as they are.
    """
    num_episodes = positive_int(num_episodes, name="num_episodes", owner="record_episodes")
    _ffmpeg()
    prepare_rendering()
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise VideoError(f"videos: folder {folder} cannot be made ({_first_line(err)})") from err
    recorders: list[FrameRecorder] = []

    def make_recorded() -> FrameRecorder:
        recorder = FrameRecorder(make_env(), [folder / f"{name}_ep{k}.mp4" for k in range(1, num_episodes + 1)])
        recorders.append(recorder)
        return recorder

    env = SyncVectorEnv([make_recorded], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        output = create_evaluator(env, policy, num_episodes=num_episodes, seed=seed, device=device).run().output
    except EnvError as err:  # the stepper's wrapping of an env error: a FrameRecorder's is said as it is
        if isinstance(err.__cause__, VideoError):
            raise err.__cause__ from None
        raise
    finally:
        env.close()  # an unfinished file is dropped
    recorder = recorders[0]
    lengths, returns = output["length"].tolist(), output["return"].tolist()
    videos = []
    for k, (path, frames) in enumerate(zip(recorder.paths, recorder.frame_counts), 1):
        if frames != lengths[k - 1] + 1:  # the evaluation and the file disagree: never report such a video
            raise VideoError(f"video {path}: {frames} frames written for an episode of {lengths[k - 1]} steps")
        videos.append(Video(path, k, frames, lengths[k - 1], float(returns[k - 1]), recorder.fps))
    if len(videos) != num_episodes:
        raise VideoError(f"videos in {folder}: {len(videos)} of {num_episodes} episodes were recorded")
    return videos
