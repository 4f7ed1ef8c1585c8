"""ppo-mujoco: CleanRL's continuous-action PPO defaults, and a short Hopper run that learns.

Seed 0, the suite's seed offset added (support.seeds). A random policy on Hopper-v5 falls within
~20 steps for a return of about 25 (measured below); 20,480 frames of PPO (10 batches) already
hops past 150.
"""

import json

import gymnasium as gym
import pytest

from engine_rl.cli import main
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.ppo_mujoco import PPOMujocoConfig
from support.random_play import random_return
from support.seeds import seed_arg

pytest.importorskip("mujoco")


def test_defaults_are_cleanrls():
    cfg = PPOMujocoConfig()
    assert (cfg.env_id, cfg.num_envs, cfg.steps_per_env, cfg.batch_size, cfg.num_epochs) == ("Hopper-v5", 1, 2048, 64, 10)
    assert cfg.minibatches == 32 and cfg.total_frames == 1_000_000
    assert (cfg.lr, cfg.lr_end, cfg.adam_eps, cfg.clip_epsilon, cfg.clip_epsilon_end, cfg.value_clip) == (
        3e-4, 0.0, 1e-5, 0.2, 0.2, 0.2)
    assert (cfg.gamma, cfg.gae_lambda, cfg.entropy_coef, cfg.value_coef, cfg.max_grad_norm) == (0.99, 0.95, 0.0, 0.5, 0.5)
    assert cfg.normalize_observations and cfg.normalize_rewards and cfg.normalize_advantage
    assert cfg.hidden == (64, 64) and cfg.activation == "tanh" and cfg.ortho_init
    assert apply_overrides(cfg, ["env_id=HalfCheetah-v5"]).env_id == "HalfCheetah-v5"


@pytest.mark.slow
@pytest.mark.ci
def test_hopper_learns_past_random_play_in_20k_frames(tmp_path, capsys):
    """Mean deterministic return > 150 (random play: about 25). Margin checked over seeds 0-4
    (--seed-offset 0-4): lowest 212."""
    assert main(["train", "ppo-mujoco", "--frames", "20480", "--seed", seed_arg(0), "--out", str(tmp_path), "--no-progress",
                 "--set", "eval_every=5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 20480 and summary["optim_steps"] == 10 * 10 * 32
    baseline = random_return(gym.make("Hopper-v5"), 20)
    assert baseline < 40
    assert summary["eval_return_mean"] > 150 > 3 * baseline, (summary["eval_return_mean"], baseline)
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "eval"]
    assert [e["frames"] for e in evals] == [10240, 20480]


def test_a_non_box_observation_space_is_one_error_naming_it(capsys):
    assert main(["train", "ppo-mujoco", "--set", "env_id=Blackjack-v1", "--out", "/tmp/unused"]) == 2
    assert "ppo (Blackjack-v1): the observation space must be a 1-D Box" in capsys.readouterr().err
