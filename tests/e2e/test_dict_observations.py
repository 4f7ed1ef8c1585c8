"""A custom env with Dict observations trains through the Python API, flattened by a config wrapper.

Seed 0. The env: a point on a line and a goal, as two Box entries of a Dict; actions move left or
right; reward 1 on reaching the goal (the episode ends), else 0; 20 steps at most. PPO learns
to walk straight to it.
"""

import gymnasium as gym
import numpy as np

from engine_rl.recipes.runner import make_config, train


class GoalOnALine(gym.Env):
    observation_space = gym.spaces.Dict({"position": gym.spaces.Box(-5, 5, (1,), np.float32),
                                         "goal": gym.spaces.Box(-5, 5, (1,), np.float32)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.goal = 0.0, float(self.np_random.choice([-3.0, 3.0]))
        return self._obs(), {}

    def _obs(self):
        return {"position": np.array([self.position], np.float32), "goal": np.array([self.goal], np.float32)}

    def step(self, action):
        self.position = float(np.clip(self.position + (1.0 if action == 1 else -1.0), -5, 5))
        reached = self.position == self.goal
        return self._obs(), float(reached), reached, False, {}


gym.register("engine_rl_tests/GoalOnALine-v0", entry_point=GoalOnALine, max_episode_steps=20)


def test_ppo_learns_a_dict_observation_env_with_a_flatten_wrapper(tmp_path):
    config = make_config("ppo-cartpole", {
        "env_id": "engine_rl_tests/GoalOnALine-v0", "wrappers": ("FlattenObservation",), "total_frames": 8192,
        "eval_every": 100, "eval_episodes": 10, "seed": 0, "entropy_coef": 0.01,
    })
    summary = train("ppo-cartpole", config, tmp_path)
    # every evaluation episode reaches the goal, in the 3 steps the shortest walk takes
    assert summary["eval_return_mean"] == 1.0 and summary["eval_length_mean"] == 3.0
