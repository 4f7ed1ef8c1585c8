import numpy as np
import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers.gradients import GradClipper
from handlers.nan_guard import NaNGuard, NonFiniteError, first_non_finite


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


def test_stop_messages_name_the_step_batch_and_frames():
    net = torch.nn.Linear(2, 1)

    def loss(td):
        net.weight.register_hook(lambda g: g * float("inf"))
        return {"loss": net(td["observation"]).mean()}

    match = (r"^NaNGuard: non-finite gradient \(NaN or Inf\) of parameter 'weight' at optim step 1 \(batch 1, "
             r"frames 4\); the optimizer step was not taken$")
    with pytest.raises(NonFiniteError, match=match):
        _run([_batch()], loss, net)
    with pytest.raises(ValueError, match="NonFiniteCheck: nonfinite must be 'stop' or 'skip', got 'warn'"):
        NaNGuard(nonfinite="warn")


def _skip_setup(scales, *, prioritized=True):
    """A DQN-like run: replay (prioritized), fused Adam, a clipper, a soft target update; the
    loss (and the TD errors it writes back) is multiplied by ``scales[optim step - 1]``."""
    from engine_rl.algos.optimizers import adam
    from engine_rl.replay import PrioritizedSampler, ReplayBuffer, UniformSampler
    from handlers import PriorityUpdater, ReplayExtender, ReplaySampler, TargetNetUpdater

    torch.manual_seed(0)
    net, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    sampler = PrioritizedSampler(alpha=1.0) if prioritized else UniformSampler()
    buffer = ReplayBuffer(64, sampler=sampler, seed=0)
    step = iter(scales)

    def loss(sample):
        td_error = (net(sample["observation"]).squeeze(-1) - sample["next", "reward"]) * next(step)
        sample["td_error"] = td_error.detach()
        return {"loss": td_error.pow(2).mean()}

    data = [_batch(8, reward=torch.randn(8), obs=torch.randn(8, 2)) for _ in range(len(scales))]
    opt = adam(net.parameters(), lr=0.1)
    trainer = create_trainer(data, loss, opt)
    guard = NaNGuard(parameters=net, nonfinite="skip").attach(trainer)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, 4).attach(trainer)
    GradClipper(net, max_norm=1.0).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    TargetNetUpdater(net, target, tau=0.5).attach(trainer)
    return trainer, guard, net, target, opt, buffer


def test_skip_takes_no_optimizer_step_and_spreads_no_nan():
    from engine_rl.events import RLEvents

    nan = float("nan")
    trainer, guard, net, target, opt, buffer = _skip_setup([1.0, nan, 1.0, float("inf"), 1.0])
    weights = {}
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: weights.update(
        {e.state.optim_steps: [p.detach().clone() for p in net.parameters()]}))
    trainer.run(max_epochs=1)
    assert trainer.state.optim_steps == 5 and guard.skipped == 2
    assert trainer.state.metrics["nonfinite_skipped"] == 2
    for skipped in (2, 4):  # the weights after a skipped step are those before it
        assert all(torch.equal(a, b) for a, b in zip(weights[skipped], weights[skipped - 1]))
    assert all(float(s["step"]) == 3 for s in opt.state.values())  # Adam counted the 3 steps taken
    assert all(bool(torch.isfinite(p).all()) for p in [*net.parameters(), *target.parameters()])
    assert np.isfinite(buffer.sampler.tree.leaves[: len(buffer)]).all()  # no NaN priority


def test_skip_still_stops_on_non_finite_data():
    net = torch.nn.Linear(2, 1)
    bad = _batch(reward=torch.tensor([1.0, 1.0, float("inf"), 1.0]))
    match = (r"NaNGuard: non-finite value \(NaN or Inf\) in batch key 'next.reward' at batch 2 \(frames 8, optim step 1\); "
             r"non-finite data stops whatever nonfinite says")
    with pytest.raises(NonFiniteError, match=match):
        _run([_batch(), bad], _mse(net), net, NaNGuard(parameters=net, nonfinite="skip"))


def test_skip_without_named_parameters_drops_the_optimizers_gradients():
    net = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in net.parameters()]
    trainer = _run([_batch()], lambda td: {"loss": net(td["observation"]).mean() * float("nan")}, net,
                   NaNGuard(nonfinite="skip"))
    assert trainer.state.metrics["nonfinite_skipped"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


def test_skip_count_is_checkpointed_and_published_on_resume():
    from engine_rl.run.checkpoint import training_state

    trainer, guard, *_ = _skip_setup([float("nan"), 1.0], prioritized=False)
    trainer.run(max_epochs=1)
    state = training_state(trainer)
    assert state["trainer.NaNGuard"].state_dict() == {"skipped": 1}
    resumed, guard2, *_ = _skip_setup([1.0, 1.0], prioritized=False)
    guard2.load_state_dict({"skipped": 1})
    resumed.run(max_epochs=1)
    assert resumed.state.metrics["nonfinite_skipped"] == 1


def test_stop_publishes_no_skip_count():
    net = torch.nn.Linear(2, 1)
    trainer = _run([_batch()], _mse(net), net)
    assert "nonfinite_skipped" not in trainer.state.metrics


def test_in_one_process_the_guard_takes_no_collective(monkeypatch):
    """The ranks' joint decision (one all-reduce per check) is taken only with several processes."""
    import handlers.nan_guard as nan_guard

    def collective(code):
        raise AssertionError("an all-reduce in one process")

    monkeypatch.setattr(nan_guard, "reporting_rank", collective)
    net = torch.nn.Linear(2, 1)
    scale = iter([1.0, float("nan"), 1.0])
    guard = NaNGuard(parameters=net, nonfinite="skip")
    trainer = _run([_batch()] * 3, lambda td: {"loss": net(td["observation"]).pow(2).mean() * next(scale)}, net, guard)
    assert trainer.state.metrics["nonfinite_skipped"] == 1
    with pytest.raises(NonFiniteError, match="batch key 'next.reward'"):
        _run([_batch(reward=torch.tensor([0.0, float("nan"), 0.0, 0.0]))], _mse(net), net)
