import math

import pytest
import torch
from torch import nn

from engine_rl.gradients import clip_grad_norm_, clip_grad_value_, grad_norm


def _params_with_grads(scale=10.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)
    for p in net.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * scale).to(dtype)
    return list(net.parameters())


def _flat_grads(params):
    return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.5, math.inf])
def test_grad_norm_equals_norm_of_concatenated_grads(norm_type):
    params = _params_with_grads()
    expected = torch.linalg.vector_norm(_flat_grads(params), norm_type)
    torch.testing.assert_close(grad_norm(params, norm_type=norm_type), expected)


def test_grad_norm_skips_params_without_grad_and_handles_none_at_all():
    params = _params_with_grads()
    params[0].grad = None
    torch.testing.assert_close(grad_norm(params), torch.linalg.vector_norm(_flat_grads(params)))
    assert grad_norm([nn.Parameter(torch.zeros(3))]).item() == 0.0
    single = nn.Parameter(torch.zeros(2))
    single.grad = torch.tensor([3.0, 4.0])
    assert grad_norm(single).item() == 5.0  # one tensor, not an iterable


def test_clip_grad_norm_returns_pre_clip_norm_and_scales_to_max_norm():
    params = _params_with_grads()
    before = _flat_grads(params).clone()
    pre = torch.linalg.vector_norm(before)
    norm = clip_grad_norm_(params, 1.0)
    torch.testing.assert_close(norm, pre)
    after = _flat_grads(params)
    assert torch.linalg.vector_norm(after) <= 1.0 + 1e-5
    torch.testing.assert_close(after, before * (1.0 / (pre + 1e-6)))  # same direction


def test_clip_grad_norm_leaves_small_gradients_alone():
    params = _params_with_grads(scale=1e-3)
    before = _flat_grads(params).clone()
    clip_grad_norm_(params, 100.0)
    assert torch.equal(_flat_grads(params), before)


@pytest.mark.parametrize("max_norm", [1.0, 100.0])
def test_clip_grad_norm_skip_unclipped_gives_bitwise_the_same_gradients(max_norm):
    plain, skipping = _params_with_grads(seed=5), _params_with_grads(seed=5)
    n_plain = clip_grad_norm_(plain, max_norm)
    n_skip = clip_grad_norm_(skipping, max_norm, skip_unclipped=True)
    assert torch.equal(n_plain, n_skip)
    assert torch.equal(_flat_grads(plain), _flat_grads(skipping))
    if max_norm == 1.0:  # this case clips
        assert torch.linalg.vector_norm(_flat_grads(skipping)) <= 1.0 + 1e-5


@pytest.mark.parametrize("dtype, step", [(torch.float32, 1e-7), (torch.float64, 1e-16), (torch.bfloat16, 2e-3)])
def test_clip_grad_norm_skip_unclipped_is_bitwise_at_the_clipping_boundary(dtype, step):
    # max_norm a few ulps either side of norm + 1e-6: the host's factor must round as the tensor ops'
    boundary = grad_norm(_params_with_grads(seed=7, dtype=dtype)).item() + 1e-6
    clipped = 0
    for k in range(-40, 41):
        max_norm = boundary * (1 + k * step)
        plain, skipping = _params_with_grads(seed=7, dtype=dtype), _params_with_grads(seed=7, dtype=dtype)
        n_plain = clip_grad_norm_(plain, max_norm)
        n_skip = clip_grad_norm_(skipping, max_norm, skip_unclipped=True)
        assert torch.equal(n_plain, n_skip)
        assert torch.equal(_flat_grads(plain), _flat_grads(skipping)), (dtype, k)
        clipped += not torch.equal(_flat_grads(plain), _flat_grads(_params_with_grads(seed=7, dtype=dtype)))
    assert 0 < clipped < 81  # both sides of the boundary are exercised


def test_clip_grad_norm_agrees_with_torch():
    ours, ref = _params_with_grads(seed=3), _params_with_grads(seed=3)
    n_ours = clip_grad_norm_(ours, 0.5, norm_type=3.0)
    n_ref = torch.nn.utils.clip_grad_norm_(ref, 0.5, norm_type=3.0)
    torch.testing.assert_close(n_ours, n_ref)
    torch.testing.assert_close(_flat_grads(ours), _flat_grads(ref))


def test_clip_grad_value_clamps_entries_and_returns_pre_clip_norm():
    params = _params_with_grads()
    before = _flat_grads(params).clone()
    norm = clip_grad_value_(params, 0.25)
    torch.testing.assert_close(norm, torch.linalg.vector_norm(before))
    torch.testing.assert_close(_flat_grads(params), before.clamp(-0.25, 0.25))
    assert clip_grad_value_(params, 0.1, compute_norm=False) is None
    assert _flat_grads(params).abs().max() <= 0.1


def test_mixed_dtypes():
    a = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    b = nn.Parameter(torch.zeros(2))
    a.grad = torch.tensor([3.0, 0.0], dtype=torch.float64)
    b.grad = torch.tensor([0.0, 4.0])
    assert grad_norm([a, b]).item() == pytest.approx(5.0)
    clip_grad_norm_([a, b], 1.0)
    assert a.grad.dtype == torch.float64
    torch.testing.assert_close(b.grad, torch.tensor([0.0, 0.8]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda p: clip_grad_norm_(p, 0), "clip_grad_norm_: argument max_norm must be a positive number, got 0"),
        (lambda p: clip_grad_norm_(p, -1.0), "argument max_norm must be a positive number, got -1.0"),
        (lambda p: clip_grad_value_(p, 0.0), "clip_grad_value_: argument max_value must be a positive number"),
        (lambda p: grad_norm(p, norm_type=0), "grad_norm: argument norm_type must be a positive number or math.inf"),
        (lambda p: clip_grad_norm_(p, 1.0, norm_type=-2), "clip_grad_norm_: argument norm_type"),
    ],
)
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call(_params_with_grads())
