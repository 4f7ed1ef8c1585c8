import gymnasium as gym
import pytest

from engine_rl.collectors import make_vec_env
from engine_rl.collectors.gym_envs import env_spaces
from engine_rl.collectors.wrappers import apply_wrappers, parse_wrappers, wrapper_names


def test_names_and_keyword_literals_build_wrappers_in_order():
    wraps = parse_wrappers(("FlattenObservation", "TimeLimit(max_episode_steps=3)"))
    env = apply_wrappers(gym.make("Blackjack-v1"), wraps)
    assert env.observation_space.shape == (32 + 11 + 2,)
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 3


@pytest.mark.parametrize("text, message", [
    ("FlattenObs", "wrappers entry 'FlattenObs' is not a single-env wrapper of gymnasium.wrappers; close matches: "
                   "FlattenObservation"),
    ("TimeLimit(max_episode_steps=n)", "wrappers entry 'TimeLimit(max_episode_steps=n)': keyword arguments must be "
                                       "Python literals"),
    ("TimeLimit(200)", "is not a wrapper name or 'Name(key=value, ...)'"),
    ("__import__('os').system('true')", "is not a wrapper name or 'Name(key=value, ...)'"),
    ("Wrapper", "wrappers entry 'Wrapper' is not a single-env wrapper"),
    ("", "wrappers entries must be non-empty strings, got ''"),
    # Python refuses a repeated keyword; a dict of the keywords kept the last one
    ("TimeLimit(max_episode_steps=10, max_episode_steps=300)",
     "wrappers entry 'TimeLimit(max_episode_steps=10, max_episode_steps=300)': keyword argument 'max_episode_steps' "
     "repeated; give each keyword once"),
])
def test_bad_entries_are_one_error_naming_them(text, message):
    with pytest.raises(ValueError, match="^cfg: ") as err:
        parse_wrappers((text,), owner="cfg")
    assert message in str(err.value)


def test_only_single_env_wrapper_classes_are_accepted():
    names = wrapper_names()
    assert {"FlattenObservation", "TimeLimit", "ClipReward", "AtariPreprocessing", "FrameStackObservation"} <= set(names)
    assert "Wrapper" not in names and "vector" not in names


def test_make_vec_env_wraps_each_copy_and_auto_picks_sync():
    env = make_vec_env("CartPole-v1", 2, wrappers=("TimeLimit(max_episode_steps=4)",))
    assert type(env).__name__ == "SyncVectorEnv"
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, truncated, _ = env.step(env.action_space.sample())
    assert not truncated.any()
    assert env.step(env.action_space.sample())[3].all()  # the 4th step truncates every copy
    with pytest.raises(ValueError, match="wrap each env copy, which mode='vector_entry_point' does not make"):
        make_vec_env("CartPole-v1", 2, mode="vector_entry_point", wrappers=("FlattenObservation",))
    with pytest.raises(ValueError, match="wrapper 'TimeLimit\\(max_steps=4\\)' cannot wrap .*unexpected keyword"):
        make_vec_env("CartPole-v1", 2, wrappers=("TimeLimit(max_steps=4)",))


def test_a_wrapper_out_of_memory_is_one_error_naming_it():
    def stack(env):  # as numpy says it when FrameStackObservation(stack_size=10**9) builds its space
        raise MemoryError("Unable to allocate 14.9 GiB for an array with shape (1000000000, 4) and data type float32")

    stack.__name__ = "FrameStackObservation(stack_size=1000000000)"
    with pytest.raises(ValueError) as err:
        apply_wrappers(gym.make("CartPole-v1"), [stack], owner="DQNConfig")
    assert str(err.value) == (
        "DQNConfig: wrappers entry 'FrameStackObservation(stack_size=1000000000)' runs out of memory (MemoryError: "
        "Unable to allocate 14.9 GiB for an array with shape (1000000000, 4) and data type float32); lower its sizes")


def test_env_spaces_are_the_wrapped_ones():
    assert env_spaces("Blackjack-v1")[0] == gym.spaces.Tuple((gym.spaces.Discrete(32), gym.spaces.Discrete(11),
                                                               gym.spaces.Discrete(2)))
    assert env_spaces("Blackjack-v1", wrappers=("FlattenObservation",))[0].shape == (45,)


def test_mask_velocity_by_name_zeroes_cartpoles_velocities_and_takes_indices_for_other_envs():
    import gymnasium as gym
    import numpy as np

    from engine_rl.collectors.wrappers import apply_wrappers, parse_wrappers

    env = apply_wrappers(gym.make("CartPole-v1"), parse_wrappers(("MaskVelocity",)))
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        assert obs[1] == 0 and obs[3] == 0 and obs[0] != 0 and obs[2] != 0
        obs, *_ = env.step(1)
    acrobot = apply_wrappers(gym.make("Acrobot-v1"), parse_wrappers(("MaskVelocity(indices=(4, 5))",)))
    obs, _ = acrobot.reset(seed=0)
    assert np.all(obs[4:] == 0) and np.any(obs[:4] != 0)
    with pytest.raises(ValueError, match=r"MaskVelocity: no velocity indices known for env id 'Acrobot-v1'"):
        apply_wrappers(gym.make("Acrobot-v1"), parse_wrappers(("MaskVelocity",)), owner="demo")
    with pytest.raises(ValueError, match=r"MaskVelocity: indices must be entries of the 4-dim observation, got \(4,\)"):
        apply_wrappers(gym.make("CartPole-v1"), parse_wrappers(("MaskVelocity(indices=(4,))",)))
