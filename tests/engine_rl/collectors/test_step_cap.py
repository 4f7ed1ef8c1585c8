"""A long evaluation says so: one LongEvaluationWarning when an episode passes LONG_EPISODE_STEPS,
naming the env, the episodes done and the limit that will end it (episode_limit)."""

import warnings

import gymnasium as gym
import pytest
import torch

from engine_rl.collectors import episodes, make_vec_env, run_episodes
from engine_rl.collectors.step_cap import LONG_EPISODE_STEPS, LongEvaluationWarning, episode_limit


def up(td):
    """CliffWalking: walk into the top wall forever (the episode never ends by itself)."""
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def left(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def test_the_threshold_is_above_every_normal_evaluation_episode():
    assert LONG_EPISODE_STEPS > 108_000 // 4  # ALE ends an Atari game at 108,000 frames: 27,000 steps, frame skip 4
    assert LONG_EPISODE_STEPS > max(gym.spec(i).max_episode_steps for i in ("HalfCheetah-v5", "BipedalWalkerHardcore-v3",
                                                                            "CartPole-v1", "Acrobot-v1"))


def test_an_evaluation_episode_that_runs_long_is_said_once(monkeypatch):
    monkeypatch.setattr(episodes, "LONG_EPISODE_STEPS", 50)
    env = make_vec_env("CliffWalking-v1", 2, wrappers=("EvaluationStepCap(max_episode_steps=120)",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_episodes(env, up, num_episodes=3, seed=0)  # copy 0 plays 2 episodes, copy 1 one
    assert res["length"].tolist() == [120, 120, 120]
    long = [str(w.message) for w in caught if w.category is LongEvaluationWarning]
    assert long == [
        "evaluation on CliffWalking-v1 is long: an episode has run 50 steps and 0 of 3 episodes are done; the limit "
        "that will end it: the evaluation cap of 120 steps (EvaluationStepCap); a TimeLimit wrapper sets a shorter one"
    ]  # once per evaluation, though copy 0's second episode passes 50 steps too
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_episodes(make_vec_env("CartPole-v1", 2, max_episode_steps=40), left, num_episodes=4, seed=0)
    assert not [w for w in caught if w.category is LongEvaluationWarning]  # episodes shorter than the threshold


def test_episode_limit_names_the_limit_that_ends_an_episode_first():
    assert episode_limit(make_vec_env("CartPole-v1", 2, mode="sync")) == "a TimeLimit of 500 steps"
    assert episode_limit(make_vec_env("CartPole-v1", 2)) == "a TimeLimit of 500 steps"  # a vector entry point
    assert episode_limit(make_vec_env("CartPole-v1", 2, wrappers=("TimeLimit(max_episode_steps=40)",))) == (
        "a TimeLimit of 40 steps")
    cap = "EvaluationStepCap(max_episode_steps=100000)"
    assert episode_limit(make_vec_env("CliffWalking-v1", 2, mode="async", wrappers=(cap,))) == (
        "the evaluation cap of 100,000 steps (EvaluationStepCap)")
    assert episode_limit(make_vec_env("CliffWalking-v1", 1)) == "none (only the env can end them)"
    from gymnasium.envs.toy_text import CliffWalkingEnv

    assert episode_limit(make_vec_env(CliffWalkingEnv, 1)) == (
        "none that its spec shows (only the env can end them)")


def test_an_atari_game_without_frame_skip_is_ended_by_the_cap_before_ales_own_end():
    pytest.importorskip("ale_py")
    cap = "EvaluationStepCap(max_episode_steps=100000)"
    assert episode_limit(make_vec_env("BreakoutNoFrameskip-v4", 1, wrappers=(cap,))) == (
        "the evaluation cap of 100,000 steps (EvaluationStepCap)")
    assert episode_limit(make_vec_env("BreakoutNoFrameskip-v4", 1)) == (
        "ALE's end of an episode at 108,000 frames (108,000 steps)")
