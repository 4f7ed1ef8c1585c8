"""SharedWeights in one process: versions, what publish accepts, a load that a publish overlaps."""

import threading

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.collectors.shared_weights import SharedWeights


def test_publish_then_load_copies_once_per_version():
    actor, learner = nn.Linear(3, 2), nn.Linear(3, 2)
    shared = SharedWeights(actor)
    params = TensorDict.from_module(actor)
    assert not shared.load_into(params)  # nothing published yet
    shared.publish(learner.state_dict())  # a state_dict works too
    assert (shared.version, shared.loaded_version) == (1, 0)
    assert shared.load_into(params) and torch.equal(actor.weight, learner.weight)
    assert not shared.load_into(params) and shared.loaded_version == 1
    shared.set_version(7)  # a resumed collector
    assert (shared.version, shared.loaded_version) == (7, 7) and not shared.load_into(params)


def test_publish_refuses_other_structures_without_bumping_the_version():
    shared = SharedWeights(nn.Linear(3, 2), owner="Demo.update")
    with pytest.raises(KeyError, match=r"Demo.update: the weights do not match the policy: missing \['bias'\], "
                                       r"unexpected \[\]"):
        shared.publish(TensorDict({"weight": torch.zeros(2, 3)}, []))
    with pytest.raises(TypeError, match="Demo.update: weights must be a TensorDict, a state_dict, an nn.Module"):
        shared.publish([torch.zeros(2, 3)])
    assert shared.version == 0


def test_a_load_waits_out_a_publish_in_progress():
    actor, learner = nn.Linear(3, 2), nn.Linear(3, 2)
    shared = SharedWeights(actor)
    shared.counters[0] += 1  # a publish in progress (odd sequence number) ...
    loaded = []
    thread = threading.Thread(target=lambda: loaded.append(shared.load_into(TensorDict.from_module(actor))))
    thread.start()
    thread.join(0.2)
    assert thread.is_alive() and not loaded  # ... the loader waits for it
    with torch.no_grad():
        shared.tensors.update_(TensorDict.from_module(learner))
    shared.counters[0] += 1  # complete
    thread.join(5.0)
    assert loaded == [True] and torch.equal(actor.bias, learner.bias) and shared.loaded_version == 1
