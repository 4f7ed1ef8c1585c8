import copy
from unittest.mock import MagicMock

import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers import WeightSync


class FakeCollector:
    """Yields batches; records the acting policy's bias at each collection."""

    def __init__(self, policy, n=4):
        self.policy = policy
        self.n = n
        self.seen_bias = []
        self.updates = 0

    def __iter__(self):
        for _ in range(self.n):
            self.seen_bias.append(self.policy.bias.detach().clone())
            yield TensorDict({"x": torch.ones(4, 2)}, [4])

    @torch.no_grad()
    def update_policy_weights_(self, weights=None):
        self.updates += 1
        TensorDict.from_module(self.policy).update_(weights)


def _setup(n=4):
    torch.manual_seed(0)
    learner = torch.nn.Linear(2, 1)
    collector = FakeCollector(copy.deepcopy(learner), n)

    def loss(td):
        return {"loss": -learner(td["x"]).mean()}  # bias grows by lr each step

    trainer = create_trainer(collector, loss, torch.optim.SGD(learner.parameters(), lr=1.0))
    return trainer, learner, collector


def test_sync_after_every_iteration_so_each_batch_uses_the_newest_weights():
    trainer, learner, collector = _setup(n=4)
    initial = learner.bias.detach().clone()
    WeightSync(learner, collector).attach(trainer)
    trainer.run(max_epochs=1)
    # batch k (0-based) is collected after k optim steps, each adding lr=1.0 to the bias
    assert [round((b - initial).item(), 4) for b in collector.seen_bias] == [0.0, 1.0, 2.0, 3.0]
    assert torch.equal(collector.policy.weight, learner.weight) and torch.equal(collector.policy.bias, learner.bias)
    assert collector.updates == 5  # at start + after each of the 4 iterations


def test_every_2_and_no_sync_at_start():
    trainer, learner, collector = _setup(n=5)
    with torch.no_grad():
        collector.policy.bias.fill_(-10.0)
    sync = WeightSync(learner, collector, every=2, sync_at_start=False)
    sync.attach(trainer)
    trainer.run(max_epochs=1)
    b0 = learner.bias.item() - 5.0  # 5 optim steps of +1.0
    expected = [-10.0, -10.0, b0 + 2, b0 + 2, b0 + 4]  # synced after iterations 2 and 4 only
    assert [b.item() for b in collector.seen_bias] == pytest.approx(expected, abs=1e-5)
    assert sync.num_syncs == collector.updates == 2


def test_shared_policy_is_a_no_op():
    torch.manual_seed(0)
    learner = torch.nn.Linear(2, 1)
    for acting in (learner, torch.nn.Sequential(learner)):  # the module itself, or a wrapper around it
        collector = MagicMock()
        collector.policy = acting
        sync = WeightSync(learner, collector)
        assert sync.shares_weights()
        assert sync.sync() is False
        collector.update_policy_weights_.assert_not_called()
    collector = MagicMock()
    collector.policy = copy.deepcopy(learner)
    assert WeightSync(learner, collector).sync() is True
    (weights,), _ = collector.update_policy_weights_.call_args
    assert isinstance(weights, TensorDict) and set(weights.keys()) == {"weight", "bias"}
    assert not weights["weight"].requires_grad  # detached view of the learner's parameters


def test_with_gym_collector_acting_on_a_copy():
    from engine_rl.collectors import GymCollector, make_vec_env

    class Greedy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(4, 2)

        def forward(self, td):
            return td.set("action", self.q(td["observation"]).argmax(-1))

    torch.manual_seed(0)
    learner = Greedy()
    actor = copy.deepcopy(learner)
    collector = GymCollector(make_vec_env("CartPole-v1", 2), actor, frames_per_batch=8, seed=0)

    def loss(td):
        return {"loss": learner.q(td["observation"]).pow(2).mean()}

    trainer = create_trainer(collector, loss, torch.optim.SGD(learner.parameters(), lr=0.1), total_frames=24)
    WeightSync(learner, collector).attach(trainer)
    trainer.run()
    collector.shutdown()
    assert torch.equal(actor.q.weight, learner.q.weight)
    assert not torch.equal(actor.q.weight, Greedy().q.weight)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_across_devices():
    from engine_rl.collectors import GymCollector, make_vec_env

    learner = torch.nn.Linear(4, 2).cuda()
    actor = copy.deepcopy(learner).cpu()
    with torch.no_grad():
        learner.weight.add_(1.0)

    class Policy(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, td):
            return td.set("action", self.net(td["observation"]).argmax(-1))

    collector = GymCollector(make_vec_env("CartPole-v1", 2), Policy(actor), frames_per_batch=8, seed=0)
    WeightSync(Policy(learner), collector).sync()
    assert torch.equal(actor.weight, learner.weight.cpu())


def test_bad_arguments():
    with pytest.raises(TypeError, match=r"WeightSync: argument collector \(list\) has no update_policy_weights_"):
        WeightSync(torch.nn.Linear(1, 1), [])
    with pytest.raises(TypeError, match="WeightSync: argument source_policy must be an nn.Module, got function"):
        WeightSync(lambda td: td, MagicMock())
    with pytest.raises(ValueError, match="WeightSync: argument every must be a positive int, got -1"):
        WeightSync(torch.nn.Linear(1, 1), MagicMock(), every=-1)
    trainer, learner, collector = _setup(n=1)
    with pytest.raises(ValueError, match="WeightSync.attach: argument every=3 needs a plain event"):
        WeightSync(learner, collector).attach(trainer, event=Events.ITERATION_COMPLETED(every=2), every=3)
