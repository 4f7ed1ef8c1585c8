"""td3-mujoco: rl-baselines3-zoo's TD3 values for MuJoCo, and a short run."""

import json

import pytest

from engine_rl.cli import main
from engine_rl.recipes.td3_mujoco import TD3MujocoConfig
from support.seeds import seed_arg

pytest.importorskip("mujoco")


def test_defaults_are_rl_zoos():
    cfg = TD3MujocoConfig()
    assert (cfg.env_id, cfg.num_envs, cfg.total_frames, cfg.learning_starts, cfg.buffer_size) == (
        "HalfCheetah-v5", 1, 1_000_000, 10_000, 1_000_000)
    assert (cfg.lr, cfg.batch_size, cfg.gamma, cfg.tau, cfg.hidden) == (1e-3, 256, 0.99, 0.005, (400, 300))
    assert (cfg.frames_per_batch, cfg.steps_per_batch, cfg.policy_delay) == (1, 1, 2)
    assert (cfg.exploration_noise, cfg.target_noise, cfg.noise_clip) == (0.1, 0.2, 0.5)
    assert cfg.log_every == 1000  # a train line per 1,000 frames (and per episode), not per frame


def test_a_short_run_trains_evaluates_and_resumes_bitwise_on_halfcheetah(tmp_path, capsys):
    args = ["--frames", "1200", "--seed", seed_arg(0), "--no-progress", "--set", "learning_starts=1000", "--set", "eval_episodes=1",
            "--set", "batch_size=64", "--set", "hidden=(32,32)", "--set", "frames_per_batch=100", "--checkpoint-every", "1"]
    assert main(["train", "td3-mujoco", "--out", str(tmp_path / "a"), *args]) == 0
    straight = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert straight["frames"] == 1200 and straight["optim_steps"] == 300 and straight["eval_length_mean"] == 1000.0
    assert main(["train", "td3-mujoco", "--out", str(tmp_path / "b"), *args, "--until-frames", "1100"]) == 0
    assert main(["train", "td3-mujoco", "--out", str(tmp_path / "b"), *args, "--resume"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["eval_return_mean"] == straight["eval_return_mean"]
