import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode

from engine_rl.collectors import make_vec_env, vec_env_spec
from engine_rl.collectors.gym_envs import env_spaces, env_spec


def test_default_mode_prefers_vector_entry_point():
    env = make_vec_env("CartPole-v1", 3, max_episode_steps=7)
    assert type(env.unwrapped).__name__ == "CartPoleVectorEnv"
    assert env.num_envs == 3 and env.unwrapped.max_episode_steps == 7
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert isinstance(make_vec_env("Pendulum-v1", 2), gym.vector.SyncVectorEnv)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sync_and_async_default_to_same_step(mode):
    env = make_vec_env("CartPole-v1", 2, mode=mode)
    try:
        assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    finally:
        env.close()
    env = make_vec_env("CartPole-v1", 2, mode="sync", autoreset_mode="NextStep")
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP


def test_make_vec_env_errors():
    for n in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="make_vec_env: num_envs must be a positive int"):
            make_vec_env("CartPole-v1", n)
    with pytest.raises(ValueError, match="mode must be 'auto', 'vector_entry_point', 'sync' or 'async', got 'fast'"):
        make_vec_env("CartPole-v1", 2, mode="fast")
    with pytest.raises(ValueError, match="autoreset_mode can only be chosen with mode='sync' or 'async'"):
        make_vec_env("CartPole-v1", 2, mode="vector_entry_point", autoreset_mode="SameStep")


def test_unknown_ids_and_missing_vector_entry_points_are_named():
    with pytest.raises(ValueError, match=r"make_vec_env: env_id 'Cartpole-v1' is not a registered gymnasium env; "
                                         r"close matches: CartPole-v1"):
        make_vec_env("Cartpole-v1", 2)
    with pytest.raises(ValueError, match=r"make_vec_env: Pendulum-v1 registers no vector entry point, so "
                                         r"mode='vector_entry_point' cannot make it; use mode='sync' or 'async'"):
        make_vec_env("Pendulum-v1", 2, mode="vector_entry_point")
    with pytest.raises(ValueError, match=r"env_spec: env_id 'no_such_module:Env-v0': cannot import 'no_such_module'"):
        env_spec("no_such_module:Env-v0")
    observation, action = env_spaces("Pendulum-v1")
    assert observation.shape == (3,) and action.shape == (1,)
    assert env_spaces("Pendulum-v1")[1] is action  # made once per registration


def test_vec_env_spec():
    spec = vec_env_spec(make_vec_env("CartPole-v1", 3))
    assert (spec.num_envs, spec.observation_shape, spec.action_shape) == (3, (4,), ())
    assert spec.action_dtype == torch.int64 and spec.num_actions == 2 and spec.discrete
    spec = vec_env_spec(make_vec_env("Pendulum-v1", 2))
    assert spec.action_shape == (1,) and spec.action_dtype == torch.float32
    assert spec.num_actions is None and not spec.discrete
    assert spec.autoreset_mode is AutoresetMode.SAME_STEP


def test_vec_env_spec_errors():
    with pytest.raises(TypeError, match="demo: env must be a gymnasium.vector.VectorEnv, got TimeLimit"):
        vec_env_spec(gym.make("CartPole-v1"), owner="demo")
    with pytest.raises(ValueError, match="the env must autoreset"):
        vec_env_spec(make_vec_env("CartPole-v1", 2, mode="sync", autoreset_mode="Disabled"))
    spec = vec_env_spec(make_vec_env("FrozenLake-v1", 2))  # Discrete observations: int64 indices
    assert [(f.path, f.shape, f.dtype) for f in spec.observation_fields] == [((), (), torch.int64)]
    env = make_vec_env("Blackjack-v1", 2)  # Tuple observations
    with pytest.raises(ValueError, match=r"^vec_env_spec: the observation space is Tuple\(Discrete\(32\), .*which "
                       r"cannot be stored; each leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict"):
        vec_env_spec(env)
