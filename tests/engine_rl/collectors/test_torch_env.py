import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl import RLEvents, create_trainer
from engine_rl.collectors import GymCollector, TorchEnvCollector, make_vec_env
from engine_rl.envs import CartPole, Pendulum


class Left(nn.Module):
    def forward(self, td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


class RandomDiscrete(nn.Module):
    """Seeded random actions, plus extras: a log-prob and a nested entry."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def forward(self, td):
        td.set("action", torch.randint(2, td.batch_size, generator=self.gen))
        td.set("log_prob", torch.full(td.batch_size, -0.5))
        td.set(("aux", "obs_sum"), td.get("observation").sum(-1, keepdim=True))
        return td


class Greedy(nn.Module):
    """Deterministic: argmax of a linear layer."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Linear(4, 2)

    def forward(self, td):
        return td.set("action", self.net(td.get("observation")).argmax(-1))


def rollout(collector, batches):
    it = iter(collector)
    return torch.cat([next(it) for _ in range(batches)], dim=1)


def leaf_dtypes(td):
    return {(k if isinstance(k, str) else ".".join(k)): v.dtype for k, v in td.items(True, True)}


def test_keys_shapes_dtypes_match_gym_collector():
    with TorchEnvCollector(CartPole(4), RandomDiscrete(), frames_per_batch=32, seed=0) as collector:
        batch = next(iter(collector))
        assert collector.frames == 32 and collector.num_envs == 4 and collector.steps_per_batch == 8
    gym_batch = next(iter(GymCollector(make_vec_env("CartPole-v1", 4), RandomDiscrete(), frames_per_batch=32, seed=0)))
    assert leaf_dtypes(batch) == leaf_dtypes(gym_batch)
    assert set(leaf_dtypes(batch)) == {
        "observation", "action", "log_prob", "aux.obs_sum", "next.observation", "next.reward",
        "next.done", "next.terminated", "next.truncated", "next.episode_return", "next.episode_length",
    }
    assert batch.batch_size == gym_batch.batch_size == (4, 8)
    for key, value in batch.items(True, True):
        assert value.shape == gym_batch[key].shape, key
    assert torch.allclose(batch["aux", "obs_sum"].squeeze(-1), batch["observation"].sum(-1))


def test_pendulum_box_actions_stored_as_float32():
    def policy(td):  # writes in place, returns None, float64 action
        td.set("action", torch.full((*td.batch_size, 1), 0.5, dtype=torch.float64))

    batch = rollout(TorchEnvCollector(Pendulum(2, max_episode_steps=6), policy, frames_per_batch=10, seed=1), 2)
    assert batch["action"].dtype == torch.float32 and batch["action"].shape == (2, 10, 1)
    assert (batch["action"] == 0.5).all() and batch["observation"].shape == (2, 10, 3)
    assert batch["next", "truncated"][:, 5].all() and batch["next", "truncated"].sum() == 2
    assert not batch["next", "terminated"].any()


def test_no_fake_transitions_and_true_final_observations():
    env = CartPole(3, max_episode_steps=9, dtype=torch.float64)
    batch = rollout(TorchEnvCollector(env, RandomDiscrete(seed=3), frames_per_batch=30, seed=0), 4)
    obs, next_obs, done = batch["observation"], batch["next", "observation"], batch["next", "done"]
    assert done.sum() >= 6 and batch["next", "truncated"].any() and batch["next", "terminated"].any()
    follows = (obs[:, 1:] == next_obs[:, :-1]).all(-1)
    assert follows[~done[:, :-1]].all()  # within an episode frames chain (also across batches)
    assert not follows[done[:, :-1]].any()  # after a done the next frame starts a new episode
    assert (obs[:, 1:][done[:, :-1]].abs() <= 0.05).all()  # ... from a reset state
    assert (batch["next", "episode_length"][:, 1:][done[:, :-1]] == 1).all()
    # every stored next observation, at a done too, is the physics successor (gymnasium's)
    sim = gym.make("CartPole-v1").unwrapped
    sim.reset(seed=0)
    for i, t in zip(*torch.nonzero(done, as_tuple=True)):
        sim.state = obs[i, t].double().numpy()
        expected, _, terminated, _, _ = sim.step(int(batch["action"][i, t]))
        np.testing.assert_allclose(next_obs[i, t].numpy(), expected, atol=1e-6)
        assert terminated == bool(batch["next", "terminated"][i, t])


def test_truncation_stores_the_final_observation():
    batch = next(iter(TorchEnvCollector(CartPole(2, max_episode_steps=4), Left(), frames_per_batch=18, seed=5)))
    trunc = batch["next", "truncated"]
    assert trunc[:, 3].all() and trunc[:, 7].all() and trunc.sum() == 4
    assert torch.equal(batch["next", "done"], trunc | batch["next", "terminated"])
    assert not torch.allclose(batch["next", "observation"][:, 3], batch["observation"][:, 4])


def test_episode_return_and_length_match_manual_count():
    def damping(td):  # torque against the angular velocity
        return td.set("action", td["observation"][:, 2:] * -1.0)

    batch = rollout(TorchEnvCollector(Pendulum(3, max_episode_steps=12), damping, frames_per_batch=24, seed=2), 5)
    reward, done = batch["next", "reward"].double(), batch["next", "done"]
    ep_return, ep_length = batch["next", "episode_return"], batch["next", "episode_length"]
    finished = 0
    for i in range(3):
        total, count = 0.0, 0
        for t in range(reward.shape[1]):
            total, count = total + reward[i, t].item(), count + 1
            assert ep_return[i, t].item() == pytest.approx(total, rel=1e-6) and ep_length[i, t] == count
            if done[i, t]:
                total, count, finished = 0.0, 0, finished + 1
    assert finished == 3 * (40 // 12)


def test_seeding_determinism_and_set_seed():
    def batches(seed, n=2):
        return rollout(TorchEnvCollector(CartPole(4), RandomDiscrete(seed=1), frames_per_batch=40, seed=seed), n)

    a, b, c = batches(3), batches(3), batches(4)
    assert (a == b).all() and not torch.equal(a["observation"], c["observation"])
    collector = TorchEnvCollector(CartPole(4), Greedy(), frames_per_batch=40, seed=3)
    first = next(iter(collector))
    collector.set_seed(3)
    assert (next(iter(collector)) == first).all()  # reset with the same seed: the same batch


def test_state_dict_resumes_exactly_through_weights_only_load():
    policy = Greedy(seed=2)
    collector = TorchEnvCollector(CartPole(5, max_episode_steps=30), policy, frames_per_batch=50, seed=8)
    rollout(collector, 2)
    buffer = io.BytesIO()
    torch.save(collector.state_dict(), buffer)
    buffer.seek(0)
    expected = next(iter(collector))
    restored = TorchEnvCollector(CartPole(5, max_episode_steps=30), policy, frames_per_batch=50)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert (restored.frames, restored.batches) == (100, 2)
    assert (next(iter(restored)) == expected).all()  # same env states, streams and episode totals
    with pytest.raises(KeyError, match=r"TorchEnvCollector.load_state_dict: missing key\(s\) \['env'\]"):
        restored.load_state_dict({k: v for k, v in collector.state_dict().items() if k != "env"})


def test_sync_free_env_resets_give_the_same_batches():
    env, free = CartPole(6, max_episode_steps=10), CartPole(6, max_episode_steps=10)
    free.sync_free_reset = True
    a = rollout(TorchEnvCollector(env, Greedy(), frames_per_batch=60, seed=1), 2)
    b = rollout(TorchEnvCollector(free, Greedy(), frames_per_batch=60, seed=1), 2)
    assert (a == b).all()


def test_update_policy_weights():
    actor, learner = Greedy(seed=0), Greedy(seed=1)
    collector = TorchEnvCollector(CartPole(2), actor, frames_per_batch=4)
    collector.update_policy_weights_(TensorDict.from_module(learner))
    assert torch.equal(actor.net.weight, learner.net.weight)
    collector.update_policy_weights_(Greedy(seed=2).state_dict())
    assert torch.equal(actor.net.weight, Greedy(seed=2).net.weight)
    with pytest.raises(KeyError, match="the weights do not match the policy: missing"):
        collector.update_policy_weights_(TensorDict({"other": torch.zeros(1)}, []))


def test_errors():
    with pytest.raises(ValueError, match="frames_per_batch must be a positive multiple of num_envs=4, got 10"):
        TorchEnvCollector(CartPole(4), Left(), frames_per_batch=10)
    with pytest.raises(TypeError, match="env must be an engine_rl.envs.TorchEnv, got SyncVectorEnv"):
        TorchEnvCollector(make_vec_env("CartPole-v1", 2, mode="sync"), Left(), frames_per_batch=4)
    with pytest.raises(ValueError, match="the policy's parameters are on meta but the env steps on cpu"):
        TorchEnvCollector(CartPole(2), nn.Linear(4, 2, device="meta"), frames_per_batch=4)
    with pytest.raises(KeyError, match="the policy must write 'action'"):
        next(iter(TorchEnvCollector(CartPole(2), lambda td: td, frames_per_batch=4)))
    with pytest.raises(ValueError, match=r"'action' must have shape \(2,\).*got \(2, 1\)"):
        next(iter(TorchEnvCollector(CartPole(2), lambda td: td.set("action", torch.zeros(2, 1, dtype=torch.int64)),
                                    frames_per_batch=4)))
    with pytest.raises(ValueError, match="actions are discrete .* wrote torch.float32"):
        next(iter(TorchEnvCollector(CartPole(2), lambda td: td.set("action", torch.zeros(2)), frames_per_batch=4)))


def test_trains_through_create_trainer():
    env = CartPole(8, max_episode_steps=50)
    collector = TorchEnvCollector(env, RandomDiscrete(), frames_per_batch=64, seed=0)
    value = nn.Linear(4, 1)

    def loss(td):  # a trivial regression of the reward on the observation
        pred = value(td["observation"]).squeeze(-1)
        return TensorDict({"loss": (pred - td["next", "reward"]).square().mean()}, [])

    trainer = create_trainer(collector, loss, torch.optim.SGD(value.parameters(), lr=0.05), total_frames=640,
                             optim_steps_per_batch=2)
    seen = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.batch.batch_size))
    trainer.run()
    assert trainer.state.frames == 640 and trainer.state.optim_steps == 20 and collector.batches == 10
    assert seen == [torch.Size([8, 8])] * 10
    assert trainer.state.output["loss"] < 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_batches_stay_on_the_device():
    policy = Greedy().cuda()
    batch = next(iter(TorchEnvCollector(CartPole(256, device="cuda"), policy, frames_per_batch=256 * 16, seed=0)))
    assert batch.device.type == "cuda"
    assert all(v.device.type == "cuda" for v in batch.values(True, True))
    cpu_batch = next(iter(TorchEnvCollector(CartPole(256), policy.cpu(), frames_per_batch=256 * 16, seed=0)))
    torch.testing.assert_close(batch["observation"][:, 0].cpu(), cpu_batch["observation"][:, 0])
