import pytest
import torch

from engine_rl.algos.optimizers import adam
from engine_rl.finite import Found, NonFiniteCheck, check_nonfinite_policy, first_non_finite

NAN, INF = float("nan"), float("inf")


def test_first_non_finite_exact_and_skips_non_float():
    assert first_non_finite([]) is None
    assert first_non_finite([("i", torch.arange(3)), ("b", torch.ones(2, dtype=torch.bool)), ("e", torch.zeros(0))]) is None
    assert first_non_finite([("a", torch.ones(3)), ("b", torch.tensor([-INF])), ("c", torch.tensor([NAN]))]) == "b"
    # finite values whose norm overflows float32: the exact search clears them
    assert first_non_finite({"big": torch.full((4,), 3e38), "half": torch.full((2,), 6e4, dtype=torch.float16)}) is None
    # mixed dtypes in one reduction
    assert first_non_finite([("f64", torch.ones(2, dtype=torch.float64)), ("f32", torch.tensor([1.0, NAN]))]) == "f32"


def test_a_tensor_that_requires_grad_is_checked_without_a_graph():
    w = torch.nn.Parameter(torch.tensor([1.0, INF]))
    assert first_non_finite([("w", w * 2)]) == "w"


def _net_with_grads(*grads):
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    for p, g in zip(net.parameters(), grads):
        p.grad = torch.full_like(p, g)
    return net


def test_step_names_a_loss_before_the_gradients_it_spoiled():
    net = _net_with_grads(NAN, 1.0, 1.0, 1.0)
    check = NonFiniteCheck(net.named_parameters())
    losses = {"loss_actor": torch.tensor(0.5), "loss_critic": torch.tensor(INF), "alpha": torch.tensor(1.0)}
    assert check.step(losses) == Found("loss output", "loss_critic")
    assert check.step({"loss": torch.tensor(0.5)}) == Found("gradient", "0.weight")
    assert net[0].weight.grad is not None and check.skipped == 0  # "stop": the caller raises, nothing dropped


def test_step_is_none_when_finite_and_ignores_missing_gradients():
    net = _net_with_grads(1.0, 1.0)  # the second layer has no gradient
    check = NonFiniteCheck(net.named_parameters(), nonfinite="skip")
    assert check.step({"loss": torch.tensor(1.0), "count": torch.tensor(3)}) is None
    assert check.skipped == 0 and net[0].weight.grad is not None


def test_skip_drops_every_gradient_the_optimizers_would_use():
    net = _net_with_grads(1.0, 1.0, INF, 1.0)
    other = torch.nn.Parameter(torch.ones(2))  # not named by the check, stepped by an optimizer
    other.grad = torch.ones(2)
    opt = torch.optim.SGD([other], lr=0.1)
    check = NonFiniteCheck(net.named_parameters(), nonfinite="skip")
    assert check.step([("loss", torch.tensor(1.0))], optimizers=[opt]) == Found("gradient", "1.weight")
    assert all(p.grad is None for p in [*net.parameters(), other])
    assert check.skipped == 1 and check.state_dict() == {"skipped": 1}
    restored = NonFiniteCheck(nonfinite="skip")
    restored.load_state_dict(check.state_dict())
    assert restored.skipped == 1


@pytest.mark.parametrize("fused", [True, False])
def test_a_skipped_step_leaves_adam_untouched_step_count_included(fused):
    net = torch.nn.Linear(3, 2)
    opt = adam(net.parameters(), lr=0.1) if fused else torch.optim.Adam(net.parameters(), lr=0.1)
    check = NonFiniteCheck(net.named_parameters(), nonfinite="skip")
    x = torch.randn(8, 3)

    def step(scale):
        opt.zero_grad(set_to_none=True)
        loss = net(x).pow(2).mean() * scale
        loss.backward()
        found = check.step({"loss": loss.detach()}, optimizers=[opt])
        opt.step()
        return found

    assert step(1.0) is None
    weights = [p.detach().clone() for p in net.parameters()]
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in enumerate(opt.state.values())}
    assert step(NAN) == Found("loss output", "loss")
    assert all(torch.equal(a, b) for a, b in zip(weights, net.parameters()))
    for i, s in enumerate(opt.state.values()):
        assert all(torch.equal(s[k], state[i][k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert [float(s["step"]) for s in opt.state.values()] == [1.0, 1.0]
    assert step(1.0) is None and [float(s["step"]) for s in opt.state.values()] == [2.0, 2.0]
    assert check.skipped == 1


def test_policy_is_checked():
    assert check_nonfinite_policy("stop", owner="X") == "stop"
    for bad in ("Skip", "", None, True):
        with pytest.raises(ValueError, match=rf"X: nonfinite must be 'stop' or 'skip', got {bad!r}"):
            check_nonfinite_policy(bad, owner="X")
    with pytest.raises(ValueError, match="NonFiniteCheck: nonfinite must be 'stop' or 'skip', got 'raise'"):
        NonFiniteCheck(nonfinite="raise")
    with pytest.raises(TypeError, match=r"NonFiniteCheck: argument parameters must be \(name, tensor\) pairs"):
        NonFiniteCheck([("w", 1.0)])


def test_data_names_the_entry():
    check = NonFiniteCheck(nonfinite="skip")
    assert check.data([("observation", torch.zeros(2, 3)), ("next.reward", torch.tensor([0.0, -INF]))]) == "next.reward"
    assert check.skipped == 0  # data is only reported, never skipped
