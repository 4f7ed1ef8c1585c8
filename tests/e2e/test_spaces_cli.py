"""Each observation and action space a user brings trains a few batches through the CLI.

Vector Box, uint8 image Box, Discrete and Dict observations (each Dict key through its own
encoder, or all flattened by ``--set wrappers=FlattenObservation``); Discrete and Box actions; and
the one-line refusals for spaces an algorithm does not take. Seed 0, the suite's seed offset added
(support.seeds); each run a few batches, not a learning claim.
"""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl.cli import main
from support.seeds import seed_arg

pytest.importorskip("ale_py")


class DictPoint(gym.Env):
    """Dict observations (a position and a goal, two Box entries); two discrete actions; 10 steps."""

    observation_space = gym.spaces.Dict({"position": gym.spaces.Box(-5, 5, (1,), np.float32),
                                         "goal": gym.spaces.Box(-5, 5, (1,), np.float32)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0.0
        return self._obs(), {}

    def _obs(self):
        return {"position": np.array([self.position], np.float32), "goal": np.array([2.0], np.float32)}

    def step(self, action):
        self.position += 1.0 if action == 1 else -1.0
        return self._obs(), float(self.position == 2.0), self.position == 2.0, False, {}


gym.register("engine_rl_tests/DictPoint-v0", entry_point=DictPoint, max_episode_steps=10)
ROOMS = "support.user_envs:engine_rl_tests/"  # DoorRoom: a Dict of a camera, a door and a clock

CASES = {
    # observations, actions: recipe and flags
    "vector Box, Discrete": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256"],
    "vector Box, Box": ["sac-pendulum", "--frames", "300", "--set", "learning_starts=200", "--set", "hidden=(32,32)",
                        "--set", "frames_per_batch=100"],
    "uint8 image Box, Discrete": ["ppo-atari", "--frames", "256", "--set", "num_envs=2", "--set", "batch_size=128"],
    "uint8 image Box, Discrete (ALE/*-v5 id)": ["ppo-atari", "--frames", "256", "--set", "num_envs=2",
                                                "--set", "batch_size=128", "--set", "env_id=ALE/Breakout-v5"],
    "uint8 RAM vector, Discrete (env_kwargs)": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256",
                                                "--set", "env_id=ALE/Breakout-v5", "--set", "env_kwargs={'obs_type': 'ram'}"],
    "Discrete, Discrete": ["ppo-cartpole", "--frames", "512", "--set", "env_id=FrozenLake-v1"],
    "Dict, Discrete": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256",
                       "--set", "env_id=engine_rl_tests/DictPoint-v0"],
    "Dict flattened, Discrete": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256",
                                 "--set", "env_id=engine_rl_tests/DictPoint-v0", "--set", "wrappers=FlattenObservation"],
    "Dict, Box (TD3)": ["td3-pendulum", "--frames", "300", "--set", "learning_starts=200", "--set", "hidden=(32,32)",
                        "--set", "frames_per_batch=100", "--set", f"env_id={ROOMS}DictReach-v0"],
    "Dict of image, Discrete and Box, Discrete (PPO)": ["ppo-cartpole", "--frames", "512", "--set", f"env_id={ROOMS}DoorRoom-v0"],
    "Dict, Discrete (async collection)": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256",
                                          "--set", f"env_id={ROOMS}DoorRoom-v0", "--set", "async_collection=true",
                                          "--set", "optim_steps_per_batch=2"],
    "Dict without a key, Discrete": ["dqn-cartpole", "--frames", "512", "--set", "learning_starts=256",
                                     "--set", f"env_id={ROOMS}NoteRoom-v0",
                                     "--set", "wrappers=FilterObservation(filter_keys=['door', 'clock'])"],
    "vector Box, Box (PPO)": ["ppo-mujoco", "--frames", "2048", "--set", "env_id=Pendulum-v1"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_space_trains_a_few_batches_through_the_cli(case, tmp_path, capsys):
    recipe, *args = CASES[case]
    code = main(["train", recipe, *args, "--seed", seed_arg(0), "--out", str(tmp_path), "--no-progress",
                 "--set", "eval_episodes=2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["frames"] == int(args[1]) and summary["optim_steps"] > 0
    assert np.isfinite(summary["eval_return_mean"])
    checkpoint = torch.load(summary["checkpoint"], weights_only=True)
    assert checkpoint["trainer"]["frames"] == int(args[1])
    if "RAM" in case:  # bytes stay bytes in replay: a quarter of float32's memory
        stored = checkpoint["replay"]["storage"]["data"]["observation"]
        assert stored.dtype == torch.uint8 and stored.shape[1:] == (128,)


@pytest.mark.parametrize("args, message", [
    (["train", "dqn-cartpole", "--set", "env_id=Pendulum-v1"],
     "DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions (set env_id to an env with Discrete actions)"),
    (["train", "sac-pendulum", "--set", "env_id=CartPole-v1"],
     "SACConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions"),
    (["train", "ppo-mujoco", "--set", "env_id=engine_rl_tests/DictPoint-v0"],
     "PPOMujocoConfig: ppo (engine_rl_tests/DictPoint-v0): the observation space must be a 1-D Box with "
     "normalize_observations (set it false for other spaces), got Dict("),
    (["train", "ppo-mujoco", "--set", "env_id=ALE/Breakout-v5", "--set", "env_kwargs={'obs_type': 'ram'}"],
     "PPOMujocoConfig: ppo (ALE/Breakout-v5): the observation space must be a 1-D Box with normalize_observations "
     "(set it false for other spaces); a uint8 one (bytes, such as Atari RAM) goes through an encoder instead, "
     "got Box(0, 255, (128,), uint8)"),
    (["train", "ppo-cartpole", "--set", f"env_id={ROOMS}TinyDoorRoom-v0"],
     f"PPOConfig: ppo ({ROOMS}TinyDoorRoom-v0): no encoder for observation key 'camera' (Box(0, 255, (9, 9), uint8)): "
     "uint8 images go through the Nature CNN, which needs at least 36x36 pixels"),
    (["train", "dqn-cartpole", "--set", f"env_id={ROOMS}NoteRoom-v0"],
     f"DQNConfig: dqn ({ROOMS}NoteRoom-v0): observation key 'note' is Text(1, 8, charset="),
    (["train", "ppo-cartpole", "--set", "env_id=NoSuchEnv-v0"],
     "PPOConfig: env_id 'NoSuchEnv-v0' is not a registered gymnasium env"),
    (["train", "ppo-atari", "--set", "wrappers=AtariPreprocesing"],
     "PPOAtariConfig: wrappers entry 'AtariPreprocesing' is not a single-env wrapper of gymnasium.wrappers; "
     "close matches: AtariPreprocessing"),
])
def test_a_space_or_name_the_recipe_cannot_take_is_one_line(args, message, tmp_path, capsys):
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not any(tmp_path.iterdir())  # refused (the env checked) before anything is written to --out


def test_a_users_env_module_registers_its_env_on_the_command_line(tmp_path, capsys):
    code = main(["train", "ppo-cartpole", "--set", "env_id=support.user_envs:engine_rl_tests/Corridor-v0",
                 "--frames", "1024", "--seed", seed_arg(0), "--out", str(tmp_path), "--no-progress", "--set", "eval_episodes=2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["frames"] == 1024
    assert main(["train", "ppo-cartpole", "--set", "env_id=no_such_module:Corridor-v0", "--out", str(tmp_path / "x")]) == 2
    assert "env_id 'no_such_module:Corridor-v0': cannot import 'no_such_module' to register it" in capsys.readouterr().err
