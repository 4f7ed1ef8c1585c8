"""A user's own env, registered when its module is imported: ``--set env_id=support.user_envs:engine_rl_tests/Corridor-v0``."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a 1-D corridor of 5 cells: reward 1 at the end (which ends the episode)."""

    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return np.array([self.cell], np.float32), {}

    def step(self, action):
        self.cell = min(4, max(0, self.cell + (1 if action == 1 else -1)))
        return np.array([self.cell], np.float32), float(self.cell == 4), self.cell == 4, False, {}


gym.register("engine_rl_tests/Corridor-v0", entry_point=Corridor, max_episode_steps=20)
