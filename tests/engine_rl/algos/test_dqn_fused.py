import copy

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos import DQNLoss, mlp
from engine_rl.algos.dqn_fused import q_mlp_plan
from engine_rl.algos.mlp_fused import write_gradients
from engine_rl.optim import FastAdam


def _qnet(activation=nn.ReLU):
    torch.manual_seed(0)
    return mlp(4, 3, (32, 16), activation=activation)


def _sample(n=37, seed=1, weight=False):
    g = torch.Generator().manual_seed(seed)
    td = TensorDict({
        "observation": torch.randn(n, 4, generator=g) * 2,
        "action": torch.randint(0, 3, (n,), generator=g),
        ("next", "observation"): torch.randn(n, 4, generator=g) * 2,
        ("next", "reward"): torch.randn(n, generator=g) * 3,  # large TD errors: both sides of the huber kink
        ("next", "terminated"): torch.rand(n, generator=g) < 0.3,
    }, [n])
    if weight:
        td["weight"] = torch.rand(n, generator=g) + 0.5
    return td


def _autograd_and_fused(qnet, sample, **loss_kwargs):
    """(loss, td_error, grads) of autograd's path and of write_gradients=True, from one network."""
    target = copy.deepcopy(qnet)
    results = []
    for write in (False, True):
        loss_fn = DQNLoss(qnet, target, write_gradients=write, **loss_kwargs)
        td = sample.clone()
        qnet.zero_grad(set_to_none=True)
        out = loss_fn(td)
        assert loss_fn.wrote_gradients is write
        assert out["loss"].requires_grad is not write
        if not write:
            out["loss"].backward()
        results.append((out["loss"].detach(), td["td_error"], [p.grad.clone() for p in qnet.parameters()]))
    return results


@pytest.mark.parametrize("activation", [nn.ReLU, nn.Tanh])
@pytest.mark.parametrize("loss", ["huber", "mse"])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("double", [True, False])
def test_loss_td_error_and_gradients_are_bitwise_autograds(activation, loss, weight, double):
    qnet = _qnet(activation)
    sample = _sample(weight=weight)
    (ref_loss, ref_err, ref_grads), (f_loss, f_err, f_grads) = _autograd_and_fused(
        qnet, sample, loss=loss, double=double, gamma=0.9)
    if loss == "huber":  # the sample exercises both the quadratic and the linear part
        assert (ref_err.abs() < 1).any() and (ref_err.abs() > 1).any()
    assert torch.equal(f_loss, ref_loss)
    assert torch.equal(f_err, ref_err)
    assert len(f_grads) == 6
    for g, r in zip(f_grads, ref_grads):
        assert torch.equal(g, r)
        assert g.shape == r.shape and g.is_contiguous()


@pytest.mark.parametrize("n", [1, 64, 100])
def test_bitwise_for_any_batch_size_and_with_target_values_ahead(n):
    qnet = _qnet()
    loss_fn = DQNLoss(qnet)
    sample = loss_fn.add_target_values(_sample(n))  # the block the recipe's sampler prepares
    (ref_loss, ref_err, ref_grads), (f_loss, f_err, f_grads) = _autograd_and_fused(qnet, sample)
    assert torch.equal(f_loss, ref_loss) and torch.equal(f_err, ref_err)
    assert all(torch.equal(g, r) for g, r in zip(f_grads, ref_grads))


def test_adam_steps_stay_bitwise_the_same():
    nets = []
    for write in (False, True):
        qnet = _qnet()
        loss_fn = DQNLoss(qnet, gamma=0.99, write_gradients=write)
        opt = FastAdam(qnet.parameters(), lr=1e-2)
        for step in range(25):
            opt.zero_grad(set_to_none=True)
            out = loss_fn(_sample(seed=step))
            if not write:
                out["loss"].backward()
            opt.step()
            if step % 10 == 9:
                loss_fn.target_qnet.load_state_dict(qnet.state_dict())
        nets.append(qnet.state_dict())
    assert all(torch.equal(nets[0][k], nets[1][k]) for k in nets[0])


def test_written_gradients_add_to_present_ones_as_backward_does():
    qnet = _qnet()
    sample = _sample()
    (_, _, ref_grads), _ = _autograd_and_fused(qnet, sample)
    loss_fn = DQNLoss(qnet, write_gradients=True)
    qnet.zero_grad(set_to_none=True)
    loss_fn(sample.clone())
    loss_fn(sample.clone())
    for p, r in zip(qnet.parameters(), ref_grads):
        assert torch.equal(p.grad, r + r)
    w = torch.zeros(2, requires_grad=True)
    write_gradients([w], [torch.ones(2)])
    assert w.grad.tolist() == [1.0, 1.0]


class TableQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(5, 3))

    def forward(self, obs):
        return self.table[obs[:, 0].long().clamp(0, 4)]


def _fallbacks():
    """(name, qnet, sample, context) cases where the loss must take autograd's path."""
    hooked = _qnet()
    hooked[2].register_forward_hook(lambda module, args, out: out * 2)
    frozen = _qnet()
    frozen[0].requires_grad_(False)
    double = _qnet().double()
    sample = _sample()
    return [
        ("not an MLP", TableQ(), sample),
        ("forward hook", hooked, sample),
        ("frozen layer", frozen, sample),
        ("float64 weights", double, sample.apply(lambda t: t.double() if t.is_floating_point() else t)),
        ("3-D observations", _qnet(), TensorDict({
            "observation": torch.randn(2, 5, 4), "action": torch.zeros(2, 5, dtype=torch.long),
            ("next", "observation"): torch.randn(2, 5, 4), ("next", "reward"): torch.ones(2, 5),
            ("next", "terminated"): torch.zeros(2, 5, dtype=torch.bool)}, [2, 5])),
    ]


@pytest.mark.parametrize("case", range(5))
def test_unsupported_networks_and_samples_take_autograds_path(case):
    name, qnet, sample = _fallbacks()[case]
    loss_fn = DQNLoss(qnet, write_gradients=True)
    out = loss_fn(sample)
    assert not loss_fn.wrote_gradients, name
    assert out["loss"].requires_grad, name
    out["loss"].backward()
    assert any(p.grad is not None for p in qnet.parameters()), name


def test_no_grad_autocast_and_global_hooks_take_autograds_path():
    qnet = _qnet()
    loss_fn = DQNLoss(qnet, write_gradients=True)
    with torch.no_grad():
        out = loss_fn(_sample())
    assert not loss_fn.wrote_gradients and not out["loss"].requires_grad
    assert all(p.grad is None for p in qnet.parameters())  # evaluating a loss writes no gradient

    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = loss_fn(_sample())
    assert not loss_fn.wrote_gradients and out["loss"].requires_grad

    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: None)
    try:
        assert q_mlp_plan(qnet, torch.zeros(3, 4), torch.zeros(3, dtype=torch.long)) is None
        out = loss_fn(_sample())
        assert not loss_fn.wrote_gradients and out["loss"].requires_grad
    finally:
        handle.remove()
    assert q_mlp_plan(qnet, torch.zeros(3, 4), torch.zeros(3, dtype=torch.long)) is not None


def test_write_gradients_must_be_a_bool():
    with pytest.raises(TypeError, match="DQNLoss: argument write_gradients must be a bool, got 'yes'"):
        DQNLoss(_qnet(), write_gradients="yes")
