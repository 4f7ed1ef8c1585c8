"""Custom envs with Dict observations train through the Python API: each key through its own
encoder (the recipe; the parts composed by hand, with the user's encoder for one key), or all
flattened by a config wrapper. Seed 0, the suite's seed offset added (support.seeds).

GoalOnALine: a point on a line and a goal at -3 or +3, two Box entries; actions move left or
right; reward 1 on reaching the goal (the episode ends), else 0; 20 steps at most. A policy that
ignores the goal reaches it at most half the time; PPO learns to walk straight to it (3 steps).
Every bar here held on seeds 0-4 (--seed-offset 0-4).
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from engine_rl import create_trainer
from engine_rl.algos import PPOLoss, make_actor_critic
from engine_rl.collectors import GymCollector, make_vec_env, run_episodes
from engine_rl.run.driver import make_config, train
from handlers import GAEAdvantage, MinibatchSampler
from support.seeds import seed

DOOR_ROOM = "support.user_envs:engine_rl_tests/DoorRoom-v0"


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
        "eval_every": 100, "eval_episodes": 10, "seed": seed(0), "entropy_coef": 0.01,
    })
    summary = train("ppo-cartpole", config, tmp_path)
    # every evaluation episode reaches the goal, in the 3 steps the shortest walk takes
    assert summary["eval_return_mean"] == 1.0 and summary["eval_length_mean"] == 3.0


class SmallCamera(nn.Module):
    """The user's own encoder for DoorRoom's 40x40 camera: bytes scaled to [0, 1], one linear layer."""

    features = 16

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(40 * 40, self.features), nn.Tanh())

    def forward(self, camera):
        return self.net(camera.float().flatten(-2) / 255.0)


def test_the_ppo_recipe_encodes_each_dict_key_without_a_wrapper(tmp_path):
    config = make_config("ppo-cartpole", {
        "env_id": "engine_rl_tests/GoalOnALine-v0", "total_frames": 8192, "eval_every": 100, "eval_episodes": 10,
        "seed": seed(0), "entropy_coef": 0.01,
    })
    summary = train("ppo-cartpole", config, tmp_path)
    assert summary["eval_return_mean"] == 1.0 and summary["eval_length_mean"] == 3.0


def test_ppo_composed_by_hand_learns_a_dict_env_with_an_encoder_of_the_users_for_one_key():
    """DoorRoom (support.user_envs): knock on the open door, shown by the camera and the door key;
    5 steps, so 5 is the best return and random knocking gets 5/3."""
    torch.manual_seed(seed(0))
    env = make_vec_env(DOOR_ROOM, 8)
    policy = make_actor_critic(env.single_observation_space, env.single_action_space, seed=seed(0),
                               encoders={"camera": SmallCamera()})
    collector = GymCollector(env, policy, frames_per_batch=256, seed=seed(0))
    loss = PPOLoss(policy, entropy_coef=0.01)
    trainer = create_trainer(collector, loss, torch.optim.Adam(policy.parameters(), lr=1e-3),
                             total_frames=4096, num_epochs=4, optim_steps_per_batch=4)
    GAEAdvantage(policy.value, gamma=0.99, lmbda=0.95).attach(trainer)
    MinibatchSampler(64, keys=loss.in_keys, seed=seed(0)).attach(trainer)
    trainer.run()
    batch = trainer.state.batch
    assert batch["observation", "camera"].dtype == torch.uint8 and batch["observation", "door"].dtype == torch.int64
    result = run_episodes(make_vec_env(DOOR_ROOM, 10), policy.greedy(), 20, seed=seed(100))
    assert result["return"].mean().item() >= 4.5  # random: 5/3


@pytest.mark.parametrize("recipe", ["sac-pendulum", "td3-pendulum"])
def test_sac_and_td3_learn_a_goal_conditioned_dict_env_with_an_encoder_per_key(recipe, tmp_path):
    """DictReach (``support.user_envs``): move to a goal in [-2, 2] from 0, at most 1 per step;
    reward ``-|goal - position|`` per step, 8 steps. Random actions score -10.7 (50 episodes);
    walking straight to the goal scores -0.25 on average. 3,000 frames; margin checked over seeds 0-4
    (--seed-offset 0-4): lowest SAC -0.33, TD3 -0.18."""
    cfg = make_config(recipe, env_id="support.user_envs:engine_rl_tests/DictReach-v0", total_frames=3000,
                      learning_starts=500, eval_every_frames=3000, hidden=(64, 64), seed=seed(0))
    summary = train(recipe, cfg, tmp_path, progress=False)
    assert summary["eval_return_mean"] > -1.0, summary
    replay = torch.load(tmp_path / "checkpoints" / "checkpoint_3000.pt", weights_only=True)["replay"]
    assert set(replay["storage"]["data"]["observation"]) == {"position", "goal"}
