import copy

import pytest
import torch

from engine_rl.algos.optimizers import adam


def _nets(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    return copy.deepcopy(net), copy.deepcopy(net)


def _train(net, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(16, 4, generator=g)).square().mean().backward()
        opt.step()


def test_adam_is_torch_fused_adam_on_cpu():
    a, b = _nets()
    opt = adam(a.parameters(), lr=1e-2, eps=1e-5)
    assert type(opt) is torch.optim.Adam
    assert opt.defaults["fused"] is True and opt.defaults["eps"] == 1e-5
    reference = torch.optim.Adam(b.parameters(), lr=1e-2, eps=1e-5, fused=True)
    _train(a, opt, 5)
    _train(b, reference, 5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_state_dict_loads_into_the_default_adam_and_back():
    a, b = _nets()
    opt = adam(a.parameters(), lr=1e-2)
    _train(a, opt, 3)
    plain = torch.optim.Adam(b.parameters(), lr=1e-2)
    b.load_state_dict(a.state_dict())
    plain.load_state_dict(copy.deepcopy(opt.state_dict()))  # as from a checkpoint file
    _train(a, opt, 3, seed=2)
    _train(b, plain, 3, seed=2)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_falls_back_to_foreach_where_no_fused_kernel(monkeypatch):
    real = torch.optim.Adam

    def no_fused(params, **kwargs):
        if kwargs.get("fused"):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real(params, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", no_fused)
    opt = adam(torch.nn.Linear(2, 1).parameters(), lr=1e-3)
    assert not opt.defaults["fused"]


@pytest.mark.parametrize("lr", [0.0, -1.0, float("nan"), float("inf"), True])
def test_bad_lr_is_refused(lr):
    with pytest.raises(ValueError, match=f"adam: lr must be a positive finite number, got {lr!r}"):
        adam(torch.nn.Linear(2, 1).parameters(), lr=lr)
