"""Torch Pendulum vs gymnasium's Pendulum-v1, step by step with identical states and actions.

As for CartPole: after each reset the gymnasium env takes the torch env's state; in float64 the
trajectories then run independently and agree (bit for bit on this machine; 1e-12 relative
allowed); in float32 gymnasium is re-synchronised before each step. Rewards are compared after
rounding gymnasium's float64 reward to float32 (the torch env returns float32 rewards).
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.pendulum import angle_normalize as gym_angle_normalize

from engine_rl.envs import Pendulum
from engine_rl.envs.pendulum import angle_normalize


def gym_envs(n: int, **kwargs):
    envs = [gym.make("Pendulum-v1", **kwargs) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    return envs


def set_gym_state(gym_env, torch_env: Pendulum, i: int) -> None:
    gym_env.unwrapped.state = torch_env.state[i].double().numpy().copy()


def test_free_running_float64_matches_gymnasium_across_truncations():
    n, steps = 8, 450  # two truncations (200 steps) per copy
    env = Pendulum(n, dtype=torch.float64)
    env.reset(seed=0)
    envs = gym_envs(n)
    for i, g in enumerate(envs):
        set_gym_state(g, env, i)
    gen = torch.Generator().manual_seed(1)
    truncations = 0
    for t in range(steps):
        action = torch.rand((n, 1), generator=gen) * 6 - 3  # beyond the torque limit: clipped
        next_obs, reward, terminated, truncated = env.step(action)
        assert next_obs.dtype == torch.float32 and reward.dtype == torch.float32
        assert not terminated.any() and truncated.all() == ((t + 1) % 200 == 0)
        for i, g in enumerate(envs):
            obs_i, reward_i, term_i, trunc_i, _ = g.step(action[i].numpy())
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-6, atol=1e-7)
            assert reward[i].item() == pytest.approx(float(np.float32(reward_i)), rel=1e-6, abs=1e-7)
            assert (bool(terminated[i]), bool(truncated[i])) == (term_i, trunc_i)
            if trunc_i:
                truncations += 1
                g.reset()
                set_gym_state(g, env, i)
            else:
                np.testing.assert_allclose(env.state[i].numpy(), g.unwrapped.state, rtol=1e-12, atol=1e-12)
    assert truncations == 2 * n


def test_float32_step_matches_gymnasium_from_the_same_state():
    n, steps = 8, 250
    env = Pendulum(n)
    env.reset(seed=5)
    envs = gym_envs(n)
    gen = torch.Generator().manual_seed(6)
    for _ in range(steps):
        for i, g in enumerate(envs):
            set_gym_state(g, env, i)
        action = torch.rand((n, 1), generator=gen) * 6 - 3
        next_obs, reward, _, truncated = env.step(action)
        for i, g in enumerate(envs):
            obs_i, reward_i, _, trunc_i, _ = g.step(action[i].numpy())
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-5, atol=1e-5)
            assert reward[i].item() == pytest.approx(reward_i, rel=1e-5, abs=1e-5)
            assert bool(truncated[i]) == trunc_i
            if trunc_i:
                g.reset()


def test_speed_and_torque_clipping_and_gravity_match_gymnasium():
    starts = [(0.1, 7.9), (-0.1, -7.9), (3.0, 0.0), (-3.1, 5.0), (12.0, -2.0)]  # 12 rad: wraps
    actions = [2.5, -2.5, 1.0, -10.0, 0.3]
    n = len(starts)
    for g_value in (10.0, 9.81):
        env = Pendulum(n, dtype=torch.float64, g=g_value)
        env.reset(seed=0)
        state = env.state_dict()
        state["state"] = torch.tensor(starts, dtype=torch.float64)
        env.load_state_dict(state)
        next_obs, reward, _, _ = env.step(torch.tensor(actions, dtype=torch.float64)[:, None])
        for i, (start, a) in enumerate(zip(starts, actions)):
            g = gym.make("Pendulum-v1", g=g_value).unwrapped
            g.reset(seed=0)
            g.state = np.array(start, dtype=np.float64)
            obs_i, reward_i, _, _, _ = g.step(np.array([a], dtype=np.float32))
            np.testing.assert_allclose(next_obs[i].numpy(), obs_i, rtol=1e-6, atol=1e-7)
            assert reward[i].item() == pytest.approx(float(np.float32(reward_i)), rel=1e-6)
            np.testing.assert_allclose(env.state[i].numpy(), g.state, rtol=1e-12)
        assert env.state[:, 1].abs().max() == 8.0  # the speed clip engaged


def test_angle_normalize_matches_gymnasium():
    x = torch.linspace(-50.0, 50.0, 10_001, dtype=torch.float64)
    np.testing.assert_allclose(angle_normalize(x).numpy(), gym_angle_normalize(x.numpy()), rtol=0, atol=1e-12)


def test_reset_states_and_specs_match_gymnasium():
    env = Pendulum(4096, dtype=torch.float64)
    obs = env.reset(seed=1)
    th, thdot = env.state.unbind(1)
    assert (th >= -np.pi).all() and (th < np.pi).all() and (thdot >= -1).all() and (thdot < 1).all()
    assert th.std() > 1.7 and thdot.std() > 0.55  # U(-pi, pi): std 1.81; U(-1, 1): 0.577
    assert obs.shape == (4096, 3) and obs.dtype == torch.float32
    torch.testing.assert_close(obs, torch.stack((th.cos(), th.sin(), thdot), 1).float())
    gym_env = gym.make("Pendulum-v1")
    np.testing.assert_array_equal(env.observation_spec.high.numpy(), gym_env.observation_space.high)
    np.testing.assert_array_equal(env.action_spec.low.numpy(), gym_env.action_space.low)
    np.testing.assert_array_equal(env.action_spec.high.numpy(), gym_env.action_space.high)
    assert env.action_spec.shape == (1,) and not env.action_spec.discrete
    assert env.max_episode_steps == gym.spec("Pendulum-v1").max_episode_steps == 200
