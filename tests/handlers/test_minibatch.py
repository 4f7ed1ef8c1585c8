import io

import pytest
import torch
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer
from handlers.minibatch import MinibatchSampler


def _data(n_batches=2, n=2, t=8):
    return [
        TensorDict({"x": torch.arange(n * t, dtype=torch.float32).reshape(n, t) + 100 * b,
                    "junk": torch.zeros(n, t)}, [n, t])
        for b in range(n_batches)
    ]


def _run(sampler, data, num_epochs, steps):
    w = torch.nn.Parameter(torch.zeros(()))
    samples = []

    def loss(td):
        samples.append(td)
        return {"loss": w * td["x"].sum()}

    trainer = create_trainer(data, loss, torch.optim.SGD([w], lr=0.0), num_epochs=num_epochs,
                             optim_steps_per_batch=steps)
    sampler.attach(trainer)
    trainer.run(max_epochs=1)
    return samples


def test_each_epoch_is_one_pass_over_the_batch_reshuffled_every_epoch():
    samples = _run(MinibatchSampler(4, seed=0), _data(), num_epochs=3, steps=4)
    assert len(samples) == 2 * 3 * 4 and all(s.batch_size == (4,) for s in samples)
    epochs = [torch.cat([s["x"] for s in samples[i:i + 4]]) for i in range(0, 24, 4)]
    for e, epoch in enumerate(epochs):
        offset = 100 * (e // 3)  # epochs 0-2 see batch 0, epochs 3-5 batch 1
        assert sorted(epoch.tolist()) == [float(i + offset) for i in range(16)]
    assert not torch.equal(epochs[0], epochs[1])  # a new permutation per epoch


def test_keys_restrict_the_samples():
    samples = _run(MinibatchSampler(8, keys=["x"], seed=0), _data(1), num_epochs=1, steps=2)
    assert set(samples[0].keys()) == {"x"}


def test_full_batch_needs_no_gather():
    data = _data(1)
    samples = _run(MinibatchSampler(16, seed=0), data, num_epochs=3, steps=1)
    assert all(torch.equal(s["x"], data[0]["x"].reshape(-1)) for s in samples)


def test_more_steps_than_minibatches_start_a_new_permutation():
    samples = _run(MinibatchSampler(6, seed=0), _data(1), num_epochs=1, steps=4)  # 16 // 6 = 2 per pass
    first, second = torch.cat([s["x"] for s in samples[:2]]), torch.cat([s["x"] for s in samples[2:]])
    assert len(set(first.tolist())) == 12 and len(set(second.tolist())) == 12


def test_seeded_and_resumable():
    a, b = MinibatchSampler(4, seed=3), MinibatchSampler(4, seed=3)
    xa = [s["x"] for s in _run(a, _data(1), num_epochs=2, steps=4)]
    xb = [s["x"] for s in _run(b, _data(1), num_epochs=2, steps=4)]
    assert all(torch.equal(p, q) for p, q in zip(xa, xb))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    c = MinibatchSampler(4, seed=99)
    c.load_state_dict(torch.load(buf, weights_only=True))
    xc = [s["x"] for s in _run(c, _data(1), num_epochs=1, steps=4)]
    xa2 = [s["x"] for s in _run(a, _data(1), num_epochs=1, steps=4)]
    assert all(torch.equal(p, q) for p, q in zip(xc, xa2))


def test_errors():
    with pytest.raises(ValueError, match="MinibatchSampler: argument batch_size must be a positive int, got 0"):
        MinibatchSampler(0)
    with pytest.raises(KeyError, match=r"MinibatchSampler needs key\(s\) \['advantage'\]"):
        _run(MinibatchSampler(4, keys=["x", "advantage"]), _data(1), num_epochs=1, steps=1)
    with pytest.raises(RuntimeError, match="MinibatchSampler: no batch yet"):
        MinibatchSampler(4).sample()
    with pytest.raises(KeyError, match="MinibatchSampler.load_state_dict: missing key 'rng_state'"):
        MinibatchSampler(4).load_state_dict({})


def test_fires_on_the_named_events():
    sampler = MinibatchSampler(4, seed=0)
    trainer = create_trainer(_data(1), lambda td: {"loss": torch.zeros((), requires_grad=True)},
                             torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=0.0))
    sampler.attach(trainer)
    assert trainer.has_event_handler(sampler._on_sample_requested, RLEvents.SAMPLE_REQUESTED)
    assert trainer.has_event_handler(sampler._on_epoch_done, RLEvents.EPOCH_DONE)


def test_whole_rows_serve_each_env_row_whole_and_cover_the_batch_each_epoch():
    from tensordict import TensorDict
    from engine_rl import create_trainer

    w = torch.nn.Parameter(torch.zeros(()))
    batch = TensorDict({"x": torch.arange(24.0).reshape(4, 6)}, [4, 6])  # 4 env rows of 6 steps
    seen = []

    def loss(td):
        seen.append(td["x"].clone())
        return {"loss": w * td["x"].sum()}

    trainer = create_trainer([batch], loss, torch.optim.SGD([w], lr=0.0), num_epochs=2, optim_steps_per_batch=2)
    MinibatchSampler(12, seed=0, whole_rows=True).attach(trainer)
    trainer.run(max_epochs=1)
    assert [tuple(s.shape) for s in seen] == [(2, 6)] * 4
    for sample in seen:  # rows are consecutive steps of one env copy
        assert all(row.tolist() == [row[0].item() + i for i in range(6)] and row[0] % 6 == 0 for row in sample)
    assert sorted(r[0].item() for s in seen[:2] for r in s) == sorted(r[0].item() for s in seen[2:] for r in s) == [0, 6, 12, 18]


def test_whole_rows_need_a_batch_size_that_is_a_multiple_of_the_rows_length():
    from tensordict import TensorDict

    sampler = MinibatchSampler(10, whole_rows=True)
    with pytest.raises(ValueError, match=r"^MinibatchSampler: whole_rows needs a \[num_envs, T\] batch and a batch_size "
                                         r"that is a multiple of T; got batch shape \(4, 6\) and batch_size 10$"):
        sampler._load(TensorDict({"x": torch.zeros(4, 6)}, [4, 6]), 1)
