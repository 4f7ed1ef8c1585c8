import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos import DQNLoss, QValuePolicy, mlp


class TableQ(nn.Module):
    """Q(s, a) = table[s_index, a], s_index read from observation[:, 0]."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(torch.as_tensor(table, dtype=torch.float32))

    def forward(self, obs):
        return self.table[obs[:, 0].long()]


def _sample(term=(False, True), reward=(1.0, 2.0), weight=None):
    td = TensorDict(
        {
            "observation": torch.tensor([[0.0], [1.0]]),
            "action": torch.tensor([0, 1]),
            ("next", "observation"): torch.tensor([[1.0], [2.0]]),
            ("next", "reward"): torch.tensor(reward),
            ("next", "terminated"): torch.tensor(term),
        },
        [2],
    )
    if weight is not None:
        td["weight"] = torch.tensor(weight)
    return td


def test_double_dqn_target_by_hand():
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 9.0]])
    target = TableQ([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    loss_fn = DQNLoss(online, target, gamma=0.5, double=True, loss="mse")
    td = _sample()
    out = loss_fn(td)
    # item 0: Q(s0,a0)=1; next s1: online argmax = a0 -> target Q(s1,a0)=30 -> y = 1 + 0.5*30 = 16
    # item 1: Q(s1,a1)=0.5; terminated -> y = 2
    expected_err = torch.tensor([1.0 - 16.0, 0.5 - 2.0])
    torch.testing.assert_close(td["td_error"], expected_err)
    torch.testing.assert_close(out["loss"], expected_err.pow(2).mean())


def test_vanilla_dqn_uses_target_max():
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 9.0]])
    target = TableQ([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    td = _sample(term=(False, False))
    DQNLoss(online, target, gamma=0.5, double=False, loss="mse")(td)
    # item 0: max_a target(s1) = 40 -> y = 21; item 1: max target(s2) = 60 -> y = 2 + 30 = 32
    torch.testing.assert_close(td["td_error"], torch.tensor([1.0 - 21.0, 0.5 - 32.0]))


def test_truncation_bootstraps_only_termination_stops():
    online = TableQ([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    loss_fn = DQNLoss(online, TableQ([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]), gamma=1.0, loss="mse")
    td = _sample(term=(False, False))
    td[("next", "truncated")] = torch.tensor([True, True])  # ignored: truncation bootstraps
    loss_fn(td)
    torch.testing.assert_close(td["td_error"], torch.tensor([0.0 - (1.0 + 1.0), 1.0 - (2.0 + 2.0)]))


def test_importance_weights_scale_the_loss_and_gradients_reach_online_only():
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 9.0]])
    target = TableQ([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    loss_fn = DQNLoss(online, target, gamma=0.5, loss="mse")
    out = loss_fn(_sample(weight=[0.0, 1.0]))
    torch.testing.assert_close(out["loss"], torch.tensor((0.5 - 2.0) ** 2 / 2))
    out["loss"].backward()
    assert online.table.grad is not None and target.table.grad is None
    assert not target.table.requires_grad


def test_huber_loss_is_linear_for_large_errors():
    online = TableQ([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    td = _sample(term=(True, True), reward=(10.0, 0.5))
    out = DQNLoss(online, gamma=0.9, loss="huber")(td)
    torch.testing.assert_close(out["loss"], torch.tensor(((10.0 - 0.5) + 0.5 * 0.5**2) / 2))


def test_default_target_is_a_frozen_copy():
    q = mlp(4, 2, (8,))
    loss_fn = DQNLoss(q)
    assert loss_fn.target_qnet is not q
    for a, b in zip(q.parameters(), loss_fn.target_qnet.parameters()):
        assert torch.equal(a, b) and not b.requires_grad


def test_missing_key_names_key_and_consumer():
    td = _sample()
    del td[("next", "terminated")]
    with pytest.raises(KeyError, match=r"DQNLoss needs key\(s\) \['next.terminated'\]"):
        DQNLoss(mlp(1, 2, (4,)))(td)


@pytest.mark.parametrize("kw, match", [({"gamma": 1.5}, r"gamma must be a number in \[0, 1\], got 1.5"), ({"loss": "l1"}, "loss must be 'huber'")])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        DQNLoss(mlp(1, 2, (4,)), **kw)


def test_greedy_policy_takes_argmax():
    policy = QValuePolicy(TableQ([[1.0, 2.0], [3.0, 0.5]]))
    td = policy(TensorDict({"observation": torch.tensor([[0.0], [1.0]])}, [2]))
    assert td["action"].tolist() == [1, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_non_bool_terminated_flags_mean_the_same_as_bools(dtype):
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 9.0]])
    target = TableQ([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    loss_fn = DQNLoss(online, target, gamma=0.5, loss="mse")
    as_bool, as_other = _sample(), _sample()
    as_other["next", "terminated"] = as_bool["next", "terminated"].to(dtype)
    assert torch.equal(loss_fn(as_other)["loss"], loss_fn(as_bool)["loss"])
    torch.testing.assert_close(as_other["td_error"], torch.tensor([1.0 - 16.0, 0.5 - 2.0]))


def test_an_n_step_sample_bootstraps_with_its_own_discount():
    """``("next", "discount")`` (gamma^k, 0 after a terminal) replaces ``gamma * (1 - terminated)``."""
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 9.0]])
    target = TableQ([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    loss_fn = DQNLoss(online, target, gamma=0.5, double=True, loss="mse")
    td = _sample(term=(False, False))
    td["next", "discount"] = torch.tensor([0.125, 0.0])  # a 3-step window; one a terminal ended
    loss_fn(td)
    # item 0: y = 1 + 0.125 * target Q(s1, a0) = 1 + 0.125 * 30; item 1: y = 2 (terminal: no bootstrap)
    torch.testing.assert_close(td["td_error"], torch.tensor([1.0 - (1.0 + 0.125 * 30.0), 0.5 - 2.0]))
