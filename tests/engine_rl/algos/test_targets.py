import copy
import io

import pytest
import torch
from torch import nn

from engine_rl.algos.targets import HardUpdate, SoftUpdate, check_matching_modules


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _perturb(module, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=g))
            else:
                t.add_(7)


def _tensors(module):
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def test_hard_update_copies_parameters_and_buffers():
    source, target = _net(0), _net(1)
    _perturb(source)
    update = HardUpdate(source, target)
    update.step()
    for name, t in _tensors(target).items():
        assert torch.equal(t, _tensors(source)[name]), name
    assert update.num_updates == 1
    # a copy, not an alias
    with torch.no_grad():
        source[0].weight.add_(1.0)
    assert not torch.equal(source[0].weight, target[0].weight)


def test_soft_update_matches_polyak_formula_over_several_steps():
    source, target = _net(0), _net(1)
    _perturb(source)
    expected = {k: v.detach().clone() for k, v in _tensors(target).items()}
    src = {k: v.detach().clone() for k, v in _tensors(source).items()}
    tau = 0.3
    update = SoftUpdate(source, target, tau=tau)
    for _ in range(3):
        update.step()
        for k, v in expected.items():
            expected[k] = (1 - tau) * v + tau * src[k] if v.is_floating_point() else src[k].clone()
    got = _tensors(target)
    for k, v in expected.items():
        torch.testing.assert_close(got[k], v, rtol=1e-6, atol=1e-6)
    assert got["1.num_batches_tracked"].dtype == torch.int64
    assert update.num_updates == 3
    assert not any(p.grad is not None for p in target.parameters())


def test_soft_update_with_tau_one_is_a_copy_and_keeps_autograd_out():
    source, target = _net(0), _net(1)
    SoftUpdate(source, target, tau=1.0).step()
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters()))
    assert all(p.requires_grad for p in target.parameters())  # still plain leaf parameters


def test_updates_follow_modules_moved_after_construction():
    source, target = _net(0), _net(1)
    update = SoftUpdate(source, target, tau=0.5)
    source.double()
    target.double()  # buffers are replaced by .to(): the update must see the new ones
    _perturb(source)
    update.step()
    expected = 0.5 * (source[1].running_mean + _net(1)[1].running_mean.double())
    torch.testing.assert_close(target[1].running_mean, expected)


@pytest.mark.parametrize("tau", [0, -0.1, 1.5, float("nan"), "0.1", True, None])
def test_bad_tau_names_the_argument(tau):
    with pytest.raises(ValueError, match=r"SoftUpdate: argument tau must be a number in \(0, 1\]"):
        SoftUpdate(_net(), _net(), tau=tau)


def test_mismatched_modules_name_the_parameter():
    with pytest.raises(ValueError, match=r"HardUpdate: parameter '0.weight' has shape \(8, 3\) in source but \(8, 4\)"):
        HardUpdate(_net(), nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)))
    with pytest.raises(ValueError, match=r"only in source \['1.bias', '1.num_batches_tracked'.*only in target \[\]"):
        SoftUpdate(_net(), nn.Sequential(nn.Linear(3, 8), nn.Identity(), nn.ReLU(), nn.Linear(8, 2)), tau=0.1)
    with pytest.raises(ValueError, match=r"parameter '0.weight' has dtype torch.float32 in source but torch.float64"):
        check_matching_modules(_net(), _net().double(), consumer="x")
    with pytest.raises(ValueError, match="HardUpdate: source and target are the same module"):
        net = _net()
        HardUpdate(net, net)
    with pytest.raises(TypeError, match="HardUpdate: argument target must be a torch.nn.Module, got dict"):
        HardUpdate(_net(), {})


def test_shared_parameters_are_rejected():
    source = nn.Linear(2, 2)
    target = copy.deepcopy(source)
    target.weight = source.weight
    with pytest.raises(ValueError, match="parameter 'weight' is shared by source and target"):
        HardUpdate(source, target)


def test_state_dict_round_trip_weights_only():
    update = SoftUpdate(_net(0), _net(1), tau=0.1)
    for _ in range(4):
        update.step()
    buf = io.BytesIO()
    torch.save(update.state_dict(), buf)
    buf.seek(0)
    other = SoftUpdate(_net(0), _net(1), tau=0.1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.num_updates == 4
