import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers.kl_stop import KLEarlyStop, kl_exceeded


def _trainer(kls, num_epochs=4, batches=2):
    w = torch.nn.Parameter(torch.zeros(()))
    it = iter(kls)

    def loss(td):
        return {"loss": w * 0.0, "approx_kl": torch.tensor(next(it))}

    data = [TensorDict({"x": torch.zeros(2)}, [2])] * batches
    return create_trainer(data, loss, torch.optim.SGD([w], lr=0.1), num_epochs=num_epochs)


def test_stops_the_epochs_of_a_batch_and_resets_for_the_next():
    # batch 1: 0.01, 0.05 (> 1.5 * 0.02) -> stop after epoch 2; batch 2: runs all 4 epochs
    trainer = _trainer([0.01, 0.05, 0.0, 0.0, 0.0, 0.0])
    stop = KLEarlyStop(0.02).attach(trainer)
    epochs_per_batch = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED,
                              lambda e: epochs_per_batch.append(e.state.metrics["optim_epochs_run"]))
    trainer.run(max_epochs=1)
    assert epochs_per_batch == [2, 4]
    assert trainer.state.optim_steps == 6 and stop.num_stops == 1
    assert trainer.state.metrics["approx_kl"] == 0.0
    assert stop.state_dict() == {"num_stops": 1}


def test_threshold():
    assert kl_exceeded(0.031, 0.02) and not kl_exceeded(0.03, 0.02) and kl_exceeded(0.021, 0.02, factor=1.0)


def test_errors():
    with pytest.raises(ValueError, match="KLEarlyStop: argument target_kl must be a positive number, got 0"):
        KLEarlyStop(0)
    trainer = _trainer([0.0] * 8)
    KLEarlyStop(0.01, key="kl").attach(trainer)
    with pytest.raises(KeyError, match="KLEarlyStop: the loss output has no 'kl'; it has"):
        trainer.run(max_epochs=1)
