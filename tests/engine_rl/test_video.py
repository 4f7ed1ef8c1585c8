"""engine_rl.video: record_episodes, FrameRecorder, check_renders, prepare_rendering."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl import video as video_module
from engine_rl.collectors.gym_envs import make_one_env
from engine_rl.video import FrameRecorder, VideoError, check_renders, prepare_rendering, record_episodes

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="the [video] extra is not installed (.ci/install does)")


def decoded(path):
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return sum(1 for _ in reader), tuple(meta["size"])


def push_left(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def cartpole():
    return make_one_env("CartPole-v1", render_mode="rgb_array")


class Strip(gym.Env):
    """Episodes of ``steps`` steps, rendered as ``shape`` frames whose first pixel counts the steps."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None, steps=3, shape=(7, 5, 4), frame=True):
        self.render_mode, self.steps, self.shape, self.frame, self.t = render_mode, steps, shape, frame, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.steps, False, {}

    def render(self):
        if not self.frame:
            return None
        image = np.zeros(self.shape, np.uint8)
        image[0, 0] = 20 * self.t
        return image


def test_cartpole_episodes_are_the_ones_a_plain_env_plays_with_one_frame_per_step_and_the_reset(tmp_path):
    videos = record_episodes(cartpole, push_left, 3, tmp_path, name="left", seed=7)
    env = gym.make("CartPole-v1")
    lengths = []
    env.reset(seed=7)
    for _ in range(3):  # the same policy stepped by hand: the first reset seeded, the others following on
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
        env.reset()
    assert [(v.path.name, v.episode, v.length, v.frames, v.episode_return, v.fps) for v in videos] == [
        (f"left_ep{k}.mp4", k, n, n + 1, float(n), 50) for k, n in enumerate(lengths, 1)]
    for v in videos:
        assert decoded(v.path) == (v.frames, (600, 400))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["left_ep1.mp4", "left_ep2.mp4", "left_ep3.mp4"]


def test_odd_sized_rgba_frames_are_padded_to_even_rgb(tmp_path):
    (v,) = record_episodes(lambda: Strip(render_mode="rgb_array", steps=4), push_left, 1, tmp_path, seed=0)
    assert (v.frames, v.length, v.fps) == (5, 4, 10)
    assert decoded(v.path) == (5, (6, 8))  # 5 wide, 7 high -> 6 x 8
    reader = imageio_ffmpeg.read_frames(str(v.path))
    next(reader)
    firsts = [np.frombuffer(frame, np.uint8).reshape(8, 6, 3)[0, 0, 0] for frame in reader]
    assert firsts[0] < 8 and (np.diff(np.array(firsts, int)) > 10).all()  # the reset frame, then each step's


def test_an_env_that_renders_no_image_is_a_video_error_and_leaves_no_file(tmp_path):
    with pytest.raises(VideoError, match=r"video .*episode_ep1.mp4: render\(\) returned NoneType, not an RGB image"):
        record_episodes(lambda: Strip(render_mode="rgb_array", frame=False), push_left, 1, tmp_path, seed=0)
    with pytest.raises(VideoError, match=r"render\(\) returned an array of shape \(7, 5\) and dtype uint8"):
        record_episodes(lambda: Strip(render_mode="rgb_array", shape=(7, 5)), push_left, 1, tmp_path, seed=0)
    assert list(tmp_path.iterdir()) == []


def test_ffmpeg_failing_mid_episode_names_the_file_and_leaves_no_partial(tmp_path, monkeypatch):
    real = imageio_ffmpeg.write_frames

    def full_disk(path, *args, **kwargs):  # ffmpeg's writer, failing at the third frame as on a full disk
        writer = real(path, *args, **kwargs)
        writer.send(None)
        try:
            for _ in range(2):
                writer.send((yield))
            yield
            raise OSError(28, "No space left on device")
        finally:
            writer.close()

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", full_disk)
    with pytest.raises(VideoError) as err:
        record_episodes(cartpole, push_left, 1, tmp_path, name="x", seed=0)
    assert str(err.value) == (f"video {tmp_path / 'x_ep1.mp4'}: cannot be written "
                              "(OSError: [Errno 28] No space left on device)")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_be_made_is_a_video_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(VideoError, match=r"videos: folder .*file/videos cannot be made \(NotADirectoryError"):
        record_episodes(cartpole, push_left, 1, tmp_path / "file" / "videos")


def test_frame_recorder_drops_an_episode_cut_short_by_a_reset(tmp_path):
    env = FrameRecorder(Strip(render_mode="rgb_array", steps=10), [tmp_path / "a.mp4", tmp_path / "b.mp4"])
    env.reset(seed=0)
    env.step(0)
    env.reset()  # before the episode ended: not a video
    for _ in range(10):
        env.step(0)
    env.reset()
    env.step(0)
    env.close()
    assert env.frame_counts == [11]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"]
    assert decoded(tmp_path / "a.mp4")[0] == 11


def test_check_renders_names_the_env_and_what_is_needed():
    def corridor():
        return make_one_env("support.user_envs:engine_rl_tests/Corridor-v0", render_mode="rgb_array")

    with pytest.raises(ValueError) as err:
        check_renders(corridor, label="env_id 'Corridor-v0'", owner="--video 2")
    assert str(err.value).startswith(
        "--video 2: env_id 'Corridor-v0' cannot record videos: making it with render_mode='rgb_array' failed "
        "(TypeError: Corridor() takes no arguments")
    assert str(err.value).endswith("; videos need an env that renders RGB images with render_mode='rgb_array'")
    with pytest.raises(ValueError, match=r"^demo: make_env none cannot record videos: render\(\) returned NoneType"):
        check_renders(lambda: Strip(render_mode="rgb_array", frame=False), label="make_env none", owner="demo")
    check_renders(cartpole, label="CartPole-v1", owner="demo")  # renders: no error


def test_check_renders_names_the_extra_when_imageio_ffmpeg_is_missing(monkeypatch):
    def missing():
        raise VideoError(f"videos need {video_module.VIDEO_EXTRA} (ModuleNotFoundError: No module named 'imageio_ffmpeg')")

    monkeypatch.setattr(video_module, "_ffmpeg", missing)
    with pytest.raises(ValueError, match=r"^--video 1: videos need the video extra: pip install engine_rl\[video\]"):
        check_renders(lambda: Strip(render_mode="rgb_array"), label="x", owner="--video 1")


@pytest.mark.parametrize("env, expected", [
    ({}, {"MUJOCO_GL": "osmesa", "SDL_VIDEODRIVER": "dummy"}),  # headless: offscreen rendering
    ({"MUJOCO_GL": "egl"}, {"MUJOCO_GL": "egl", "SDL_VIDEODRIVER": "dummy"}),  # the user's choice is kept
    ({"DISPLAY": ":0"}, {"MUJOCO_GL": None, "SDL_VIDEODRIVER": None}),  # a display: MuJoCo and SDL pick
])
def test_prepare_rendering_sets_osmesa_only_when_headless_and_unset(env, expected, monkeypatch):
    monkeypatch.setattr(video_module.sys, "platform", "linux")
    for name in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    set_now = prepare_rendering()
    assert {name: os.environ.get(name) for name in expected} == expected
    assert set_now == ("osmesa" if not env else None)
