import math

import pytest
import torch
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer
from handlers import GradClipper, NonFiniteError


def _batches(n=3):
    g = torch.Generator().manual_seed(0)
    return [
        TensorDict({"x": torch.randn(16, 4, generator=g) * 10, "y": torch.randn(16, 1, generator=g)}, [16])
        for _ in range(n)
    ]


def _setup(n=3, steps=1):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def loss(td):
        return {"loss": ((net(td["x"]) - td["y"]) ** 2).mean() * 100}  # large gradients

    trainer = create_trainer(_batches(n), loss, torch.optim.SGD(net.parameters(), lr=1.0), optim_steps_per_batch=steps)
    return trainer, net


def _norm(net, norm_type=2.0):
    return torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in net.parameters()]), norm_type).item()


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_by_norm_records_pre_clip_norm_and_bounds_the_step(norm_type):
    trainer, net = _setup()
    before, after, moved = [], [], []
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: before.append(_norm(net, norm_type)))
    GradClipper(net, max_norm=0.5, norm_type=norm_type).attach(trainer)
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: after.append(_norm(net, norm_type)))
    trainer.add_event_handler(
        RLEvents.BACKWARD_COMPLETED, lambda e: moved.append([p.detach().clone() for p in net.parameters()])
    )
    recorded = []
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: recorded.append(e.state.metrics["grad_norm"]))
    trainer.run(max_epochs=1)
    assert recorded == pytest.approx(before, rel=1e-5)
    assert all(isinstance(v, float) for v in recorded)
    assert all(b > 0.5 for b in before)  # clipping was active
    assert all(a <= 0.5 + 1e-5 for a in after)
    # SGD lr=1: the last step moved the parameters by exactly the clipped gradient
    step = torch.cat([(old - new.detach()).reshape(-1) for old, new in zip(moved[-1], net.parameters())])
    assert torch.linalg.vector_norm(step, norm_type).item() == pytest.approx(after[-1], rel=1e-4)


def test_clip_by_value():
    trainer, net = _setup()
    before, max_abs = [], []
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: before.append(_norm(net)))
    GradClipper(net.parameters(), max_value=0.01).attach(trainer)
    trainer.add_event_handler(
        RLEvents.BACKWARD_COMPLETED, lambda e: max_abs.append(max(p.grad.abs().max().item() for p in net.parameters()))
    )
    trainer.run(max_epochs=1)
    assert trainer.state.metrics["grad_norm"] == pytest.approx(before[-1], rel=1e-5)
    assert max(max_abs) == pytest.approx(0.01)


@pytest.mark.parametrize("kwargs", [{"max_norm": 0.5}, {"max_value": 0.01}])
def test_record_norm_false_leaves_metrics_alone(kwargs):
    trainer, net = _setup()
    after = []
    GradClipper(net, record_norm=False, **kwargs).attach(trainer)
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: after.append(_norm(net)))
    trainer.run(max_epochs=1)
    assert "grad_norm" not in trainer.state.metrics
    assert max(after) <= 0.5 + 1e-5


def test_every_and_metric_name():
    trainer, net = _setup(n=2, steps=3)
    after = []
    GradClipper(net, max_norm=1e-3, metric_name="critic_grad_norm").attach(trainer, every=2)
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: after.append(_norm(net) <= 1e-3 + 1e-6))
    trainer.run(max_epochs=1)
    assert after == [False, True, False, True, False, True]  # optim steps 2, 4, 6
    assert "critic_grad_norm" in trainer.state.metrics


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, r"GradClipper: give exactly one of max_norm and max_value, got max_norm=None, max_value=None"),
        ({"max_norm": 1.0, "max_value": 1.0}, "give exactly one of max_norm and max_value"),
        ({"max_norm": 0.0}, "GradClipper: argument max_norm must be a positive number, got 0.0"),
        ({"max_value": -1}, "GradClipper: argument max_value must be a positive number, got -1"),
        ({"max_norm": 1.0, "norm_type": 0}, "GradClipper: argument norm_type must be a positive number"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GradClipper(torch.nn.Linear(2, 1), **kwargs)


def test_bad_parameters():
    with pytest.raises(ValueError, match="GradClipper: argument parameters must hold at least one tensor"):
        GradClipper([], max_norm=1.0)
    with pytest.raises(ValueError, match=r"only tensors, got \['str'\]"):
        GradClipper(["w"], max_norm=1.0)
    with pytest.raises(TypeError, match="GradClipper: argument parameters must be an nn.Module or .* got int"):
        GradClipper(3, max_norm=1.0)


def _grads(seed=0):
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    for p in net.parameters():
        p.grad = torch.randn(p.shape, generator=g) * 10
    return net


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])  # clipping, and a norm already within the bound
def test_clip_by_norm_equals_torch_clip_grad_norm(norm_type, max_norm):
    ours, ref = _grads(seed=3), _grads(seed=3)
    n_ours = GradClipper(ours, max_norm=max_norm, norm_type=norm_type).clip()
    n_ref = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm, norm_type=norm_type)
    assert torch.equal(n_ours, n_ref)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), ref.parameters()))


def test_clip_by_value_equals_torch_clip_grad_value_and_returns_the_pre_clip_norm():
    ours, ref = _grads(seed=4), _grads(seed=4)
    before = torch.nn.utils.get_total_norm([p.grad for p in ref.parameters()])
    norm = GradClipper(ours.parameters(), max_value=0.25).clip()
    torch.nn.utils.clip_grad_value_(ref.parameters(), 0.25)
    torch.testing.assert_close(norm, before)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), ref.parameters()))
    assert GradClipper(ours, max_value=0.1, record_norm=False).clip() is None


def test_parameters_without_gradient_are_skipped():
    net = _grads()
    net[0].weight.grad = None
    norm = GradClipper(net, max_norm=1.0).clip()
    rest = torch.cat([p.grad.reshape(-1) for p in net.parameters() if p.grad is not None])
    assert norm.item() > 1.0 and torch.linalg.vector_norm(rest).item() <= 1.0 + 1e-5
    assert net[0].weight.grad is None


@pytest.mark.parametrize("clip", [{"max_norm": 0.5}, {"max_value": 0.1}])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("record_norm", [True, False])
def test_error_if_nonfinite_names_the_parameter_and_step_before_the_weights_move(clip, bad, record_norm):
    trainer, net = _setup(n=3)
    weights, steps = [], []

    def poison(engine):
        weights.append([p.detach().clone() for p in net.parameters()])
        if engine.state.optim_steps == 2:
            net[2].weight.grad[0, 3] = bad

    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, poison)
    GradClipper(net, error_if_nonfinite=True, record_norm=record_norm, **clip).attach(trainer)
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: steps.append(e.state.optim_steps))
    with pytest.raises(NonFiniteError, match=r"GradClipper: non-finite gradient \(NaN or Inf\) of parameter "
                                             r"'2\.weight' at optim step 2 \(batch 2, frames 32\); "
                                             r"the optimizer step was not taken"):
        trainer.run(max_epochs=1)
    assert steps == [1]  # the second optimizer step did not run
    # no gradient was clipped (torch checks the norm before scaling), and the weights are unchanged
    assert torch.isfinite(net[0].weight.grad).all() and not torch.isfinite(net[2].weight.grad).all()
    assert all(torch.equal(p, w) for p, w in zip(net.parameters(), weights[-1]))


def test_error_if_nonfinite_names_every_offending_parameter_of_a_tensor_list():
    net = _grads()
    params = list(net.parameters())
    params[0].grad[0, 0] = float("nan")
    params[3].grad[1] = float("inf")
    with pytest.raises(NonFiniteError, match=r"of parameters 'param0', 'param3'$"):
        GradClipper(params, max_norm=1.0, error_if_nonfinite=True).clip()


def test_without_error_if_nonfinite_a_nan_gradient_is_clipped_as_torch_does():
    net = _grads()
    net[0].bias.grad[0] = float("nan")
    assert math.isnan(GradClipper(net, max_norm=1.0).clip().item())
    assert all(torch.isnan(p.grad).all() for p in net.parameters())  # torch scales by the NaN factor


def test_error_if_nonfinite_leaves_finite_runs_alone():
    runs = []
    for check in (False, True):
        trainer, net = _setup(n=3, steps=2)
        GradClipper(net, max_norm=0.5, error_if_nonfinite=check).attach(trainer)
        trainer.run(max_epochs=1)
        runs.append([p.detach().clone() for p in net.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_error_if_nonfinite_on_an_overflowing_norm_of_finite_gradients():
    w = torch.nn.Parameter(torch.zeros(2))
    w.grad = torch.tensor([3e38, 3e38])  # each finite in float32, their 2-norm is not
    with pytest.raises(NonFiniteError, match=r"^GradClipper: non-finite gradient norm \(overflow\)$"):
        GradClipper([w], max_norm=1.0, error_if_nonfinite=True).clip()
    assert torch.equal(w.grad, torch.tensor([3e38, 3e38]))
