import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.algos.gae import gae
from engine_rl.algos.networks import mlp
from engine_rl.algos.policies import CategoricalActorCritic
from engine_rl.collectors import GymCollector, make_vec_env
from handlers.advantage import GAEAdvantage


def _batch():
    # 2 envs x 3 steps; observation[..., 0] is the state's value under value_fn below
    obs = torch.tensor([[[1.0], [2.0], [3.0]], [[4.0], [5.0], [6.0]]])
    next_obs = torch.tensor([[[2.0], [3.0], [7.0]], [[5.0], [9.0], [8.0]]])  # env 1 truncates at step 1
    terminated = torch.tensor([[False, False, True], [False, False, False]])
    truncated = torch.tensor([[False, False, False], [False, True, False]])
    return TensorDict(
        {
            "observation": obs,
            ("next", "observation"): next_obs,
            ("next", "reward"): torch.ones(2, 3),
            ("next", "terminated"): terminated,
            ("next", "truncated"): truncated,
            ("next", "done"): terminated | truncated,
        },
        [2, 3],
    )


def test_writes_values_advantages_and_targets_from_one_critic_call():
    calls = []

    def value_fn(obs):
        calls.append(obs.shape)
        return obs[..., 0] * 1.0

    batch = _batch()
    GAEAdvantage(value_fn, gamma=0.5, lmbda=0.5).compute(batch)
    assert calls == [torch.Size([4, 3, 1])]  # V(s) and V(s') together
    value = batch["observation"][..., 0]
    next_value = batch["next", "observation"][..., 0]
    adv, target = gae(torch.ones(2, 3), value, next_value, batch["next", "terminated"], batch["next", "done"],
                      gamma=0.5, lmbda=0.5)
    torch.testing.assert_close(batch["state_value"], value)
    torch.testing.assert_close(batch["advantage"], adv)
    torch.testing.assert_close(batch["value_target"], target)
    # env 1, step 1 truncated: bootstraps from V(true final obs) = 9, and does not chain into step 2
    assert batch["advantage"][1, 1].item() == pytest.approx(1 + 0.5 * 9 - 5)


def test_normalize_advantage_over_the_batch():
    batch = GAEAdvantage(lambda o: o[..., 0], gamma=0.9, lmbda=0.9, normalize_advantage=True).compute(_batch())
    adv = batch["advantage"]
    assert adv.mean().item() == pytest.approx(0.0, abs=1e-6) and adv.std().item() == pytest.approx(1.0, rel=1e-5)


def test_on_batch_collected_in_a_trainer_with_a_real_collector():
    torch.manual_seed(0)
    policy = CategoricalActorCritic(mlp(4, 2, (16,)), mlp(4, 1, (16,)), seed=0)
    collector = GymCollector(make_vec_env("CartPole-v1", 4), policy, frames_per_batch=64, seed=0)
    seen = {}

    def loss(td):
        seen.setdefault("keys", set(td.keys()))
        return {"loss": policy.value(td["observation"]).mean() * 0.0}

    trainer = create_trainer(collector, loss, torch.optim.SGD(policy.parameters(), lr=0.0), total_frames=128)
    GAEAdvantage(policy.value, gamma=0.99, lmbda=0.95).attach(trainer)
    trainer.run()
    batch = trainer.state.batch
    assert {"advantage", "value_target", "state_value"} <= seen["keys"]
    with torch.no_grad():
        v, nv = policy.value(batch["observation"]), policy.value(batch["next", "observation"])
    adv, _ = gae(batch["next", "reward"], v, nv, batch["next", "terminated"], batch["next", "done"],
                 gamma=0.99, lmbda=0.95)
    torch.testing.assert_close(batch["advantage"], adv)
    collector.shutdown()


def test_errors_name_the_handler():
    with pytest.raises(ValueError, match=r"GAEAdvantage: argument lmbda must be in \[0, 1\], got 2"):
        GAEAdvantage(lambda o: o, gamma=0.9, lmbda=2)
    with pytest.raises(TypeError, match="GAEAdvantage: argument value_fn must be callable"):
        GAEAdvantage(3, gamma=0.9, lmbda=0.9)
    handler = GAEAdvantage(lambda o: o[..., 0], gamma=0.9, lmbda=0.9)
    with pytest.raises(ValueError, match=r"GAEAdvantage: the batch must have batch shape \[num_envs, T\].*got \(6,\)"):
        handler.compute(_batch().reshape(-1))
    batch = _batch()
    del batch["next", "terminated"]
    with pytest.raises(KeyError, match=r"GAEAdvantage needs key\(s\) \['next.terminated'\]"):
        handler.compute(batch)


def test_batch_values_replace_the_observation_value_function():
    from tensordict import TensorDict

    batch = TensorDict({
        "observation": torch.zeros(1, 3, 2), ("next", "observation"): torch.zeros(1, 3, 2),
        ("next", "reward"): torch.ones(1, 3),
        ("next", "terminated"): torch.tensor([[False, False, True]]),
        ("next", "done"): torch.tensor([[False, False, True]])}, [1, 3])
    by_batch = GAEAdvantage(batch_values=lambda b: (torch.zeros(1, 3), torch.full((1, 3), 2.0)), gamma=0.5, lmbda=1.0)
    # V(s) = 0, V(s') = 2: delta = 1 + 0.5 * 2 = 2 where the episode goes on, 1 at the terminal;
    # lambda 1: A_t = delta_t + 0.5 * A_t+1
    assert by_batch.compute(batch)["advantage"].tolist() == [[3.25, 2.5, 1.0]]
    for kwargs in ({}, {"value_fn": lambda obs: obs.sum(-1), "batch_values": lambda b: b}):
        with pytest.raises(TypeError, match=r"^GAEAdvantage: give exactly one of value_fn \(observations -> values\) "
                                            r"and batch_values$"):
            GAEAdvantage(**kwargs, gamma=0.9, lmbda=0.9)
