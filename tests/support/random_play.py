"""The baseline the learning tests beat: the mean return of uniform random actions."""

import gymnasium as gym
import numpy as np


def random_return(env: gym.Env, episodes: int) -> float:
    """Mean return of ``episodes`` episodes (reset seeds 0, 1, ...) of uniformly random actions (seed 0)."""
    env.action_space.seed(0)
    returns = []
    for i in range(episodes):
        env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return float(np.mean(returns))
