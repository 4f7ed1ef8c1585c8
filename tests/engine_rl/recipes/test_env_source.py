"""The envs a recipe makes: ``env_kwargs``, ALE ids without their own frame skip, and evaluation
episodes of an env with no time limit ending at a step cap."""

from functools import partial

import gymnasium as gym
import pytest

from engine_rl.collectors.step_cap import EvaluationStepCap
from engine_rl.recipes import env_source
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.env_source import EVAL_STEP_CAP, recipe_spaces, recipe_vec_env
from engine_rl.recipes.ppo_cartpole import PPOConfig
from engine_rl.run.driver import make_config, train
from support.user_envs import Corridor


def time_limits(vector_env):
    """The step limits around the first env copy, outermost first: a TimeLimit's ``max_episode_steps``,
    ``("cap", steps)`` for the evaluation cap."""
    env, limits = vector_env.envs[0], []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            limits.append(env.spec.max_episode_steps if env.spec else None)
        if isinstance(env, EvaluationStepCap):
            limits.append(("cap", env.max_episode_steps))
        env = env.env
    return limits


@pytest.mark.parametrize("fields, training, evaluation", [
    ({"env_id": "CliffWalking-v1"}, [], [("cap", EVAL_STEP_CAP)]),  # registered with no time limit
    ({"env_id": "FrozenLake-v1"}, [100], [100]),  # its own limit stays the only one
    ({"env_id": "CliffWalking-v1", "wrappers": ("TimeLimit(max_episode_steps=60)",)}, [60], [60]),
    ({"make_env": partial(Corridor)}, [], [("cap", EVAL_STEP_CAP)]),  # a callable: capped, whatever it wraps
])
def test_only_evaluation_envs_with_no_time_limit_get_the_cap(fields, training, evaluation):
    cfg = PPOConfig(vectorization="sync", **fields)
    for is_eval, expected in ((False, training), (True, evaluation)):
        env = recipe_vec_env(cfg, 2, evaluation=is_eval)
        try:
            assert time_limits(env) == expected
        finally:
            env.close()


def test_a_vector_entry_point_env_keeps_its_own_limit_and_vectorization():
    env = recipe_vec_env(PPOConfig(), 2, evaluation=True)
    assert type(env).__name__ == "CartPoleVectorEnv"
    env.close()


def test_a_greedy_policy_stuck_in_cliff_walking_cannot_stall_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(env_source, "EVAL_STEP_CAP", 50)
    cfg = make_config("ppo-cartpole", env_id="CliffWalking-v1", total_frames=512, eval_episodes=2)
    with pytest.warns(UserWarning, match=r"^evaluation episodes of CliffWalking-v1 ran to the cap of 50 steps: the "
                                         r"env sets no time limit .*TimeLimit\(max_episode_steps=N\)"):
        summary = train("ppo-cartpole", cfg, tmp_path, progress=False)
    assert summary["frames"] == 512 and summary["eval_length_mean"] == 50  # the untrained greedy policy is stuck


def test_env_kwargs_reach_gymnasium_make_and_the_vector_entry_point_when_it_takes_them():
    cfg = PPOConfig(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
    assert recipe_spaces(cfg) == (gym.spaces.Discrete(64), gym.spaces.Discrete(4))
    env = recipe_vec_env(PPOConfig(env_kwargs={"max_episode_steps": 50}), 2, evaluation=True)
    assert type(env).__name__ == "CartPoleVectorEnv" and env.max_episode_steps == 50  # it takes the argument
    env.close()


def test_an_argument_the_vector_entry_point_does_not_take_vectorizes_the_env_copies():
    pytest.importorskip("ale_py")
    env = recipe_vec_env(PPOConfig(env_id="ALE/Pong-v5", env_kwargs={"obs_type": "ram"}), 2)
    assert type(env).__name__ == "SyncVectorEnv" and env.single_observation_space.shape == (128,)
    env.close()


def test_env_kwargs_from_the_command_line_and_their_errors():
    cfg = apply_overrides(PPOConfig(), ["env_id=FrozenLake-v1", "env_kwargs={'map_name': '8x8'}"])
    assert cfg.env_kwargs == {"map_name": "8x8"}
    with pytest.raises(ValueError, match=r"^PPOConfig: override env_kwargs='3' is not a valid dict$"):
        apply_overrides(PPOConfig(), ["env_kwargs=3"])
    with pytest.raises(ValueError, match=r"^PPOConfig: env_kwargs must be a dict of keyword arguments \(str keys\) "
                                         r"or None, got \{'map name': 1\}"):
        PPOConfig(env_kwargs={"map name": 1})
    with pytest.raises(ValueError, match=r"^PPOConfig: env_id 'FrozenLake-v1' cannot be made with env_kwargs "
                                         r"\{'mapname': '8x8'\}: TypeError: .*unexpected keyword argument 'mapname'"):
        PPOConfig(env_id="FrozenLake-v1", env_kwargs={"mapname": "8x8"}).check_env()  # the env: at build time


def test_an_ale_v5_id_is_made_without_its_own_frame_skip_for_the_atari_wrappers():
    pytest.importorskip("ale_py")
    from engine_rl.recipes.ppo_atari import PPOAtariConfig

    assert PPOAtariConfig(env_id="ALE/Breakout-v5").env_kwargs == {"frameskip": 1}
    assert PPOAtariConfig().env_kwargs is None  # BreakoutNoFrameskip-v4 skips none
    observation, _ = recipe_spaces(PPOAtariConfig(env_id="ALE/Breakout-v5"))
    assert observation.shape == (4, 84, 84)
