import gymnasium as gym
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from tensordict import TensorDict
from torch import nn

from engine_rl.collectors import GymCollector, GymStepper, make_vec_env

MODES = ["vector_entry_point", "sync"]


class Left(nn.Module):
    """Always action 0 (CartPole episodes end within ~10 steps)."""

    def forward(self, td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


class RandomDiscrete(nn.Module):
    """Seeded random actions, plus extras: a log-prob and a nested entry."""

    def __init__(self, seed: int = 0, n: int = 2):
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)
        self.n = n

    def forward(self, td):
        action = torch.randint(self.n, td.batch_size, generator=self.gen)
        td.set("action", action)
        td.set("log_prob", torch.full(td.batch_size, -0.5))
        td.set(("aux", "obs_sum"), td.get("observation").sum(-1, keepdim=True))
        return td


class Greedy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def forward(self, td):
        return td.set("action", self.net(td.get("observation")).argmax(-1))


def rollout(collector, batches):
    it = iter(collector)
    return torch.cat([next(it) for _ in range(batches)], dim=1)


@pytest.mark.parametrize("mode", MODES)
def test_cartpole_keys_shapes_dtypes(mode):
    env = make_vec_env("CartPole-v1", 4, mode=mode)
    with GymCollector(env, RandomDiscrete(), frames_per_batch=32, seed=0) as collector:
        batch = next(iter(collector))
        assert collector.frames == 32 and collector.num_envs == 4 and collector.steps_per_batch == 8
    assert batch.batch_size == torch.Size([4, 8])
    keys = {k if isinstance(k, str) else ".".join(k) for k in batch.keys(True, True)}
    assert keys == {
        "observation", "action", "log_prob", "aux.obs_sum", "next.observation", "next.reward",
        "next.done", "next.terminated", "next.truncated", "next.episode_return", "next.episode_length",
    }
    assert batch["observation"].dtype == torch.float32 and batch["observation"].shape == (4, 8, 4)
    assert batch["next", "observation"].shape == (4, 8, 4)
    assert batch["action"].dtype == torch.int64 and batch["action"].shape == (4, 8)
    assert batch["aux", "obs_sum"].shape == (4, 8, 1)
    assert torch.allclose(batch["aux", "obs_sum"].squeeze(-1), batch["observation"].sum(-1))
    for key in ("reward", "episode_return"):
        assert batch["next", key].dtype == torch.float32 and batch["next", key].shape == (4, 8)
    for key in ("done", "terminated", "truncated"):
        assert batch["next", key].dtype == torch.bool and batch["next", key].shape == (4, 8)
    assert batch["next", "episode_length"].dtype == torch.int64


def test_pendulum_box_actions():
    def policy(td):  # writes in place, returns None
        td.set("action", torch.full((*td.batch_size, 1), 0.5, dtype=torch.float64))

    env = make_vec_env("Pendulum-v1", 2, max_episode_steps=6)
    batch = rollout(GymCollector(env, policy, frames_per_batch=10, seed=1), 2)
    assert batch["action"].dtype == torch.float32 and batch["action"].shape == (2, 10, 1)
    assert (batch["action"] == 0.5).all()
    assert batch["observation"].shape == (2, 10, 3)
    assert batch["next", "truncated"][:, 5].all() and not batch["next", "terminated"].any()


@pytest.mark.parametrize("mode", MODES)
def test_no_fake_transitions_across_resets(mode):
    env = make_vec_env("CartPole-v1", 3, mode=mode, max_episode_steps=9)
    batch = rollout(GymCollector(env, RandomDiscrete(seed=3), frames_per_batch=30, seed=0), 4)
    obs, next_obs, done = batch["observation"], batch["next", "observation"], batch["next", "done"]
    assert done.sum() >= 6  # several episodes end inside the window
    follows = (obs[:, 1:] == next_obs[:, :-1]).all(-1)
    assert follows[~done[:, :-1]].all()  # within an episode, frames chain (also across batches)
    assert not follows[done[:, :-1]].any()  # after a done, the next frame starts a new episode
    length = batch["next", "episode_length"]
    assert (length[:, 1:][done[:, :-1]] == 1).all()


@pytest.mark.parametrize("mode", MODES)
def test_truncation_stores_true_final_observation(mode):
    env = make_vec_env("CartPole-v1", 2, mode=mode, max_episode_steps=4)
    batch = next(iter(GymCollector(env, Left(), frames_per_batch=18, seed=5)))
    trunc = batch["next", "truncated"]
    assert trunc[:, 3].all() and trunc[:, 7].all() and trunc.sum() == 4
    assert not batch["next", "terminated"].any()
    assert torch.equal(batch["next", "done"], trunc)
    # the stored next observation is the physics successor, not the reset observation
    sim = CartPoleEnv()
    sim.reset(seed=0)
    for env_i in range(2):
        for t in (3, 7):
            sim.state = batch["observation"][env_i, t].double().numpy()
            expected, *_ = sim.step(0)
            got = batch["next", "observation"][env_i, t]
            assert torch.allclose(got, torch.as_tensor(expected), atol=1e-5)
            assert not torch.allclose(got, batch["observation"][env_i, t + 1])


def test_truncation_matches_single_env_rollout():
    env = make_vec_env("CartPole-v1", 2, mode="sync", max_episode_steps=4)
    batch = next(iter(GymCollector(env, Left(), frames_per_batch=8, seed=11)))
    for env_i in range(2):
        single = gym.make("CartPole-v1", max_episode_steps=4)
        obs, _ = single.reset(seed=11 + env_i)
        for t in range(4):
            assert torch.equal(batch["observation"][env_i, t], torch.as_tensor(obs))
            obs, reward, terminated, truncated, _ = single.step(0)
            assert torch.equal(batch["next", "observation"][env_i, t], torch.as_tensor(obs))
        assert truncated and not terminated


@pytest.mark.parametrize("mode", MODES)
def test_episode_return_and_length_match_manual_count(mode):
    env = make_vec_env("CartPole-v1", 3, mode=mode, max_episode_steps=12)
    batch = rollout(GymCollector(env, RandomDiscrete(seed=1), frames_per_batch=24, seed=2), 5)
    reward, done = batch["next", "reward"].numpy(), batch["next", "done"].numpy()
    ep_return = batch["next", "episode_return"].numpy()
    ep_length = batch["next", "episode_length"].numpy()
    finished = 0
    for i in range(3):
        total, count = 0.0, 0
        for t in range(reward.shape[1]):
            total, count = total + reward[i, t], count + 1
            assert ep_return[i, t] == pytest.approx(total) and ep_length[i, t] == count
            if done[i, t]:
                total, count, finished = 0.0, 0, finished + 1
    assert finished >= 6


def test_frames_are_exact_when_many_envs_reset():
    # every step ends an episode: next-step autoreset makes every other vector step a reset step
    env = make_vec_env("CartPole-v1", 4, max_episode_steps=1)
    collector = GymCollector(env, RandomDiscrete(), frames_per_batch=40, seed=0)
    for batch in (next(iter(collector)), next(iter(collector))):
        assert batch.numel() == 40
        assert (batch["next", "episode_length"] == 1).all() and batch["next", "truncated"].all()
        assert not (batch["observation"][:, 1:] == batch["next", "observation"][:, :-1]).all(-1).any()
    assert collector.frames == 80


def test_frames_carried_over_when_only_some_envs_reset():
    # copy 0 resets every 2 steps, copy 1 rarely: copy 1 collects frames ahead, kept for later
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=2), lambda: gym.make("CartPole-v1")],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    collector = GymCollector(env, Left(), frames_per_batch=8, seed=0)
    both = rollout(collector, 3)
    assert both.batch_size == (2, 12) and collector.frames == 24
    length = both["next", "episode_length"]
    assert length[0].tolist() == [1, 2] * 6
    kept = collector._stepper.valid[: collector._row].sum(0)
    assert kept[0] == 0 and kept[1] > 0  # copy 1's extra frames wait for the next batch
    follows = (both["observation"][:, 1:] == both["next", "observation"][:, :-1]).all(-1)
    assert follows[~both["next", "done"][:, :-1]].all()
    assert not follows[both["next", "done"][:, :-1]].any()
    steps = length[1]
    assert ((steps[1:] == steps[:-1] + 1) | (steps[1:] == 1)).all() and both["next", "done"][1].any()


@pytest.mark.parametrize("mode", MODES)
def test_same_seed_same_batches(mode):
    def batches(seed):
        env = make_vec_env("CartPole-v1", 3, mode=mode, max_episode_steps=20)
        return rollout(GymCollector(env, RandomDiscrete(seed=7), frames_per_batch=30, seed=seed), 3)

    first, second, other = batches(4), batches(4), batches(5)
    for key in first.keys(True, True):
        assert torch.equal(first[key], second[key]), key
    assert not torch.equal(first["observation"], other["observation"])


def test_set_seed_restarts_from_that_seed():
    env = make_vec_env("CartPole-v1", 2)
    collector = GymCollector(env, Left(), frames_per_batch=10, seed=0)
    next(iter(collector))
    collector.set_seed(3)
    again = next(iter(collector))
    fresh = next(iter(GymCollector(make_vec_env("CartPole-v1", 2), Left(), frames_per_batch=10, seed=3)))
    assert torch.equal(again["observation"], fresh["observation"])


def test_update_policy_weights_from_module_tensordict_and_state_dict():
    policy = Greedy()
    weight = policy.net.weight
    collector = GymCollector(make_vec_env("CartPole-v1", 2), policy, frames_per_batch=4)
    for make_weights in (lambda m: m, TensorDict.from_module, lambda m: m.state_dict()):
        learner = Greedy()
        collector.update_policy_weights_(make_weights(learner))
        assert torch.equal(policy.net.weight, learner.net.weight)
        assert torch.equal(policy.net.bias, learner.net.bias)
        assert policy.net.weight is weight  # copied in place
    before = policy.net.weight.clone()
    collector.update_policy_weights_(None)
    assert torch.equal(policy.net.weight, before)


def test_update_policy_weights_errors():
    collector = GymCollector(make_vec_env("CartPole-v1", 2), Greedy(), frames_per_batch=4)
    match = r"missing \['net.bias', 'net.weight'\], unexpected \['bias', 'weight'\]"
    with pytest.raises(KeyError, match=match):
        collector.update_policy_weights_(nn.Linear(4, 2))
    with pytest.raises(TypeError, match="weights must be"):
        collector.update_policy_weights_(3)
    plain = GymCollector(make_vec_env("CartPole-v1", 2), lambda td: td, frames_per_batch=4)
    with pytest.raises(TypeError, match="policy must be an nn.Module"):
        plain.update_policy_weights_(Greedy())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_policy_on_cuda_and_weights_across_devices():
    policy = Greedy().cuda()
    collector = GymCollector(make_vec_env("CartPole-v1", 2), policy, frames_per_batch=8, seed=0)
    assert collector.device.type == "cuda"
    learner = Greedy()  # on the CPU
    collector.update_policy_weights_(learner)
    assert torch.equal(policy.net.weight.cpu(), learner.net.weight)
    batch = next(iter(collector))
    assert batch.device is None or batch.device.type == "cpu"
    assert batch["action"].device.type == "cpu"
    expected = learner.net(batch["observation"]).argmax(-1)
    assert torch.equal(batch["action"], expected)


def test_storing_device():
    env = make_vec_env("CartPole-v1", 2)
    batch = next(iter(GymCollector(env, Left(), frames_per_batch=4, storing_device="meta")))
    assert batch["observation"].device.type == "meta"


def test_state_dict_round_trip_with_weights_only(tmp_path):
    collector = GymCollector(make_vec_env("CartPole-v1", 2), Left(), frames_per_batch=6, seed=9)
    rollout(collector, 3)
    torch.save(collector.state_dict(), tmp_path / "collector.pt")
    state = torch.load(tmp_path / "collector.pt", weights_only=True)
    assert (state["frames"], state["batches"], state["seed"]) == (18, 3, 9)
    exact = GymCollector(make_vec_env("CartPole-v1", 2), Left(), frames_per_batch=6, seed=0)
    exact.load_state_dict(state)  # the env state is saved: continue the same episodes exactly
    assert torch.equal(next(iter(exact))["observation"], next(iter(collector))["observation"])
    state = {"frames": 18, "batches": 3, "seed": 9}  # the older form (no env state): reseeded

    def resumed():
        c = GymCollector(make_vec_env("CartPole-v1", 2), Left(), frames_per_batch=6, seed=0)
        c.load_state_dict(state)
        return c

    one, two = resumed(), resumed()
    assert one.frames == 18 and one.batches == 3
    first = next(iter(one))
    assert torch.equal(first["observation"], next(iter(two))["observation"])
    fresh = next(iter(GymCollector(make_vec_env("CartPole-v1", 2), Left(), frames_per_batch=6, seed=9)))
    assert not torch.equal(first["observation"], fresh["observation"])  # no replay of old episodes
    assert one.frames == 24
    with pytest.raises(KeyError, match="missing key"):
        one.load_state_dict({"frames": 1})


def test_bad_arguments():
    env = make_vec_env("CartPole-v1", 4)
    for fpb in (10, 0, -4, 4.0, True):
        with pytest.raises(ValueError, match=r"frames_per_batch must be a positive multiple of num_envs=4"):
            GymCollector(env, Left(), frames_per_batch=fpb)
    with pytest.raises(TypeError, match="policy must be callable"):
        GymCollector(env, "policy", frames_per_batch=4)
    with pytest.raises(TypeError, match="VectorEnv"):
        GymCollector(gym.make("CartPole-v1"), Left(), frames_per_batch=4)


def test_policy_must_write_action():
    def policy(td):
        return td.set("act", td["observation"])

    collector = GymCollector(make_vec_env("CartPole-v1", 2), policy, frames_per_batch=4)
    match = r"GymCollector: the policy must write 'action'.*\['act', 'observation'\]"
    with pytest.raises(KeyError, match=match):
        next(iter(collector))


def test_action_shape_checked():
    def bad(td):
        return td.set("action", torch.zeros(*td.batch_size, 1, dtype=torch.int64))

    collector = GymCollector(make_vec_env("CartPole-v1", 2), bad, frames_per_batch=4)
    with pytest.raises(ValueError, match=r"'action' must have shape \(2,\).*got \(2, 1\)"):
        next(iter(collector))


def test_policy_replacing_observation_still_sees_new_observations():
    seen = []

    def normalizing(td):
        obs = td.get("observation")
        seen.append(obs.clone())
        td.set("observation", obs * 2)  # replaces the entry instead of writing in place
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))

    batch = next(iter(GymCollector(make_vec_env("CartPole-v1", 2), normalizing, frames_per_batch=6, seed=0)))
    assert torch.equal(torch.stack(seen, 1), batch["observation"])  # raw observations recorded


def test_context_manager_closes_env():
    env = make_vec_env("CartPole-v1", 2, mode="sync")
    with GymCollector(env, Left(), frames_per_batch=2):
        pass
    assert env.closed


def test_stepper_requires_reset():
    stepper = GymStepper(make_vec_env("CartPole-v1", 2), Left())
    with pytest.raises(RuntimeError, match="call reset"):
        stepper.step(0)


def test_disabled_autoreset_rejected():
    env = make_vec_env("CartPole-v1", 2, mode="sync", autoreset_mode="Disabled")
    with pytest.raises(ValueError, match="GymCollector: the env must autoreset"):
        GymCollector(env, Left(), frames_per_batch=2)


def test_collection_is_gradient_free():
    policy = Greedy()
    batch = next(iter(GymCollector(make_vec_env("CartPole-v1", 2), policy, frames_per_batch=4)))
    assert not any(v.requires_grad for v in batch.values(True, True))
    assert torch.is_grad_enabled()


def test_long_run_keeps_staging_small():
    collector = GymCollector(make_vec_env("CartPole-v1", 8), RandomDiscrete(), frames_per_batch=64)
    for _ in range(50):
        next(iter(collector))
    assert collector._stepper.rows <= 4 * 8  # staging grows only to cover reset steps
