import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers.nan_guard import NaNGuard, NonFiniteError, first_non_finite
from handlers.optim import GradClipper


def _batch(n=4, reward=None, obs=None):
    return TensorDict(
        {
            "observation": torch.zeros(n, 2) if obs is None else obs,
            ("next", "observation"): torch.zeros(n, 2),
            ("next", "reward"): torch.ones(n) if reward is None else reward,
        },
        [n],
    )


def _run(data, loss_fn, net, guard=None):
    trainer = create_trainer(data, loss_fn, torch.optim.SGD(net.parameters(), lr=0.1))
    (guard or NaNGuard(parameters=net)).attach(trainer)
    trainer.run(max_epochs=1)
    return trainer


def _mse(net):
    return lambda td: {"loss": net(td["observation"]).pow(2).mean()}


def test_clean_run_passes():
    net = torch.nn.Linear(2, 1)
    trainer = _run([_batch()] * 3, _mse(net), net)
    assert trainer.state.optim_steps == 3


def test_nan_reward_names_the_key_and_the_batch():
    net = torch.nn.Linear(2, 1)
    bad = _batch(reward=torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    with pytest.raises(NonFiniteError, match=r"non-finite value \(NaN or Inf\) in batch key 'next.reward' at batch 2 "
                                             r"\(frames 8, optim step 1\)"):
        _run([_batch(), bad], _mse(net), net)


def test_inf_loss_is_reported_as_the_loss_before_the_weights_change():
    net = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in net.parameters()]

    def loss(td):
        out = net(td["observation"]).mean()
        return {"loss_actor": out, "loss_critic": out * float("inf")}

    with pytest.raises(NonFiniteError, match=r"non-finite loss output \(NaN or Inf\) 'loss_critic' at optim step 1"):
        _run([_batch()], loss, net)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # no optimizer step happened


def test_nan_gradient_names_the_parameter():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))

    def loss(td):
        out = net(td["observation"]).mean()
        net[1].weight.register_hook(lambda g: g * float("nan"))  # a finite loss with a NaN gradient
        return {"loss": out}

    match = r"non-finite gradient \(NaN or Inf\) of parameter '1.weight' at optim step 1 \("
    with pytest.raises(NonFiniteError, match=match):
        _run([_batch()], loss, net)


def test_guard_attached_before_a_clipper_sees_the_raw_gradient():
    net = torch.nn.Linear(2, 1)
    guard = NaNGuard(parameters=net, check_losses=False)

    def loss(td):
        net.weight.register_hook(lambda g: g + float("inf"))
        return {"loss": net(td["observation"]).mean()}

    trainer = create_trainer([_batch()], loss, torch.optim.SGD(net.parameters(), lr=0.1))
    guard.attach(trainer)
    GradClipper(net, max_norm=1.0).attach(trainer)
    with pytest.raises(NonFiniteError, match="parameter 'weight'"):
        trainer.run(max_epochs=1)


def test_batch_keys_are_configurable_and_missing_ones_skipped():
    net = torch.nn.Linear(2, 1)
    bad_obs = _batch(obs=torch.tensor([[0.0, float("-inf")]] * 4))
    _run([bad_obs], lambda td: {"loss": net.weight.sum()}, net, NaNGuard(batch_keys=[("next", "reward"), "nope"]))
    with pytest.raises(NonFiniteError, match="batch key 'observation'"):
        _run([bad_obs], lambda td: {"loss": net.weight.sum()}, net, NaNGuard())


def test_first_non_finite():
    assert first_non_finite([("a", torch.ones(3)), ("i", torch.arange(3)), ("e", torch.zeros(0))]) is None
    assert first_non_finite([("a", torch.ones(3)), ("b", torch.tensor([float("inf")]))]) == "b"
    assert first_non_finite([("big", torch.full((4,), 3e38))]) is None  # no overflow from a sum
    with pytest.raises(TypeError, match="NaNGuard: argument parameters must hold modules or tensors, got str"):
        NaNGuard(parameters=["w"])
