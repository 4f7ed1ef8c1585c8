import copy
import io

import pytest
import torch

from engine_rl.optim import FastAdam


def _nets(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    return copy.deepcopy(net), copy.deepcopy(net)


def _train(pairs, steps, *, seed=1, lr_decay=1.0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=g)
        for net, opt in pairs:
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
            for group in opt.param_groups:
                group["lr"] *= lr_decay


def _same(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("kwargs", [{}, {"weight_decay": 0.01}, {"amsgrad": True}, {"maximize": True},
                                    {"betas": (0.8, 0.99), "eps": 1e-5}])
def test_bitwise_equal_to_fused_adam(kwargs):
    a, b = _nets()
    ref = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True, **kwargs)
    fast = FastAdam(b.parameters(), lr=1e-2, **kwargs)
    _train([(a, ref), (b, fast)], 25, lr_decay=0.95)  # lr changed in param_groups, as schedulers do
    assert _same(a, b)
    assert fast._lean is not None  # the short path ran
    for p, q in zip(a.parameters(), b.parameters()):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(ref.state[p][key], fast.state[q][key]), key


def test_state_dict_round_trip_with_torch_adam():
    a, b = _nets()
    ref = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True)
    fast = FastAdam(b.parameters(), lr=1e-2)
    _train([(a, ref), (b, fast)], 5)
    buf = io.BytesIO()
    torch.save(fast.state_dict(), buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    # a fresh FastAdam loads it (replacing the cached state) and goes on exactly like Adam
    c = copy.deepcopy(b)
    resumed = FastAdam(c.parameters(), lr=1e-2)
    resumed.load_state_dict(saved)
    assert resumed._lean is None
    _train([(a, ref), (c, resumed)], 5, seed=2)
    assert _same(a, c)
    # and torch's Adam loads a FastAdam state dict
    d = copy.deepcopy(b)
    plain = torch.optim.Adam(d.parameters(), lr=1e-2, fused=True)
    plain.load_state_dict(copy.deepcopy(fast.state_dict()))  # (loading shares tensors: copy)
    _train([(b, fast), (d, plain)], 5, seed=3)
    assert _same(b, d)


def test_missing_gradient_falls_back_to_adam():
    a, b = _nets()
    ref = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True)
    fast = FastAdam(b.parameters(), lr=1e-2)
    _train([(a, ref), (b, fast)], 3)
    x = torch.randn(8, 4)
    for net, opt in ((a, ref), (b, fast)):
        opt.zero_grad()
        net[0](x).sum().backward()  # the last layer gets no gradient
        opt.step()
    assert _same(a, b)
    assert b[2].weight.grad is None


def test_step_hooks_are_honoured():
    _, b = _nets()
    fast = FastAdam(b.parameters(), lr=1e-2)
    calls = []
    fast.register_step_post_hook(lambda opt, args, kwargs: calls.append(opt))
    _train([(b, fast)], 3)
    assert len(calls) == 3


def test_add_param_group_resets_the_cache():
    a, b = _nets()
    ref = torch.optim.Adam(a[0].parameters(), lr=1e-2, fused=True)
    fast = FastAdam(b[0].parameters(), lr=1e-2)
    _train([(a, ref), (b, fast)], 3)
    ref.add_param_group({"params": a[2].parameters(), "lr": 5e-3})
    fast.add_param_group({"params": b[2].parameters(), "lr": 5e-3})
    assert fast._lean is None
    _train([(a, ref), (b, fast)], 4)
    assert _same(a, b)


def test_zero_grad_modes():
    _, b = _nets()
    fast = FastAdam(b.parameters(), lr=1e-2)
    b(torch.ones(2, 4)).sum().backward()
    fast.zero_grad(set_to_none=False)
    assert all(torch.count_nonzero(p.grad) == 0 for p in b.parameters())
    fast.zero_grad()
    assert all(p.grad is None for p in b.parameters())


def test_tensor_lr_is_refused():
    _, b = _nets()
    with pytest.raises(TypeError, match="FastAdam: argument lr must be a float"):
        FastAdam(b.parameters(), lr=torch.tensor(0.1))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        FastAdam(b.parameters(), lr=-1.0)


def test_mixed_dtypes_use_adams_own_step():
    a, b = _nets()
    b[2].double()
    a[2].double()
    ref = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True)
    fast = FastAdam(b.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        x = torch.randn(8, 4, generator=g)
        for net, opt in ((a, ref), (b, fast)):
            opt.zero_grad()
            net[2](net[1](net[0](x)).double()).square().mean().backward()
            opt.step()
    assert _same(a, b)
    assert fast._lean_off and fast._lean is None
