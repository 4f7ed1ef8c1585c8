import math

import pytest
import torch
from ignite.engine import Events
from ignite.handlers import HandlersTimeProfiler, TerminateOnNan, Timer
from tensordict import TensorDict

from engine_rl import MASK_KEY, RLEvents, create_trainer


def _batches(n=4, rows=8):
    g = torch.Generator().manual_seed(0)
    return [
        TensorDict({"x": torch.randn(rows, 3, generator=g), "y": torch.randn(rows, 1, generator=g)}, [rows])
        for _ in range(n)
    ]


class MSELoss(torch.nn.Module):
    in_keys = ["x", "y"]

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def forward(self, td):
        return TensorDict({"loss": ((self.net(td["x"]) - td["y"]) ** 2).mean(), "aux": torch.tensor(1.0)}, [])


def _trainer(data=None, **kw):
    loss = MSELoss()
    opt = torch.optim.SGD(loss.parameters(), lr=0.05)
    return create_trainer(data if data is not None else _batches(), loss, opt, **kw), loss


def test_event_order_and_counters_of_one_iteration():
    trainer, _ = _trainer(_batches(1), num_epochs=2, optim_steps_per_batch=3)
    seen = []
    for ev in RLEvents:
        attr = {RLEvents.BATCH_COLLECTED: "batches", RLEvents.EPOCH_DONE: "optim_epochs"}.get(ev, "optim_steps")
        trainer.add_event_handler(ev, lambda e, ev=ev, attr=attr: seen.append((ev.name, getattr(e.state, attr))))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(("ITERATION_COMPLETED", 0)))
    trainer.run(max_epochs=1)
    step = ["SAMPLE_REQUESTED", "BACKWARD_COMPLETED", "OPTIM_STEP_DONE"]
    expected = [("BATCH_COLLECTED", 1)]
    n = 0
    for epoch in (1, 2):
        for _ in range(3):
            n += 1
            expected += [(name, n) for name in step]
        expected.append(("EPOCH_DONE", epoch))
    expected.append(("ITERATION_COMPLETED", 0))
    assert seen == expected
    s = trainer.state
    assert (s.frames, s.batches, s.optim_steps, s.optim_epochs) == (8, 1, 6, 2)


def test_filtered_custom_events_fire_expected_number_of_times():
    trainer, _ = _trainer(_batches(5), optim_steps_per_batch=4)
    calls = {"every3": 0, "once7": 0, "batch_every2": 0}
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(every=3), lambda e: calls.__setitem__("every3", calls["every3"] + 1))
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(once=7), lambda e: calls.__setitem__("once7", e.state.optim_steps))
    trainer.add_event_handler(
        RLEvents.BATCH_COLLECTED(every=2), lambda e: calls.__setitem__("batch_every2", calls["batch_every2"] + 1)
    )
    trainer.run(max_epochs=1)
    assert trainer.state.optim_steps == 20
    assert calls == {"every3": 6, "once7": 7, "batch_every2": 2}


def test_output_holds_mean_losses_and_training_reduces_loss():
    torch.manual_seed(0)
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(1))
    data = [TensorDict({"x": x, "y": x.sum(-1, keepdim=True)}, [64])] * 50  # learnable exactly
    trainer, loss = _trainer(data)
    first = {}
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=1), lambda e: first.update(e.state.output))
    trainer.run(max_epochs=1)
    assert set(trainer.state.output) == {"loss"}  # "aux" is not a loss
    assert trainer.state.output["loss"] < 0.2 * first["loss"]
    # one optim step per iteration: the output is that step's loss
    assert math.isclose(trainer.state.output["loss"], trainer.state.losses["loss"].item(), rel_tol=1e-6)


def test_output_is_mean_over_the_iterations_steps():
    values = iter([1.0, 3.0, 5.0, 7.0])
    p = torch.nn.Parameter(torch.zeros(()))

    def loss(td):
        return {"loss": p * 0 + next(values), "loss_b": p * 0 + 2.0}

    trainer = create_trainer(_batches(1), loss, torch.optim.SGD([p], lr=0.1), optim_steps_per_batch=4)
    trainer.run(max_epochs=1)
    assert trainer.state.output == {"loss": 4.0, "loss_b": 2.0}


def test_learning_starts_and_total_frames():
    trainer, _ = _trainer(_batches(10), learning_starts=24, total_frames=40)
    trainer.run(max_epochs=3)
    # 8 frames per batch: optimization from batch 3 (24 frames) on; stop at 40 frames (batch 5)
    assert trainer.state.frames == 40
    assert trainer.state.batches == 5
    assert trainer.state.optim_steps == 3


def test_masked_frames_are_not_counted():
    b = _batches(1)[0]
    b.set(MASK_KEY, torch.tensor([True, False] * 4))
    trainer, _ = _trainer([b, b])
    trainer.run(max_epochs=1)
    assert trainer.state.frames == 8


def test_several_optimizers_are_all_stepped():
    a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

    def loss(td):
        return {"loss_actor": a(td["x"]).pow(2).mean(), "loss_critic": b(td["x"]).pow(2).mean()}

    wa, wb = a.weight.clone(), b.weight.clone()
    opts = {"actor": torch.optim.SGD(a.parameters(), lr=0.1), "critic": torch.optim.SGD(b.parameters(), lr=0.1)}
    trainer = create_trainer(_batches(1), loss, opts)
    trainer.run(max_epochs=1)
    assert not torch.equal(a.weight, wa) and not torch.equal(b.weight, wb)
    assert set(trainer.state.output) == {"loss_actor", "loss_critic"}


def test_sampler_handler_supplies_the_sample_and_end_optim_epochs():
    trainer, _ = _trainer(_batches(1), num_epochs=5, optim_steps_per_batch=2)
    sizes = []

    def sampler(e):
        e.state.sample = e.state.batch[:3]

    def check(e):
        sizes.append(e.state.sample.shape[0])

    trainer.add_event_handler(RLEvents.SAMPLE_REQUESTED, sampler)
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, check)
    trainer.add_event_handler(RLEvents.EPOCH_DONE(once=2), lambda e: setattr(e.state, "end_optim_epochs", True))
    trainer.run(max_epochs=1)
    assert sizes == [3, 3, 3, 3]
    assert trainer.state.optim_epochs == 2


def test_state_dict_has_rl_counters_and_resumes():
    trainer, _ = _trainer(_batches(4), optim_steps_per_batch=2, epoch_length=4)
    trainer.run(max_epochs=1)
    sd = trainer.state_dict()
    assert {k: sd[k] for k in ("frames", "batches", "optim_steps", "optim_epochs")} == {
        "frames": 32, "batches": 4, "optim_steps": 8, "optim_epochs": 4,
    }
    other, _ = _trainer(_batches(4), optim_steps_per_batch=2, epoch_length=4)
    other.load_state_dict(sd)
    other.run(max_epochs=2)
    assert (other.state.frames, other.state.optim_steps, other.state.iteration) == (64, 16, 8)


def test_rerun_after_completion_resets_counters():
    trainer, _ = _trainer(_batches(2))
    trainer.run(max_epochs=1)
    trainer.run(max_epochs=1)
    assert (trainer.state.frames, trainer.state.batches) == (16, 2)


def test_non_tensordict_batch_is_a_type_error():
    trainer, _ = _trainer([{"x": torch.zeros(2, 3)}])
    with pytest.raises(TypeError, match=r"must yield TensorDicts.*got builtins\.dict"):
        trainer.run(max_epochs=1)


def test_missing_loss_key_names_key_consumer_and_present_keys():
    bad = [TensorDict({"x": torch.zeros(4, 3)}, [4])]
    trainer, _ = _trainer(bad)
    with pytest.raises(KeyError, match=r"MSELoss \(the trainer's loss\) needs key\(s\) \['y'\] but the TensorDict has \['x'\]"):
        trainer.run(max_epochs=1)


def test_loss_without_loss_entries_is_an_error():
    p = torch.nn.Parameter(torch.zeros(()))
    trainer = create_trainer(_batches(1), lambda td: {"value": p * 1}, torch.optim.SGD([p], lr=0.1))
    with pytest.raises(ValueError, match=r"no entry whose key starts with 'loss'; got keys \['value'\]"):
        trainer.run(max_epochs=1)


def test_gradients_at_backward_completed_are_this_steps_only():
    torch.manual_seed(0)
    loss = MSELoss()
    trainer = create_trainer(_batches(1), loss, torch.optim.SGD(loss.parameters(), lr=0.0), optim_steps_per_batch=2)
    seen = []
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: seen.append(loss.net.weight.grad.clone()))
    trainer.run(max_epochs=1)
    # lr 0: the same sample and weights give the same gradient twice, not an accumulated one
    assert len(seen) == 2
    torch.testing.assert_close(seen[1], seen[0])


def test_a_loss_without_graph_is_an_error():
    class Detached(MSELoss):
        def forward(self, td):
            with torch.no_grad():
                return super().forward(td)

    loss = Detached()
    trainer = create_trainer(_batches(1), loss, torch.optim.SGD(loss.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match=r"Detached \(the trainer's loss\) returned \['loss'\] without an autograd "
                                           r"graph \(computed under torch.no_grad\(\) or detached\?\)"):
        trainer.run(max_epochs=1)


@pytest.mark.parametrize(
    "returned, match",
    [
        (lambda p: None, r"must return a TensorDict or a dict of tensors .*; got NoneType"),
        (lambda p: 1.5, r"must return a TensorDict or a dict of tensors .*; got float"),
        (lambda p: {"loss": 1.5}, r"entry 'loss' must be a scalar tensor; got float"),
        (lambda p: {"loss": p * torch.ones(3)}, r"entry 'loss' must be a scalar tensor; got \(3,\)"),
    ],
)
def test_a_loss_returning_the_wrong_thing_is_one_clear_error(returned, match):
    p = torch.nn.Parameter(torch.zeros(()))

    def bad_loss(td):
        return returned(p)

    trainer = create_trainer(_batches(1), bad_loss, torch.optim.SGD([p], lr=0.1))
    with pytest.raises((TypeError, ValueError), match=r"bad_loss \(the trainer's loss\):? " + match):
        trainer.run(max_epochs=1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"total_frames": 0}, "total_frames must be a positive int, got 0"),
        ({"num_epochs": -1}, "num_epochs must be a positive int, got -1"),
        ({"optim_steps_per_batch": 0}, "optim_steps_per_batch must be a positive int"),
        ({"learning_starts": -5}, "learning_starts must be a non-negative int"),
        ({"epoch_length": 0}, "epoch_length must be a positive int"),
        ({"total_frames": 100, "learning_starts": 200}, r"learning_starts \(200\) exceeds total_frames \(100\)"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _trainer(**kwargs)


def test_bad_optimizer_and_collector_types():
    loss = MSELoss()
    with pytest.raises(TypeError, match="argument optimizer must be"):
        create_trainer(_batches(), loss, "adam")
    with pytest.raises(TypeError, match="argument collector must be an iterable"):
        create_trainer(42, loss, torch.optim.SGD(loss.parameters(), lr=0.1))


def test_stock_ignite_timer_terminate_on_nan_and_profiler():
    trainer, _ = _trainer(_batches(3))
    timer = Timer(average=True)
    timer.attach(trainer, start=Events.STARTED, step=Events.ITERATION_COMPLETED)
    profiler = HandlersTimeProfiler()
    profiler.attach(trainer)
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: None)
    trainer.run(max_epochs=1)
    assert timer.step_count == 3 and timer.value() > 0
    results = profiler.get_results()
    names = [row[0] for row in results]
    assert any("<lambda>" in str(n) for n in names)

    values = iter([1.0, float("nan"), 1.0])
    p = torch.nn.Parameter(torch.zeros(()))
    nan_trainer = create_trainer(_batches(3), lambda td: {"loss": p * 0 + next(values)}, torch.optim.SGD([p], lr=0.1))
    nan_trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())
    nan_trainer.run(max_epochs=1)
    assert nan_trainer.state.iteration == 2  # stopped at the NaN output


def test_default_run_length_stops_on_frames_for_infinite_collector():
    class Infinite:
        frames_per_batch = 8

        def __iter__(self):
            while True:
                yield from _batches(1)

    loss = MSELoss()
    trainer = create_trainer(Infinite(), loss, torch.optim.SGD(loss.parameters(), lr=0.1), total_frames=80)
    epochs = []
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda e: epochs.append(e.state.iteration))
    trainer.run()
    assert trainer.state.frames == 80
    assert epochs == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # default epoch_length: a tenth of the run


def test_events_without_handlers_are_not_fired_and_removed_handlers_are_gone():
    """The trainer fires an RL event through Ignite's public fire_event only when a handler is attached
    to it; a handler removed (its handle's remove(), remove_event_handler, an events list) is neither
    called nor listed."""
    from unittest.mock import patch

    trainer, _ = _trainer(_batches(2))
    calls = []
    handle = trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: calls.append("handle"))

    def by_name(engine):
        calls.append("by name")

    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(every=2), by_name)
    listed = trainer.add_event_handler(RLEvents.EPOCH_DONE | RLEvents.SAMPLE_REQUESTED, lambda e: calls.append("list"))
    assert [len(trainer.attached_handlers(e)) for e in (RLEvents.EPOCH_DONE, RLEvents.SAMPLE_REQUESTED)] == [1, 1]
    handle.remove()
    trainer.remove_event_handler(by_name, RLEvents.OPTIM_STEP_DONE)
    listed.remove()
    kept = trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: calls.append("kept"))
    with patch.object(trainer, "fire_event", wraps=trainer.fire_event) as fire_event:
        trainer.run(max_epochs=1)
    fired = {call.args[0] for call in fire_event.call_args_list}
    assert RLEvents.BACKWARD_COMPLETED in fired and fired.isdisjoint(set(RLEvents) - {RLEvents.BACKWARD_COMPLETED})
    assert calls == ["kept", "kept"]
    assert [trainer.attached_handlers(e) for e in RLEvents if e != RLEvents.BACKWARD_COMPLETED] == [[]] * 4
    kept.remove()
    assert all(h.__self__ is trainer for h in trainer.attached_handlers())  # its own: STARTED, EPOCH_COMPLETED


def test_prepend_event_handler_runs_first_keeps_filters_arguments_and_handles():
    trainer, _ = _trainer(_batches(1), optim_steps_per_batch=4)
    order = []
    every2 = trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(every=2),
                                       lambda e: order.append(("every2", e.state.optim_steps)))
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e, tag: order.append((tag, e.state.optim_steps)), "arg")
    trainer.prepend_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: order.append(("first", e.state.optim_steps)))
    trainer.run(max_epochs=1)
    assert order == [("first", 1), ("arg", 1), ("first", 2), ("every2", 2), ("arg", 2),
                     ("first", 3), ("arg", 3), ("first", 4), ("every2", 4), ("arg", 4)]
    every2.remove()  # the handle of a handler attached again still removes it
    assert len(trainer.attached_handlers(RLEvents.OPTIM_STEP_DONE)) == 2
    handlers = trainer.attached_handlers(RLEvents.OPTIM_STEP_DONE)
    with pytest.raises(ValueError, match="Error adding"):  # Ignite refuses it: the others stay as they were
        trainer.prepend_event_handler(RLEvents.OPTIM_STEP_DONE, lambda a, b, c: None)
    assert trainer.attached_handlers(RLEvents.OPTIM_STEP_DONE) == handlers
    order.clear()
    trainer.run(max_epochs=2)
    assert order[:2] == [("first", 5), ("arg", 5)]
    with pytest.raises(TypeError, match="prepend_event_handler: argument event_name must be one event"):
        trainer.prepend_event_handler(RLEvents.OPTIM_STEP_DONE | RLEvents.EPOCH_DONE, lambda e: None)
