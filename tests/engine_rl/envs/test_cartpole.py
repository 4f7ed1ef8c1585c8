"""Torch CartPole vs gymnasium's CartPole-v1, step by step with identical states and actions.

Reset states come from different generators (per-env torch streams vs numpy), so after every
reset the gymnasium env's state is set to the torch env's; after that nothing is shared. In
float64 each step is the same arithmetic as gymnasium's (on this machine it is bit-identical);
the comparisons allow 1e-12 relative for other libm builds. In float32 the gymnasium env is
re-synchronised before every step and one step is compared with float32 tolerances.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl.envs import CartPole


def gym_envs(n: int, **kwargs):
    envs = [gym.make("CartPole-v1", **kwargs) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    return envs


def set_gym_state(gym_env, torch_env: CartPole, i: int) -> None:
    gym_env.unwrapped.state = torch_env.state[i].double().numpy().copy()


def test_free_running_float64_matches_gymnasium_across_episode_ends():
    n, steps = 16, 600
    env = CartPole(n, dtype=torch.float64)
    env.reset(seed=0)
    envs = gym_envs(n)
    for i, g in enumerate(envs):
        set_gym_state(g, env, i)
    gen = torch.Generator().manual_seed(1)
    episodes = 0
    for _ in range(steps):
        action = torch.randint(2, (n,), generator=gen)
        next_obs, reward, terminated, truncated = env.step(action)
        assert next_obs.dtype == torch.float32 and reward.dtype == torch.float32
        for i, g in enumerate(envs):
            obs_i, reward_i, term_i, trunc_i, _ = g.step(int(action[i]))
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-6, atol=1e-7)
            assert (reward[i].item(), bool(terminated[i]), bool(truncated[i])) == (reward_i, term_i, trunc_i)
            if term_i or trunc_i:
                episodes += 1
                g.reset()
                set_gym_state(g, env, i)  # the torch env autoreset this copy
            else:  # no resync: the float64 states evolved independently and still agree
                np.testing.assert_allclose(env.state[i].numpy(), g.unwrapped.state, rtol=1e-12, atol=1e-12)
    assert episodes >= 300  # random actions end episodes every ~20 steps


def test_float32_step_matches_gymnasium_from_the_same_state():
    n, steps = 8, 300
    env = CartPole(n)  # float32 state
    env.reset(seed=2)
    envs = gym_envs(n)
    gen = torch.Generator().manual_seed(3)
    terminations = 0
    for _ in range(steps):
        for i, g in enumerate(envs):
            set_gym_state(g, env, i)
        action = torch.randint(2, (n,), generator=gen)
        next_obs, reward, terminated, _ = env.step(action)
        for i, g in enumerate(envs):
            obs_i, reward_i, term_i, _, _ = g.step(int(action[i]))
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-5, atol=1e-6)
            assert reward[i].item() == reward_i and bool(terminated[i]) == term_i
            terminations += term_i
            if term_i:
                g.reset()
    assert terminations >= 50


def test_truncation_at_500_steps_like_the_time_limit():
    n = 4
    env = CartPole(n, dtype=torch.float64)
    env.reset(seed=4)
    envs = gym_envs(n)
    for i, g in enumerate(envs):
        set_gym_state(g, env, i)
    gains = torch.tensor([0.1, 0.5, 10.0, 2.0])  # a linear controller that keeps the pole up
    for t in range(510):
        action = ((env.observation * gains).sum(1) > 0).long()
        next_obs, reward, terminated, truncated = env.step(action)
        for i, g in enumerate(envs):
            obs_i, _, term_i, trunc_i, _ = g.step(int(action[i]))
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-6, atol=1e-7)
            assert (bool(terminated[i]), bool(truncated[i])) == (term_i, trunc_i)
        assert not terminated.any()
        assert truncated.all() == (t == 499) and truncated.any() == (t == 499)
        assert env.elapsed_steps.tolist() == [(t + 1) % 500] * n
        if t == 499:  # final observation returned, reset observation to act on
            assert not torch.equal(next_obs, env.observation)
            assert (env.observation.abs() <= 0.05).all()
            for i, g in enumerate(envs):
                g.reset()
                set_gym_state(g, env, i)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_termination_thresholds_match_gymnasium(dtype):
    # copies placed near each termination boundary, pushed either way
    starts = [
        (2.39, 1.0, 0.0, 0.0), (2.39, -1.0, 0.0, 0.0), (-2.39, -1.0, 0.0, 0.0), (-2.39, 1.0, 0.0, 0.0),
        (0.0, 0.0, 0.2, 0.5), (0.0, 0.0, 0.2, -0.5), (0.0, 0.0, -0.2, -0.5), (0.0, 0.0, -0.2, 0.5),
        (2.5, 0.0, 0.0, 0.0), (0.0, 0.0, 0.3, 0.0),  # already outside: terminate on the next step
    ]
    n = len(starts)
    env = CartPole(n, dtype=dtype)
    env.reset(seed=0)
    state = env.state_dict()
    state["state"] = torch.tensor(starts, dtype=dtype)
    env.load_state_dict(state)
    for action_value in (0, 1):
        env.load_state_dict(state)
        action = torch.full((n,), action_value)
        next_obs, reward, terminated, truncated = env.step(action)
        expected = []
        for start in starts:
            g = gym.make("CartPole-v1").unwrapped
            g.reset(seed=0)
            g.state = np.array(start, dtype=np.float64)
            obs_i, reward_i, term_i, _, _ = g.step(action_value)
            np.testing.assert_allclose(next_obs[len(expected)].numpy(), obs_i, rtol=1e-5, atol=1e-6)
            expected.append(term_i)
        assert terminated.tolist() == expected
        assert sum(expected) >= 6 and not all(expected)
        assert (reward == 1.0).all() and not truncated.any()


def test_reset_states_and_specs_match_gymnasium():
    env = CartPole(4096, dtype=torch.float64)
    obs = env.reset(seed=0)
    assert obs.shape == (4096, 4) and obs.dtype == torch.float32
    assert (env.state >= -0.05).all() and (env.state < 0.05).all()
    assert env.state.mean().abs() < 2e-3 and env.state.std() > 0.027  # U(-0.05, 0.05): std 0.0289
    assert torch.equal(obs, env.state.float())
    space = gym.make("CartPole-v1").observation_space
    np.testing.assert_array_equal(env.observation_spec.high.numpy(), space.high)
    np.testing.assert_array_equal(env.observation_spec.low.numpy(), space.low)
    assert env.action_spec.n == 2 and env.action_spec.dtype == torch.int64
    assert env.max_episode_steps == gym.spec("CartPole-v1").max_episode_steps == 500


def test_invalid_action_values_raise():
    env = CartPole(2)
    env.reset(seed=0)
    with pytest.raises(IndexError):
        env.step(torch.tensor([0, 2]))
