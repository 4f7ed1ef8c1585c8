import gymnasium as gym
import pytest
import torch

from engine_rl.collectors import make_vec_env, run_episodes


def left(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def single_env_lengths(seed, episodes, **kwargs):
    env = gym.make("CartPole-v1", **kwargs)
    env.reset(seed=seed)
    lengths = []
    for _ in range(episodes):
        if lengths:
            env.reset()
        length, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            length, done = length + 1, terminated or truncated
        lengths.append(length)
    return lengths


@pytest.mark.parametrize("autoreset_mode", ["SameStep", "NextStep"])
def test_matches_single_env_rollouts(autoreset_mode):
    env = make_vec_env("CartPole-v1", 3, mode="sync", autoreset_mode=autoreset_mode)
    res = run_episodes(env, left, num_episodes=8, seed=4)
    assert res["return"].dtype == torch.float32 and res["length"].dtype == torch.int64
    # copy i runs 3, 3, 2 episodes, seeded seed + i; results are grouped by copy
    expected = single_env_lengths(4, 3) + single_env_lengths(5, 3) + single_env_lengths(6, 2)
    assert res["length"].tolist() == expected
    assert torch.equal(res["return"], res["length"].float())


def test_short_episodes_do_not_crowd_out_long_ones():
    env = gym.vector.SyncVectorEnv(
        [
            lambda: gym.make("CartPole-v1", max_episode_steps=2),
            lambda: gym.make("CartPole-v1", max_episode_steps=6),
        ]
    )
    res = run_episodes(env, left, num_episodes=4, seed=0)
    assert res["length"].tolist() == [2, 2, 6, 6]  # not the first four to finish: [2, 2, 2, 6]


def test_vector_entry_point_and_fewer_episodes_than_envs():
    env = make_vec_env("CartPole-v1", 4, max_episode_steps=5)
    res = run_episodes(env, left, num_episodes=3)
    assert res["length"].tolist() == [5, 5, 5] and res["return"].tolist() == [5.0, 5.0, 5.0]
    res = run_episodes(make_vec_env("CartPole-v1", 4), left, num_episodes=9, seed=1)
    assert res["length"].shape == (9,) and (res["length"] >= 8).all() and (res["length"] <= 12).all()


def test_seeded_runs_repeat():
    def run():
        return run_episodes(make_vec_env("CartPole-v1", 2), left, num_episodes=4, seed=3)["length"]

    assert torch.equal(run(), run())


def test_bad_arguments():
    env = make_vec_env("CartPole-v1", 2)
    for n in (0, 1.5, True):
        with pytest.raises(ValueError, match="run_episodes: num_episodes must be a positive int"):
            run_episodes(env, left, num_episodes=n)
    with pytest.raises(KeyError, match="run_episodes: the policy must write 'action'"):
        run_episodes(env, lambda td: td, num_episodes=1)
