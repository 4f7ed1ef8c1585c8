"""GAEAdvantage(reuse_values=True): the collected V(s) and the next step's V for V(s'), the value
function only on episode ends and each row's last step; the same advantages as recomputing."""

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from engine_rl.algos import make_actor_critic
from engine_rl.collectors import GymCollector, TorchEnvCollector, make_vec_env
from engine_rl.envs import make_torch_env
from handlers.advantage import GAEAdvantage


def collectors():
    yield "numpy CartPole", lambda policy: GymCollector(make_vec_env("CartPole-v1", 4), policy, frames_per_batch=400, seed=0)
    yield "sync Acrobot, truncated at 30", lambda policy: GymCollector(
        make_vec_env("Acrobot-v1", 2, max_episode_steps=30), policy, frames_per_batch=200, seed=0)
    yield "torch CartPole", lambda policy: TorchEnvCollector(make_torch_env("CartPole-v1", 4), policy,
                                                             frames_per_batch=400, seed=0)


@pytest.mark.parametrize("name, make", list(collectors()), ids=lambda x: x if isinstance(x, str) else "")
def test_reused_values_give_the_recomputed_advantages(name, make):
    env_id = "Acrobot-v1" if "Acrobot" in name else "CartPole-v1"
    spaces = gym.make(env_id)
    policy = make_actor_critic(spaces.observation_space, spaces.action_space, write_value=True, seed=0)
    calls = []

    def value_fn(obs):
        calls.append(obs.shape[0])
        return policy.value(obs)

    batches = iter(make(policy))
    for _ in range(3):
        batch = next(batches)
        reused = GAEAdvantage(value_fn, gamma=0.99, lmbda=0.95, reuse_values=True).compute(batch.clone())
        recomputed = GAEAdvantage(policy.value, gamma=0.99, lmbda=0.95).compute(batch.clone())
        torch.testing.assert_close(reused["advantage"], recomputed["advantage"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(reused["value_target"], recomputed["value_target"], rtol=1e-5, atol=1e-5)
        n, t = batch.batch_size
        assert calls[-1] == int(batch["next", "done"][:, :-1].sum()) + n  # episode ends and last steps only
        assert calls[-1] < n * t // 4


def test_reuse_values_needs_the_collected_values():
    batch = TensorDict({"observation": torch.zeros(1, 2, 3), ("next", "observation"): torch.zeros(1, 2, 3),
                        ("next", "reward"): torch.ones(1, 2), ("next", "terminated"): torch.zeros(1, 2, dtype=torch.bool),
                        ("next", "done"): torch.zeros(1, 2, dtype=torch.bool)}, [1, 2])
    with pytest.raises(KeyError, match=r"GAEAdvantage \(reuse_values=True: the policy must write it\) needs key\(s\) \['state_value'\]"):
        GAEAdvantage(lambda obs: obs.sum(-1), gamma=0.9, lmbda=0.9, reuse_values=True).compute(batch)
