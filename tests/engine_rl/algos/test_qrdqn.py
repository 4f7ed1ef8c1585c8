"""QR-DQN: the quantile Huber loss by hand, the target, gradients, the greedy policy, the shape check."""

import copy

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos import QRDQNLoss, QuantileMean, QValuePolicy, dueling_mlp, mlp
from engine_rl.algos.qrdqn import quantile_huber, quantile_midpoints


def test_midpoints_are_the_centres_of_equal_fractions():
    assert quantile_midpoints(2).tolist() == [0.25, 0.75]
    assert torch.allclose(quantile_midpoints(5), torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9]))


def test_quantile_huber_loss_by_hand():
    # taus (0.25, 0.75); u_ij = T_j - theta_i: row 0 (0.5, 3), row 1 (-0.5, 2)
    # Huber (kappa 1): 0.125, 2.5 | 0.125, 1.5; weights |tau_i - 1{u<0}|: 0.25, 0.25 | 0.25, 0.75
    # rows' means over j: (0.03125 + 0.625) / 2 = 0.328125, (0.03125 + 1.125) / 2 = 0.578125; summed over i
    got = quantile_huber(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]))
    assert got.shape == (1,) and got.item() == pytest.approx(0.90625)
    # kappa 2: |u| = 3 is beyond it (Huber 2 * (3 - 1)), the others quadratic; all divided by kappa
    by_hand = ((0.25 * 0.125 + 0.25 * 2 * (3 - 1)) / 2 + (0.25 * 0.125 + 0.75 * 0.5 * 4) / 2) / 2
    got = quantile_huber(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]), kappa=2.0)
    assert got.item() == pytest.approx(by_hand)


def _linear(weight, bias):
    """Linear(1, 4): observation 0 gives ``bias``, observation 1 gives ``weight + bias`` (2 actions x 2 quantiles)."""
    net = nn.Linear(1, 4)
    with torch.no_grad():
        net.weight.copy_(torch.tensor(weight, dtype=torch.float32).reshape(4, 1))
        net.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    return net


def _sample(terminated=False, weight=None):
    td = TensorDict({
        "observation": torch.zeros(1, 1), "action": torch.tensor([1]),
        ("next", "observation"): torch.ones(1, 1), ("next", "reward"): torch.tensor([1.0]),
        ("next", "terminated"): torch.tensor([terminated])}, [1])
    if weight is not None:
        td["weight"] = torch.tensor([weight])
    return td


def test_loss_by_hand_bootstrapping_and_terminal():
    # Z(s) = [[0, 1], [2, 3]], a = 1: theta = (2, 3); Z(s') = [[10, 11], [2, 7]], means (10.5, 4.5): a* = 0
    # T = 1 + 0.5 * (10, 11) = (6, 6.5); u: (4, 4.5), (3, 3.5), all > 0, Huber |u| - 0.5
    # loss = 0.25 * (3.5 + 4) / 2 + 0.75 * (2.5 + 3) / 2 = 3.0; td_error = mean(theta) - mean(T) = 2.5 - 6.25
    loss_fn = QRDQNLoss(_linear([10, 10, 0, 4], [0, 1, 2, 3]), num_actions=2, num_quantiles=2, gamma=0.5)
    sample = _sample()
    assert loss_fn(sample)["loss"].item() == pytest.approx(3.0)
    assert sample["td_error"].tolist() == pytest.approx([-3.75])
    # terminated: T = (1, 1); u: (-1, -1), (-2, -2); 0.75 * 0.5 + 0.25 * 1.5 = 0.75; td_error 2.5 - 1
    sample = _sample(terminated=True)
    assert loss_fn(sample)["loss"].item() == pytest.approx(0.75)
    assert sample["td_error"].tolist() == pytest.approx([1.5])
    # prioritized replay's importance weight scales the item's loss
    assert loss_fn(_sample(terminated=True, weight=2.0))["loss"].item() == pytest.approx(1.5)
    # an n-step row brings its discount (gamma^k, here 0.125), used instead of gamma and terminated:
    # T = 1 + 0.125 * (10, 11) = (2.25, 2.375); td_error 2.5 - 2.3125
    sample = _sample(terminated=False)
    sample["next", "discount"] = torch.tensor([0.125])
    loss_fn(sample)
    assert sample["td_error"].tolist() == pytest.approx([2.5 - 2.3125])
    sample = _sample(terminated=False)
    sample["next", "discount"] = torch.tensor([0.0])  # a window that ended at a terminal: T = r
    loss_fn(sample)
    assert sample["td_error"].tolist() == pytest.approx([1.5])


def test_the_target_network_picks_the_next_action_unless_double():
    online = _linear([10, 10, 0, 4], [0, 1, 2, 3])  # online prefers a* = 0 in s'
    target = _linear([0, 0, 10, 10], [0, 1, 2, 3])  # target: Z(s') = [[0, 1], [12, 13]], prefers a* = 1
    plain = QRDQNLoss(online, target, num_actions=2, num_quantiles=2, gamma=0.5)
    double = QRDQNLoss(online, target, num_actions=2, num_quantiles=2, gamma=0.5, double=True)
    sample = _sample()
    plain(sample)
    assert sample["td_error"].tolist() == pytest.approx([2.5 - 7.25])  # T = 1 + 0.5 * (12, 13)
    double(sample)
    assert sample["td_error"].tolist() == pytest.approx([2.5 - 1.25])  # T = 1 + 0.5 * (0, 1), valued by the target


def test_gradients_reach_the_online_network_only():
    torch.manual_seed(0)
    qnet = dueling_mlp(4, 3, (16,), outputs_per_action=5)
    loss_fn = QRDQNLoss(qnet, num_actions=3, num_quantiles=5)
    target_before = copy.deepcopy(loss_fn.target_qnet.state_dict())
    optimizer = torch.optim.Adam(qnet.parameters(), lr=0.1)
    sample = TensorDict({
        "observation": torch.randn(8, 4), "action": torch.randint(0, 3, (8,)),
        ("next", "observation"): torch.randn(8, 4), ("next", "reward"): torch.randn(8),
        ("next", "terminated"): torch.zeros(8, dtype=torch.bool)}, [8])
    loss = loss_fn(sample)["loss"]
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in qnet.parameters())
    assert all(p.grad is None and not p.requires_grad for p in loss_fn.target_qnet.parameters())
    optimizer.step()
    assert loss_fn(sample)["loss"].item() < loss.item()
    for key, value in loss_fn.target_qnet.state_dict().items():
        assert torch.equal(value, target_before[key]), key


def test_the_greedy_policy_takes_the_argmax_of_the_mean_quantiles():
    # action 0: quantiles (0, 10), mean 5; action 1: (4, 4), mean 4; the largest quantile is action 0's,
    # the largest lowest quantile action 1's: the mean picks action 0
    net = _linear([0, 0, 0, 0], [0, 10, 4, 4])
    q = QuantileMean(net, num_actions=2, num_quantiles=2)
    assert q(torch.zeros(3, 1)).tolist() == [[5.0, 4.0]] * 3
    td = QValuePolicy(q)(TensorDict({"observation": torch.zeros(3, 1)}, [3]))
    assert td["action"].tolist() == [0, 0, 0]


def test_a_network_of_the_wrong_width_is_one_line_naming_the_shapes():
    expected = ("QRDQNLoss: qnet must output num_actions x num_quantiles = 2 x 10 = 20 values per observation "
                "(read as [batch, 2, 10]), got 2 (its last layer: Linear(in_features=8, out_features=2, bias=True))")
    with pytest.raises(ValueError) as err:
        QRDQNLoss(mlp(4, 2, (8,)), num_actions=2, num_quantiles=10)  # a DQN network
    assert str(err.value) == expected
    with pytest.raises(ValueError, match=r"= 20 values per observation .*, got 6 \(its last layer: DuelingHead"):
        QRDQNLoss(dueling_mlp(4, 2, (8,), outputs_per_action=3), num_actions=2, num_quantiles=10)

    class Opaque(nn.Module):  # declares no width: checked on the forward
        def forward(self, x):
            return torch.zeros(x.shape[0], 7)

    loss_fn = QRDQNLoss(Opaque(), num_actions=2, num_quantiles=3)
    with pytest.raises(ValueError) as err:
        loss_fn(_sample())
    assert str(err.value) == ("QRDQNLoss: qnet must output num_actions x num_quantiles = 2 x 3 = 6 values per "
                              "observation (read as [batch, 2, 3]), got 7 (an output of shape [1, 7])")
    with pytest.raises(ValueError, match="^QRDQNLoss: num_quantiles must be a positive int, got 0$"):
        QRDQNLoss(mlp(4, 2, (8,)), num_actions=2, num_quantiles=0)


def test_a_missing_key_is_named():
    loss_fn = QRDQNLoss(mlp(1, 4, ()), num_actions=2, num_quantiles=2)
    sample = _sample()
    del sample["next", "terminated"]
    with pytest.raises(KeyError, match="QRDQNLoss.*terminated"):
        loss_fn(sample)
