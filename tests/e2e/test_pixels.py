"""Image observations: uint8 pixels stay uint8 from the env through batches and replay, and DQN
(a Nature CNN Q network) and PPO (a Nature CNN trunk shared by actor and critic) learn from them.

The env: a 36x36 grey frame with a white bar on its left or right half (a coin flip per step);
acting on the bar's side pays 1, the other side 0; 10 steps per episode. A policy that ignores
the pixels earns 5 on average; one that reads them earns 10. Seed 0, the suite's seed offset added
(support.seeds); DQN and PPO earned 10 on seeds 0-4 (--seed-offset 0-4).
"""

import json

import gymnasium as gym
import numpy as np
import torch

from engine_rl.cli import main
from engine_rl.collectors import GymCollector, make_vec_env
from engine_rl.replay import ReplayBuffer
from support.seeds import seed, seed_arg

SIZE = 36


class BarSide(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw(), {}

    def _draw(self):
        self.side = int(self.np_random.integers(2))
        frame = np.full((1, SIZE, SIZE), 40, np.uint8)
        frame[0, 8:28, (4 if self.side == 0 else SIZE - 10):][:, :6] = 255
        return frame

    def step(self, action):
        reward = float(action == self.side)
        return self._draw(), reward, False, False, {}


gym.register("engine_rl_tests/BarSide-v0", entry_point=BarSide, max_episode_steps=10)


def test_pixels_stay_uint8_in_batches_and_replay():
    env = make_vec_env("engine_rl_tests/BarSide-v0", 4)
    collector = GymCollector(env, lambda td: td.set("action", torch.zeros(4, dtype=torch.int64)),
                             frames_per_batch=64, seed=seed(0))
    batch = next(iter(collector))
    assert batch["observation"].dtype == torch.uint8 and batch["next", "observation"].dtype == torch.uint8
    assert batch["observation"].shape == (4, 16, 1, SIZE, SIZE)
    buffer = ReplayBuffer(1000, seed=seed(0))
    buffer.extend(batch.reshape(-1))
    assert buffer.sample(8)["observation"].dtype == torch.uint8
    # both observation columns: 1000 rows of 36 * 36 bytes each, not 4 bytes per pixel
    pixels = {k: t for k, t in buffer.storage.data.items() if k[-1] == "observation"}
    assert set(pixels) == {("observation",), ("next", "observation")}
    assert all(t.dtype == torch.uint8 and t.numel() * t.element_size() == 1000 * SIZE * SIZE for t in pixels.values())


def test_dqn_learns_to_read_the_pixels(tmp_path, capsys):
    args = ["--set", "env_id=engine_rl_tests/BarSide-v0", "--set", "num_envs=4", "--set", "frames_per_batch=64",
            "--set", "learning_starts=256", "--set", "optim_steps_per_batch=16", "--set", "buffer_size=4096",
            "--set", "hidden=()", "--set", "eps_frames=1024", "--set", "target_update_every=64",
            "--set", "eval_episodes=10", "--set", "lr=1e-3", "--frames", "3072", "--seed", seed_arg(0),
            "--out", str(tmp_path), "--no-progress"]
    assert main(["train", "dqn-cartpole", *args]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["eval_return_mean"] >= 9.0, summary  # ignoring the pixels earns about 5


def test_ppo_learns_to_read_the_pixels_through_a_shared_cnn(tmp_path, capsys):
    args = ["--set", "env_id=engine_rl_tests/BarSide-v0", "--set", "num_envs=4", "--set", "steps_per_env=64",
            "--set", "batch_size=64", "--set", "num_epochs=4", "--set", "hidden=()", "--set", "lr=1e-3",
            "--set", "lr_end=1e-3", "--set", "eval_every=100", "--frames", "4096", "--seed", seed_arg(0),
            "--out", str(tmp_path), "--no-progress"]
    assert main(["train", "ppo-cartpole", *args]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["eval_return_mean"] >= 9.0, summary  # ignoring the pixels earns about 5
    state = torch.load(tmp_path / "inference.pt", weights_only=True)
    assert any(k.startswith("encoder.convs.0.") for k in state["policy"])  # one trunk, shared by both heads
