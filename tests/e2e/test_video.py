"""``--video N`` (issue 39): MP4s of evaluation episodes for each env family, decoded and counted.

Each video is decoded with ffmpeg (``imageio_ffmpeg.read_frames``, every frame) and must hold the
reset frame and one frame per step of its episode: ``length + 1`` frames, where ``length`` is
counted here by stepping the run's final policy by hand in a plain env (made with the config's
id, ``env_kwargs`` and wrappers, seeded with ``eval_seed`` at the first reset, as the video is).
Tiny budgets: a few seconds a run. Seeds from support.seeds (the suite's offset added).
"""

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from engine_rl.cli import main
from engine_rl.collectors.gym_envs import make_one_env
from engine_rl.recipes import get_recipe
from engine_rl.recipes.env_source import env_source
from engine_rl.run.checkpoint import InferenceState
from engine_rl.run.driver import load_run_config
from support.seeds import seed_arg

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="the [video] extra is not installed (.ci/install does)")


def decoded(path: Path) -> tuple[int, tuple[int, int]]:
    """(frames, (width, height)) of an MP4, decoding every frame."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return sum(1 for _ in reader), tuple(meta["size"])


def played_lengths(run: Path, episodes: int) -> list[int]:
    """The steps of the final policy's first ``episodes`` episodes from ``eval_seed``, by hand."""
    config = load_run_config(run)
    setup = get_recipe(json.loads((run / "config.json").read_text())["recipe"]).build(config)
    try:
        state = torch.load(run / "inference.pt", weights_only=True)
        InferenceState(setup.eval_policy, normalizer=getattr(setup, "normalizer", None)).load_state_dict(state)
        policy = setup.eval_policy.eval()
        env = make_one_env(env_source(config), wrappers=config.wrappers, **(config.env_kwargs or {}))
        lengths, obs = [], env.reset(seed=config.eval_seed)[0]
        while len(lengths) < episodes:
            steps, done = 0, False
            while not done:
                observation = torch.as_tensor(np.asarray(obs))
                if observation.is_floating_point():
                    observation = observation.float()
                with torch.no_grad():
                    action = policy(TensorDict({"observation": observation[None]}, [1]))["action"][0]
                obs, _, terminated, truncated, _ = env.step(action.numpy() if action.ndim else action.item())
                steps, done = steps + 1, terminated or truncated
            lengths.append(steps)
            obs = env.reset()[0]
        env.close()
        return lengths
    finally:
        setup.close()


def train(tmp_path: Path, capsys, *args: str) -> dict:
    out = tmp_path / "run"
    assert main(["train", *args, "--seed", seed_arg(0), "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_cartpole_final_and_best_videos_and_eval_video(tmp_path, capsys):
    summary = train(tmp_path, capsys, "ppo-cartpole", "--frames", "2048", "--set", "eval_every=1",
                    "--set", "eval_episodes=2", "--video", "2", "--video-best")
    run = tmp_path / "run"
    frames = summary["frames"]
    names = [Path(p).name for p in summary["videos"]]
    assert f"final_{frames}_ep1.mp4" in names and f"final_{frames}_ep2.mp4" in names
    best = [n for n in names if n.startswith("best_")]
    assert best and len(best) % 2 == 0 and all(n.endswith(("_ep1.mp4", "_ep2.mp4")) for n in best)
    assert sorted(p.name for p in (run / "videos").iterdir()) == sorted(names)  # no partial file left
    lengths = played_lengths(run, 2)
    for k, length in enumerate(lengths, 1):
        assert decoded(run / "videos" / f"final_{frames}_ep{k}.mp4") == (length + 1, (600, 400))

    # engine-rl eval --video: the same episodes of the same policy, named after the checkpoint
    assert main(["eval", str(run), "--episodes", "2", "--video", str(tmp_path / "eval"), "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(v["path"], v["episode"], v["length"], v["frames"]) for v in result["videos"]] == [
        (str(tmp_path / "eval" / f"inference_ep{k}.mp4"), k, n, n + 1) for k, n in enumerate(lengths, 1)]
    for video in result["videos"]:
        assert decoded(Path(video["path"]))[0] == video["frames"]
        assert video["fps"] == 50 and video["return"] == video["length"]  # CartPole: reward 1 a step


def test_mujoco_video_renders_offscreen(tmp_path, capsys):
    pytest.importorskip("mujoco", reason="the [mujoco] extra is not installed")
    summary = train(tmp_path, capsys, "ppo-mujoco", "--set", "env_id=InvertedPendulum-v5", "--frames", "512",
                    "--set", "steps_per_env=256", "--set", "eval_episodes=1", "--video", "2")
    run = tmp_path / "run"
    assert [Path(p).name for p in summary["videos"]] == ["final_512_ep1.mp4", "final_512_ep2.mp4"]
    for k, length in enumerate(played_lengths(run, 2), 1):
        assert decoded(run / "videos" / f"final_512_ep{k}.mp4") == (length + 1, (480, 480))


def test_atari_video_records_the_screen_while_the_policy_sees_preprocessed_frames(tmp_path, capsys):
    pytest.importorskip("ale_py", reason="the [atari] extra is not installed")
    summary = train(tmp_path, capsys, "ppo-atari", "--frames", "256", "--set", "steps_per_env=32",
                    "--set", "env_kwargs={'max_episode_steps': 240}", "--set", "eval_episodes=1", "--video", "1")
    run = tmp_path / "run"
    assert [Path(p).name for p in summary["videos"]] == ["final_256_ep1.mp4"]
    (length,) = played_lengths(run, 1)
    assert 20 < length <= 60  # 240 emulator frames, 4 a step, after up to 30 no-op starts
    assert decoded(run / "videos" / "final_256_ep1.mp4") == (length + 1, (160, 210))  # the 210x160 screen, not 84x84


def test_an_env_that_cannot_render_is_one_line_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "ppo-cartpole", "--set", "env_id=support.user_envs:engine_rl_tests/Corridor-v0",
                 "--video", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "engine-rl: error: --video 1: env_id 'support.user_envs:engine_rl_tests/Corridor-v0' cannot record videos: "
        "making it with render_mode='rgb_array' failed (TypeError: Corridor() takes no arguments was raised from the "
        "environment creator for engine_rl_tests/Corridor-v0 with kwargs ({'render_mode': 'rgb_array'})); videos need "
        "an env that renders RGB images with render_mode='rgb_array'\n")
    assert not out.exists()


def test_a_video_that_cannot_be_written_is_one_warning_and_the_run_keeps_its_files(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "videos").write_text("a file where the videos folder goes\n")
    assert main(["train", "ppo-cartpole", "--frames", "1024", "--seed", seed_arg(0), "--out", str(out),
                 "--no-progress", "--set", "eval_episodes=1", "--video", "1"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "VideoWarning" in line]
    assert warnings == [
        f"engine-rl: warning: VideoWarning: videos of the final policy at frames 1024 not recorded (VideoError: "
        f"videos: folder {out / 'videos'} cannot be made (FileExistsError: [Errno 17] File exists: "
        f"'{out / 'videos'}')); the run's other files are unaffected"]
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["videos"] == [] and summary["frames"] == 1024
    for name in ("inference.pt", "policy.pt", "summary.json", "metrics.jsonl", "checkpoints/checkpoint_1024.pt"):
        assert (out / name).is_file(), name


def test_resume_records_once_and_drops_videos_of_the_replaced_continuation(tmp_path, capsys):
    args = ["ppo-cartpole", "--frames", "2048", "--set", "steps_per_env=128", "--set", "eval_every=1",
            "--set", "eval_episodes=1", "--video", "1", "--video-best"]
    paused = train(tmp_path, capsys, *args, "--until-frames", "1024")  # batches of 1024 frames: evaluated at 1024
    run = tmp_path / "run"
    assert paused["paused"] and [Path(p).name for p in paused["videos"]] == ["best_1024_ep1.mp4"]  # the first: a best
    # what a run killed after its checkpoint at 1024 frames had recorded later: replaced by the resume
    (run / "videos" / "best_1536_ep1.mp4").write_bytes(b"from the continuation the resume replaces")
    (run / "videos" / ".final_2048_ep1.mp4.partial").write_bytes(b"cut short by the kill")
    summary = train(tmp_path, capsys, *args, "--resume")
    names = [Path(p).name for p in summary["videos"]]
    # best_2048 only if the evaluation at 2048 beat the one at 1024 (the best score was restored, not reset)
    assert names in (["best_1024_ep1.mp4", "final_2048_ep1.mp4"],
                     ["best_1024_ep1.mp4", "best_2048_ep1.mp4", "final_2048_ep1.mp4"])
    assert sorted(p.name for p in (run / "videos").iterdir()) == names  # best_1536 and the partial file are gone
    # a finished run resumed trains nothing and records nothing again
    mtime = (run / "videos" / "final_2048_ep1.mp4").stat().st_mtime_ns
    assert train(tmp_path, capsys, *args, "--resume")["videos"] == summary["videos"]
    assert (run / "videos" / "final_2048_ep1.mp4").stat().st_mtime_ns == mtime


def test_videos_are_posted_to_the_visdom_dashboard(tmp_path, capsys):
    pytest.importorskip("visdom", reason="the [visdom] extra is not installed")
    from engine_rl.dashboard import VisdomServer, make_client

    with VisdomServer(port=0, env_path=tmp_path / "visdom-envs") as server:
        train(tmp_path, capsys, "ppo-cartpole", "--frames", "1024", "--set", "eval_episodes=1", "--video", "1",
              "--visdom", server.url)
        client = make_client(server.url, env="run")
        window = json.loads(client.get_window_data("video_final_ep1", env="run"))
    html = window["content"]
    encoded = html.split("base64,", 1)[1].split('"', 1)[0]
    assert base64.b64decode(encoded) == (tmp_path / "run" / "videos" / "final_1024_ep1.mp4").read_bytes()
    assert window["title"].startswith("final policy at 1,024 frames: episode 1, return ")


def test_the_readme_video_command_runs(tmp_path, capsys):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    bullet = re.search(r"^- `--video N`.*?(?=^- )", readme, re.S | re.M).group(0)
    command = re.search(r"`engine-rl (train [^`]*--video \d+[^`]*)`", bullet).group(1).split()
    assert command == ["train", "ppo-cartpole", "--video", "2"]
    summary = train(tmp_path, capsys, *command[1:], "--frames", "1024")  # the README's budget is the recipe's 100k
    assert [Path(p).name for p in summary["videos"]] == ["final_1024_ep1.mp4", "final_1024_ep2.mp4"]
    assert "`RUN/videos/final_<frames>_ep<k>.mp4`" in bullet


def test_nproc_records_on_rank_0_only(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "ppo-cartpole", "--frames", "2048", "--nproc", "2", "--set", "eval_episodes=1", "--video", "1",
                 "--seed", seed_arg(0), "--out", str(run), "--no-progress", "--device", "cpu"]) == 0
    summary = json.loads((run / "summary.json").read_text())  # (printed by the spawned rank 0, not captured here)
    assert summary["nproc"] == 2 and [Path(p).name for p in summary["videos"]] == ["final_2048_ep1.mp4"]
    assert decoded(run / "videos" / "final_2048_ep1.mp4")[0] > 1
    # the handler (and its state) is rank 0's alone: rank 1's checkpoint has none
    rank0 = torch.load(run / "checkpoints" / "checkpoint_2048.pt", weights_only=True)
    rank1 = torch.load(run / "checkpoints" / "rank1" / "checkpoint_2048.pt", weights_only=True)
    assert "trainer.VideoRecording" in rank0 and not any("Video" in key for key in rank1)
