"""The MLP builders and the dueling head: shapes, the mean-advantage identity, the errors."""

import pytest
import torch

from engine_rl.algos import DuelingHead, NatureCNN, dueling_mlp, mlp


def test_dueling_head_is_value_plus_advantage_minus_its_mean():
    torch.manual_seed(0)
    head = DuelingHead(6, 4)
    x = torch.randn(5, 6)
    q = head(x)
    value, advantage = head.value(x), head.advantage(x)
    assert q.shape == (5, 4) and value.shape == (5, 1) and advantage.shape == (5, 4)
    assert torch.allclose(q.mean(dim=-1, keepdim=True), value, atol=1e-6)  # mean_a Q = V
    assert torch.allclose(q - value, advantage - advantage.mean(dim=-1, keepdim=True), atol=1e-6)
    assert torch.equal(q.argmax(-1), advantage.argmax(-1))  # the greedy action is the advantage's


def test_dueling_head_with_quantiles_combines_each_quantile_apart():
    torch.manual_seed(1)
    head = DuelingHead(6, 3, outputs_per_action=5)
    x = torch.randn(2, 7, 6)  # any leading dimensions
    z = head(x)
    assert z.shape == (2, 7, 15) and head.out_features == 15
    z = z.reshape(2, 7, 3, 5)  # action-major
    value = head.value(x)  # [2, 7, 5]
    advantage = head.advantage(x).reshape(2, 7, 3, 5)
    assert torch.allclose(z.mean(dim=-2), value, atol=1e-6)
    assert torch.allclose(z, value.unsqueeze(-2) + advantage - advantage.mean(dim=-2, keepdim=True), atol=1e-6)


def test_dueling_mlp_shares_the_hidden_layers_and_sits_on_the_nature_cnn():
    net = dueling_mlp(4, 2, (32, 16))
    assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear", "ReLU", "DuelingHead"]
    assert net[-1].value.in_features == 16 and net(torch.zeros(3, 4)).shape == (3, 2)
    plain = sum(p.numel() for p in mlp(4, 2, (32, 16)).parameters())
    assert sum(p.numel() for p in net.parameters()) == plain + 16 + 1  # one more output unit: the value
    cnn = NatureCNN((4, 84, 84))
    qnet = torch.nn.Sequential(cnn, dueling_mlp(cnn.features, 6, ()))
    assert qnet(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)


def test_sizes_must_be_positive():
    with pytest.raises(ValueError, match=r"^DuelingHead: sizes must be positive, got in_features=4, num_actions=0, "
                                         r"outputs_per_action=1$"):
        DuelingHead(4, 0)
    with pytest.raises(ValueError, match=r"^dueling_mlp: sizes must be positive, got in_features=4, hidden=\(0,\)$"):
        dueling_mlp(4, 2, (0,))
