import copy
import io

import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer
from handlers import TargetNetUpdater


def _batches(n):
    g = torch.Generator().manual_seed(0)
    return [
        TensorDict({"x": torch.randn(8, 3, generator=g), "y": torch.randn(8, 1, generator=g)}, [8]) for _ in range(n)
    ]


def _setup(n=3, steps=3, **kw):
    torch.manual_seed(0)
    online = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    target = copy.deepcopy(online)

    def loss(td):
        return {"loss": ((online(td["x"]) - td["y"]) ** 2).mean()}

    trainer = create_trainer(
        _batches(n), loss, torch.optim.SGD(online.parameters(), lr=0.1), optim_steps_per_batch=steps, **kw
    )
    return trainer, online, target


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_hard_update_every_3_steps_happens_exactly_at_steps_3_6_9():
    trainer, online, target = _setup(n=4, steps=3)
    updater = TargetNetUpdater(online, target, every=3)
    updater.attach(trainer)
    synced = []
    trainer.add_event_handler(
        RLEvents.OPTIM_STEP_DONE, lambda e: synced.append((e.state.optim_steps, _equal(online, target)))
    )
    trainer.run(max_epochs=1)
    assert [s for s, eq in synced if eq] == [3, 6, 9, 12]
    assert updater.num_updates == 4


def test_soft_update_matches_manual_polyak_every_step():
    trainer, online, target = _setup(n=2, steps=3)
    tau = 0.2
    TargetNetUpdater(online, target, tau=tau).attach(trainer)
    expected = [p.detach().clone() for p in target.parameters()]
    errors = []

    def check(engine):
        for i, p in enumerate(online.parameters()):
            expected[i] = (1 - tau) * expected[i] + tau * p.detach()
        errors.append(max((a - b).abs().max().item() for a, b in zip(expected, target.parameters())))

    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, check)
    trainer.run(max_epochs=1)
    assert len(errors) == 6 and max(errors) < 1e-6
    assert not _equal(online, target)


def test_soft_update_every_2_and_attach_override():
    trainer, online, target = _setup(n=2, steps=3)
    updater = TargetNetUpdater(online, target, tau=0.5, every=5)
    updater.attach(trainer, every=2)  # attach's every wins over the constructor's
    trainer.run(max_epochs=1)
    assert updater.num_updates == 3


def test_updates_on_another_event():
    trainer, online, target = _setup(n=3, steps=2)
    updater = TargetNetUpdater(online, target)
    updater.attach(trainer, event=Events.ITERATION_COMPLETED)
    trainer.run(max_epochs=1)
    assert updater.num_updates == 3 and _equal(online, target)


def test_schedule_survives_a_resume():
    trainer, online, target = _setup(n=2, steps=2, epoch_length=2)
    updater = TargetNetUpdater(online, target, every=3)
    updater.attach(trainer)
    trainer.run(max_epochs=1)  # 4 optim steps: update at 3
    assert updater.num_updates == 1
    sd = trainer.state_dict()
    buf = io.BytesIO()
    torch.save(updater.state_dict(), buf)
    buf.seek(0)

    trainer2, online2, target2 = _setup(n=2, steps=2, epoch_length=2)
    updater2 = TargetNetUpdater(online2, target2, every=3)
    updater2.load_state_dict(torch.load(buf, weights_only=True))
    updater2.attach(trainer2)
    steps = []
    trainer2.add_event_handler(
        RLEvents.OPTIM_STEP_DONE, lambda e: _equal(online2, target2) and steps.append(e.state.optim_steps)
    )
    trainer2.load_state_dict(sd)
    trainer2.run(max_epochs=2)  # optim steps 5..8: update at 6
    assert steps == [6]
    assert updater2.num_updates == 2


@pytest.mark.parametrize("tau", [0.0, 1.01, -1, "0.5"])
def test_bad_tau(tau):
    with pytest.raises(ValueError, match=r"TargetNetUpdater: argument tau must be a number in \(0, 1\]"):
        TargetNetUpdater(torch.nn.Linear(2, 1), torch.nn.Linear(2, 1), tau=tau)


def test_mismatch_and_bad_every():
    with pytest.raises(ValueError, match=r"HardUpdate: parameter 'weight' has shape \(1, 2\) in source but \(1, 3\)"):
        TargetNetUpdater(torch.nn.Linear(2, 1), torch.nn.Linear(3, 1))
    with pytest.raises(ValueError, match=r"SoftUpdate: parameter 'bias' has shape \(1,\) in source but \(2,\)"):
        TargetNetUpdater(torch.nn.Linear(2, 1), _bias_mismatch(), tau=0.1)
    with pytest.raises(ValueError, match="TargetNetUpdater: argument every must be a positive int, got 0"):
        TargetNetUpdater(torch.nn.Linear(2, 1), torch.nn.Linear(2, 1), every=0)
    trainer, online, target = _setup(n=1)
    with pytest.raises(ValueError, match=r"TargetNetUpdater.attach: argument every=2 needs a plain event"):
        TargetNetUpdater(online, target).attach(trainer, event=RLEvents.OPTIM_STEP_DONE(every=3), every=2)


def _bias_mismatch():
    m = torch.nn.Linear(2, 1)
    m.bias = torch.nn.Parameter(torch.zeros(2))
    return m
