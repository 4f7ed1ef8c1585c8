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


class DoorRoom(gym.Env):
    """Dict observations of three kinds: ``camera`` (a ``size`` x ``size`` uint8 image lit where
    the open door is), ``door`` (which of 3 doors is open, Discrete) and ``clock`` (steps taken, a
    Box). Each step knocks on a door: reward 1 at the open one; then another door opens (drawn
    from the env's generator). Episodes are truncated after 5 steps."""

    action_space = gym.spaces.Discrete(3)

    def __init__(self, size: int = 40):
        self.size = size
        self.observation_space = gym.spaces.Dict({
            "camera": gym.spaces.Box(0, 255, (size, size), np.uint8),
            "door": gym.spaces.Discrete(3),
            "clock": gym.spaces.Box(0.0, 5.0, (1,), np.float32),
        })

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.door = 0, int(self.np_random.integers(3))
        return self._obs(), {}

    def _obs(self):
        camera = np.zeros((self.size, self.size), np.uint8)
        third = self.size // 3
        camera[:, third * self.door: third * (self.door + 1)] = 255
        return {"camera": camera, "door": np.int64(self.door), "clock": np.array([self.t], np.float32)}

    def step(self, action):
        reward = float(action == self.door)
        self.t, self.door = self.t + 1, int(self.np_random.integers(3))
        return self._obs(), reward, False, self.t >= 5, {}


class NoteRoom(DoorRoom):
    """DoorRoom with a ``note`` (a Text space) in its observations, which no network encodes."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, "note": gym.spaces.Text(8)})

    def _obs(self):
        return {**super()._obs(), "note": "knock"}


class DictReach(gym.Env):
    """Continuous control with Dict observations, as goal-conditioned tasks have them: ``position``
    and ``goal`` (each a Box of 1), an action moving the position by up to 1; reward
    ``-|goal - position|`` after each move; 8 steps. The goal is drawn in [-2, 2], the start is 0."""

    observation_space = gym.spaces.Dict({"position": gym.spaces.Box(-10.0, 10.0, (1,), np.float32),
                                         "goal": gym.spaces.Box(-2.0, 2.0, (1,), np.float32)})
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.goal, self.t = 0.0, float(self.np_random.uniform(-2.0, 2.0)), 0
        return self._obs(), {}

    def _obs(self):
        return {"position": np.array([self.position], np.float32), "goal": np.array([self.goal], np.float32)}

    def step(self, action):
        self.position = float(np.clip(self.position + float(np.clip(action[0], -1.0, 1.0)), -10.0, 10.0))
        self.t += 1
        return self._obs(), -abs(self.goal - self.position), False, self.t >= 8, {}


gym.register("engine_rl_tests/DictReach-v0", entry_point=DictReach)
gym.register("engine_rl_tests/DoorRoom-v0", entry_point=DoorRoom)
gym.register("engine_rl_tests/TinyDoorRoom-v0", entry_point=DoorRoom, kwargs={"size": 9})
gym.register("engine_rl_tests/NoteRoom-v0", entry_point=NoteRoom)


def make_corridor(max_episode_steps: int = 20) -> gym.Env:
    """A user's env maker, registered nowhere: ``--set make_env=support.user_envs:make_corridor``."""
    return gym.wrappers.TimeLimit(Corridor(), max_episode_steps=max_episode_steps)
