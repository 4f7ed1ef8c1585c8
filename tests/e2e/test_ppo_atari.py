"""ppo-atari: CleanRL's ppo_atari defaults, the Atari preprocessing, FIRE at each life's start,
rewards clipped for the loss while reported returns stay the game score, uint8 frames.

Seed 0 throughout, the suite's seed offset added (support.seeds).
"""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl.cli import main
from engine_rl.collectors.atari import ATARI_WRAPPERS, FireOnLifeStart
from engine_rl.events import RLEvents
from engine_rl.recipes import get_recipe
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.ppo_atari import PPOAtariConfig
from engine_rl.recipes.ppo_cartpole import PPOConfig
from support.random_play import random_return
from support.seeds import seed_arg

pytest.importorskip("ale_py")


def test_defaults_are_cleanrls():
    cfg = PPOAtariConfig()
    assert (cfg.env_id, cfg.num_envs, cfg.steps_per_env, cfg.batch_size, cfg.num_epochs) == (
        "BreakoutNoFrameskip-v4", 8, 128, 256, 4)
    assert cfg.minibatches == 4 and cfg.total_frames == 10_000_000 and cfg.wrappers == ATARI_WRAPPERS
    assert (cfg.lr, cfg.lr_end, cfg.adam_eps, cfg.clip_epsilon, cfg.clip_epsilon_end, cfg.value_clip) == (
        2.5e-4, 0.0, 1e-5, 0.1, 0.1, 0.1)
    assert (cfg.gamma, cfg.gae_lambda, cfg.entropy_coef, cfg.value_coef, cfg.max_grad_norm) == (0.99, 0.95, 0.01, 0.5, 0.5)
    assert cfg.clip_rewards and cfg.hidden == () and not cfg.normalize_rewards and not cfg.normalize_observations


class ActionLog(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(int(action))
        return self.env.step(action)


def test_fire_is_pressed_after_reset_and_after_each_lost_life():
    log = ActionLog(gym.make("BreakoutNoFrameskip-v4"))
    env = FireOnLifeStart(log)
    _, info = env.reset(seed=0)
    assert log.actions == [1] and info["lives"] == 5  # FIRE launched the first ball
    lives, fired_after_loss = 5, 0
    for _ in range(5000):  # NOOP: the paddle never moves, each ball is lost
        _, _, terminated, truncated, info = env.step(0)
        if info["lives"] < lives and not terminated:
            assert log.actions[-2:] == [0, 1]  # the losing NOOP, then FIRE
            fired_after_loss += 1
        lives = info["lives"]
        if terminated or truncated:
            break
    assert terminated and fired_after_loss == 4  # five balls lost, the game over after the fifth
    assert log.actions.count(1) == 5


def test_fire_on_life_start_refuses_a_game_without_fire():
    with pytest.raises(ValueError, match=r"FireOnLifeStart: the env must be an Atari game with a FIRE action, "
                                         r"got CartPole-v1 with actions None"):
        FireOnLifeStart(gym.make("CartPole-v1"))


def test_frames_stay_uint8_and_the_loss_sees_clipped_rewards():
    recipe = get_recipe("ppo-atari")
    cfg = apply_overrides(recipe.config_cls(), {"num_envs": 2, "steps_per_env": 128, "batch_size": 128,
                                                "total_frames": 256, "eval_every": 1000, "eval_episodes": 1})
    setup = recipe.build(cfg)
    seen = []
    setup.trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.batch.clone()))
    try:
        setup.trainer.run()
    finally:
        setup.close()
    batch = seen[0]
    assert batch["observation"].dtype == torch.uint8 and batch["observation"].shape == (2, 128, 4, 84, 84)
    assert batch["next", "observation"].dtype == torch.uint8
    assert set(batch["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}


class Jackpot(gym.Env):
    """Pays 5 per step for 4 steps: a clipped loss sees 1 per step, the reported return is 20."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 5.0, False, False, {}


gym.register("engine_rl_tests/Jackpot-v0", entry_point=Jackpot, max_episode_steps=4)


def test_clipped_rewards_leave_the_reported_returns_as_the_games(tmp_path, capsys):
    seen = []
    recipe = get_recipe("ppo-cartpole")
    cfg = PPOConfig(env_id="engine_rl_tests/Jackpot-v0", num_envs=2, steps_per_env=8, batch_size=16,
                    total_frames=32, eval_every=2, eval_episodes=2, clip_rewards=True)
    setup = recipe.build(cfg)
    setup.trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(
        (e.state.batch["next", "reward"].clone(), e.state.batch["next", "episode_return"].clone())))
    try:
        setup.trainer.run()
    finally:
        setup.close()
    reward, episode_return = seen[0]
    assert reward.unique().tolist() == [1.0]
    assert episode_return.max().item() == 20.0
    assert setup.trainer.state.metrics["eval_return_mean"] == 20.0


def test_clip_rewards_must_be_a_bool():
    with pytest.raises(ValueError, match="PPOConfig: clip_rewards must be True or False, got 'yes'"):
        PPOConfig(clip_rewards="yes")


def test_an_atari_id_needs_no_module_prefix_and_a_typo_names_close_ids(capsys):
    assert main(["train", "ppo-atari", "--set", "env_id=BreakoutNoFrameskip-v5", "--out", "/tmp/unused"]) == 2
    err = capsys.readouterr().err
    assert "env_id 'BreakoutNoFrameskip-v5' is not a registered gymnasium env; close matches: BreakoutNoFrameskip-v4" in err


def test_dqn_atari_defaults_are_rl_zoos_and_a_short_run_stores_uint8_frames_and_clipped_rewards(tmp_path, capsys):
    from engine_rl.recipes.dqn_atari import DQNAtariConfig

    cfg = DQNAtariConfig()
    assert (cfg.buffer_size, cfg.lr, cfg.batch_size, cfg.learning_starts, cfg.eps_end, cfg.eps_frames) == (
        100_000, 1e-4, 32, 100_000, 0.01, 1_000_000)
    assert cfg.frames_per_batch / cfg.optim_steps_per_batch == 4 and cfg.target_update_every * 4 == 1000
    assert cfg.clip_rewards and not cfg.double and cfg.hidden == () and cfg.wrappers == ATARI_WRAPPERS
    recipe = get_recipe("dqn-atari")
    short = apply_overrides(cfg, {"total_frames": 512, "learning_starts": 256, "optim_steps_per_batch": 4,
                                  "buffer_size": 1000, "eval_every": 1000, "eval_episodes": 1,
                                  "replay_storage": "memmap"})
    setup = recipe.build(short)
    try:
        setup.trainer.run()
        buffer = setup.to_save["replay"]
        rows = buffer.sample(64)
        assert rows["observation"].dtype == torch.uint8 and rows["observation"].shape == (64, 4, 84, 84)
        assert set(rows["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
        assert setup.trainer.state.optim_steps == 8  # both 256-frame batches reach learning_starts
    finally:
        setup.close()


def atari_random_return(env_id, episodes):
    """Uniform random actions through the recipe's preprocessing (FIRE at each life's start)."""
    from engine_rl.collectors.wrappers import apply_wrappers, parse_wrappers

    return random_return(apply_wrappers(gym.make(env_id), parse_wrappers(ATARI_WRAPPERS)), episodes)


def breakout_random_return():
    """About 1.2."""
    return atari_random_return("BreakoutNoFrameskip-v4", 30)


def training_return_after(metrics_path, frames):
    """Mean return of the training episodes that ended after ``frames``: each train line of
    ``metrics.jsonl`` holds the mean of the episodes that ended in its batch and the running count."""
    total, count, seen = 0.0, 0, 0
    for line in metrics_path.read_text().splitlines():
        row = json.loads(line)
        if row["kind"] != "train":
            continue
        new = row.get("episodes", 0) - seen
        if new > 0 and row["frames"] > frames:
            total, count = total + new * row["train_return_mean"], count + new
        seen = row.get("episodes", seen)
    return total / count, count


@pytest.mark.slow
@pytest.mark.ci
def test_ppo_atari_beats_random_play_on_up_n_down_in_32k_frames(tmp_path, capsys):
    """CI's Atari learning bar, about 3 minutes here: the recipe as it is (CleanRL's values, the
    Nature CNN, ATARI_WRAPPERS) on UpNDown, seed 0, 32,768 frames. The episodes of the sampling
    policy that end in the last 8,192 frames (what CleanRL's curves plot) average more than twice
    random play (428 over 20 episodes). Margin checked over seeds 0-4 (--seed-offset 0-4) after the GAE
    value fix (2026-12-07): 1337, 1802, 1340, 1410, 1558; lowest 1337 (13-14 episodes on each). Breakout shows nothing at this budget (see
    below), and neither does the greedy evaluation here: the argmax of a policy still this
    uncertain scored 20 on seeds 0 and 1."""
    env_id = "UpNDownNoFrameskip-v4"
    assert main(["train", "ppo-atari", "--frames", "32768", "--seed", seed_arg(0), "--set", f"env_id={env_id}",
                 "--set", "eval_every=100", "--set", "eval_episodes=1", "--out", str(tmp_path), "--no-progress"]) == 0
    capsys.readouterr()
    baseline = atari_random_return(env_id, 20)
    assert 300 < baseline < 600
    learned, episodes = training_return_after(tmp_path / "metrics.jsonl", 32768 - 8192)
    assert episodes >= 8 and learned > 2 * baseline, (learned, episodes, baseline)


@pytest.mark.slow
def test_breakout_beats_random_play_in_150k_frames(tmp_path, capsys):
    """About 21 minutes on one core here, so not in CI: up to ~50k frames the greedy evaluation
    stays at or below 1.8 (seed 0: 1.8, 1.8, 1.8, 0, 0 at 10k-51k), and learning shows after ~100k."""
    assert main(["train", "ppo-atari", "--frames", "153600", "--seed", seed_arg(0), "--out", str(tmp_path), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    baseline = breakout_random_return()
    assert 0.5 < baseline < 2.0
    assert summary["eval_return_mean"] > 3 * baseline, (summary["eval_return_mean"], baseline)
