"""sac-mujoco: rl-baselines3-zoo's SAC hyperparameters for MuJoCo, and its refusals."""

import json

import pytest

from engine_rl.cli import main
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.sac_mujoco import SACMujocoConfig
from support.seeds import seed_arg

pytest.importorskip("mujoco")


def test_defaults_are_rl_zoos():
    cfg = SACMujocoConfig()
    assert (cfg.env_id, cfg.num_envs, cfg.total_frames, cfg.learning_starts) == ("HalfCheetah-v5", 1, 1_000_000, 10_000)
    assert (cfg.buffer_size, cfg.batch_size, cfg.lr, cfg.tau, cfg.gamma) == (1_000_000, 256, 3e-4, 0.005, 0.99)
    assert (cfg.frames_per_batch, cfg.steps_per_batch, cfg.hidden) == (1, 1, (256, 256))
    assert cfg.learn_alpha and cfg.alpha_init == 1.0 and cfg.target_entropy is None
    assert cfg.log_every == 1000  # a train line per 1,000 frames (and per episode), not per frame
    assert apply_overrides(cfg, ["env_id=Hopper-v5"]).env_id == "Hopper-v5"


def test_a_short_run_trains_and_evaluates_on_halfcheetah(tmp_path, capsys):
    assert main(["train", "sac-mujoco", "--frames", "1200", "--seed", seed_arg(0), "--out", str(tmp_path), "--no-progress",
                 "--set", "learning_starts=1000", "--set", "eval_episodes=1", "--set", "batch_size=64"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 1200 and summary["optim_steps"] == 201 and summary["eval_length_mean"] == 1000.0


def test_discrete_actions_are_one_error_naming_the_env(capsys):
    assert main(["train", "sac-mujoco", "--set", "env_id=CartPole-v1", "--out", "/tmp/unused"]) == 2
    err = capsys.readouterr().err
    assert "SACMujocoConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions" in err
