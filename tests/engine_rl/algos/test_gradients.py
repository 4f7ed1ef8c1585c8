import math

import pytest
import torch
from torch import nn

import engine_rl.algos.gradients as gradients
from engine_rl.algos.gradients import grad_norm, non_finite_grads


def _params_with_grads(scale=10.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)
    for p in net.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * scale).to(dtype)
    return list(net.parameters())


def _flat_grads(params):
    return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])


@pytest.fixture(params=["torch", "fallback"])
def total_norm(request, monkeypatch):
    """Run a test with torch's get_total_norm and with the fallback for torch < 2.6."""
    if request.param == "fallback":
        monkeypatch.setattr(gradients, "_get_total_norm", None)
    return request.param


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.5, math.inf])
def test_grad_norm_equals_norm_of_concatenated_grads(norm_type, total_norm):
    params = _params_with_grads()
    expected = torch.linalg.vector_norm(_flat_grads(params), norm_type)
    torch.testing.assert_close(grad_norm(params, norm_type=norm_type), expected)


def test_grad_norm_skips_params_without_grad_and_handles_none_at_all(total_norm):
    params = _params_with_grads()
    params[0].grad = None
    torch.testing.assert_close(grad_norm(params), torch.linalg.vector_norm(_flat_grads(params)))
    assert grad_norm([nn.Parameter(torch.zeros(3))]).item() == 0.0
    single = nn.Parameter(torch.zeros(2))
    single.grad = torch.tensor([3.0, 4.0])
    assert grad_norm(single).item() == 5.0  # one tensor, not an iterable
    assert grad_norm(p for p in [single]).item() == 5.0  # a generator


def test_grad_norm_mixed_dtypes(total_norm):
    a = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    b = nn.Parameter(torch.zeros(2))
    a.grad = torch.tensor([3.0, 0.0], dtype=torch.float64)
    b.grad = torch.tensor([0.0, 4.0])
    assert grad_norm([a, b]).item() == pytest.approx(5.0)


def test_grad_norm_is_nan_or_inf_with_such_a_gradient(total_norm):
    params = _params_with_grads()
    params[1].grad[0] = float("inf")
    assert grad_norm(params).item() == math.inf
    params[1].grad[0] = float("nan")
    assert math.isnan(grad_norm(params).item())


def test_non_finite_grads_names_every_offending_parameter_in_order():
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    assert non_finite_grads(net.named_parameters()) == []
    net[2].weight.grad[0, 1] = float("nan")
    net[0].bias.grad[2] = -float("inf")
    net[2].bias.grad = None  # no gradient: not an offender
    assert non_finite_grads(net.named_parameters()) == ["0.bias", "2.weight"]


def test_bad_norm_type_is_named():
    with pytest.raises(ValueError, match="grad_norm: argument norm_type must be a positive number or math.inf, got 0"):
        grad_norm(_params_with_grads(), norm_type=0)
