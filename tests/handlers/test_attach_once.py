"""Handlers whose second attach to one engine would corrupt data refuse it, naming the handler;
one removed from the engine may be attached again; other engines are unaffected."""

import copy

import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.algos.normalization import RunningMeanStd
from engine_rl.replay import PrioritizedSampler, ReplayBuffer
from handlers import (
    EpisodeStats,
    GradClipper,
    ObservationNormalizer,
    PriorityUpdater,
    ReplayExtender,
    ReplaySampler,
    RewardNormalizer,
    TargetNetUpdater,
    Throughput,
)
from handlers.minibatch import MinibatchSampler

NET = torch.nn.Linear(1, 1)


def _trainer(batches=5):
    data = [TensorDict({"observation": torch.ones(8, 1), ("next", "reward"): torch.ones(8)}, [8])] * batches

    def loss(td):
        return {"loss": ((NET(td["observation"]).squeeze(-1) - td["next", "reward"]) ** 2).mean()}

    return create_trainer(data, loss, torch.optim.SGD(NET.parameters(), lr=0.1))


def test_a_replay_extender_attached_twice_is_refused_and_stores_each_frame_once():
    trainer, buffer = _trainer(), ReplayBuffer(1000)
    extender = ReplayExtender(buffer)
    extender.attach(trainer)
    with pytest.raises(ValueError, match=r"ReplayExtender.attach: this ReplayExtender is already attached to this "
                                         r"engine \(every batch would be stored twice\)"):
        extender.attach(trainer)
    with pytest.raises(ValueError, match="ReplayExtender.attach: this engine already has a ReplayExtender on this "
                                         "ReplayBuffer"):
        ReplayExtender(buffer).attach(trainer)  # another extender on the same buffer
    trainer.run(max_epochs=1)
    assert len(buffer) == 5 * 8  # 40 frames, 40 rows


def test_removed_handlers_can_attach_again_and_other_engines_are_separate():
    trainer, buffer = _trainer(), ReplayBuffer(1000)
    extender = ReplayExtender(buffer)
    extender.attach(trainer).remove()
    extender.attach(trainer)  # the first was removed
    ReplayExtender(buffer).attach(_trainer())  # another engine
    ReplayExtender(ReplayBuffer(10)).attach(trainer)  # another buffer
    ReplaySampler(buffer, 4).attach(trainer)  # another kind of handler on the same buffer


def _handlers():
    buffer = ReplayBuffer(100, sampler=PrioritizedSampler())
    target = copy.deepcopy(NET)
    return [
        ("ReplaySampler", ReplaySampler(buffer, 4), ReplaySampler(buffer, 8)),
        ("PriorityUpdater", PriorityUpdater(buffer), PriorityUpdater(buffer)),
        ("TargetNetUpdater", TargetNetUpdater(NET, target, tau=0.5), TargetNetUpdater(NET, target, tau=0.5)),
        ("ObservationNormalizer", ObservationNormalizer(RunningMeanStd((1,))), None),
        ("RewardNormalizer", RewardNormalizer(gamma=0.99), None),
        ("GradClipper", GradClipper(NET, max_norm=1.0), None),
        ("MinibatchSampler", MinibatchSampler(4), None),
        ("EpisodeStats", EpisodeStats(), None),
        ("Throughput", Throughput(), None),
    ]


@pytest.mark.parametrize("name", [h[0] for h in _handlers()])
def test_every_data_handler_refuses_a_second_attach(name):
    _, handler, other = next(h for h in _handlers() if h[0] == name)
    trainer = _trainer()
    handler.attach(trainer)
    with pytest.raises(ValueError, match=rf"{name}.attach: this {name} is already attached to this engine \("):
        handler.attach(trainer)
    if other is not None:  # another one driving the same buffer or target
        with pytest.raises(ValueError, match=rf"{name}.attach: this engine already has a {name} on this "):
            other.attach(trainer)
