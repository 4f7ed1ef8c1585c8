import io

import pytest
import torch

from engine_rl.envs import CounterRNG


def test_reproducible_and_seed_dependent():
    a, b = CounterRNG(8, seed=1), CounterRNG(8, seed=1)
    assert torch.equal(a.words(5), b.words(5))
    assert not torch.equal(CounterRNG(8, seed=2).words(5), CounterRNG(8, seed=1).words(5))
    big = CounterRNG(3, seed=2**64 - 1)  # the whole seed range, high bits included
    assert not torch.equal(big.words(2), CounterRNG(3, seed=2**32 - 1).words(2))


def test_streams_are_per_env():
    rng = CounterRNG(6, seed=0)
    first = rng.words(4)
    assert torch.equal(CounterRNG(2, seed=0).words(4), first[:2])  # independent of num_envs
    assert len(set(first.flatten().tolist())) == first.numel()  # no two envs share draws
    # gymnasium's "copy i gets seed + i" makes seed s copy 1 equal seed s+1 copy 0: not here
    assert not torch.equal(CounterRNG(2, seed=1).words(4)[0], first[1])


def test_index_and_mask_draws_agree_and_advance_only_the_selected_counters():
    by_index, by_mask, plain = CounterRNG(5, seed=3), CounterRNG(5, seed=3), CounterRNG(5, seed=3)
    index = torch.tensor([1, 4])
    mask = torch.zeros(5, dtype=torch.bool)
    mask[index] = True
    drawn = by_index.words(3, index=index)
    full = by_mask.words(3, mask=mask)
    assert drawn.shape == (2, 3) and full.shape == (5, 3)
    assert torch.equal(full[index], drawn)
    assert by_index.counter.tolist() == by_mask.counter.tolist() == [0, 3, 0, 0, 3]
    assert torch.equal(plain.words(3), full)  # unmasked rows were drawn but not consumed
    assert torch.equal(by_mask.words(3)[index], CounterRNG(5, seed=3).words(6)[index][:, 3:])


def test_uniform_range_resolution_and_moments():
    rng = CounterRNG(1000, seed=0)
    for dtype in (torch.float32, torch.float64):
        u = rng.uniform(50, dtype=dtype)
        assert u.dtype == dtype and u.shape == (1000, 50)
        assert u.min() >= 0 and u.max() < 1
        assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
        counts = torch.histc(u.double(), bins=10, min=0, max=1)
        assert (counts - 5000).abs().max() < 300  # ~4 standard deviations
        lag = torch.corrcoef(torch.stack((u[:, :-1].flatten(), u[:, 1:].flatten())))[0, 1]
        assert abs(lag.item()) < 0.01
    assert (rng.uniform(3, dtype=torch.float32) * 2**24).frac().eq(0).all()  # 24-bit floats


def test_state_dict_round_trip_weights_only():
    rng = CounterRNG(4, seed=9)
    rng.words(7)
    buffer = io.BytesIO()
    torch.save(rng.state_dict(), buffer)
    buffer.seek(0)
    restored = CounterRNG(4)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(restored.words(3), rng.words(3))


def test_errors():
    with pytest.raises(RuntimeError, match=r"CounterRNG: call seed\(\) before drawing"):
        CounterRNG(2).words(1)
    with pytest.raises(ValueError, match=r"CounterRNG: seed must be an int in \[0, 2\*\*64\), got 1.5"):
        CounterRNG(2, seed=1.5)
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        CounterRNG(0)
    rng = CounterRNG(2, seed=0)
    with pytest.raises(ValueError, match="pass index or mask, not both"):
        rng.words(1, index=torch.tensor([0]), mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        rng.uniform(1, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"'keys' must be a tensor of shape \(2, 3\)"):
        CounterRNG(3).load_state_dict(rng.state_dict())
