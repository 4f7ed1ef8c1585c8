import io

import numpy as np
import pytest
import torch

from engine_rl.replay import PrioritizedSampler, UniformSampler


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _prioritized(size, capacity=None, **kwargs):
    sampler = PrioritizedSampler(**kwargs)
    sampler.bind(capacity or size)
    sampler.extend(torch.arange(size))
    return sampler


def _frequencies(sampler, size, *, calls=100, batch_size=1000, seed=0):
    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros(size)
    for _ in range(calls):
        index, _ = sampler.sample(size, batch_size, generator=generator)
        counts += np.bincount(index.numpy(), minlength=size)
    return counts


def _chi_square(counts, probabilities):
    expected = counts.sum() * probabilities
    return ((counts - expected) ** 2 / expected).sum()


# chi-square 99.9% quantile with 9 degrees of freedom; stratified draws are tighter than multinomial ones
CHI2_9DF_999 = 27.88


def test_uniform_sampler_frequencies_and_weights():
    sampler = UniformSampler()
    sampler.bind(20)
    counts = _frequencies(sampler, 10, calls=20)
    assert _chi_square(counts, np.full(10, 0.1)) < CHI2_9DF_999
    index, weight = sampler.sample(10, 7, generator=torch.Generator().manual_seed(1))
    assert index.dtype == torch.int64 and weight.dtype == torch.float32
    assert weight.tolist() == [1.0] * 7 and sampler.state_dict() == {}


def test_prioritized_frequencies_follow_p_alpha():
    sampler = _prioritized(10, alpha=0.6, eps=1e-6)
    td_error = torch.arange(1.0, 11.0)
    sampler.update_priority(torch.arange(10), td_error)
    counts = _frequencies(sampler, 10)
    p = (td_error.double().numpy() + 1e-6) ** 0.6
    assert _chi_square(counts, p / p.sum()) < CHI2_9DF_999
    np.testing.assert_allclose(counts / counts.sum(), p / p.sum(), rtol=0.02)


def test_new_items_get_max_priority_and_alpha_zero_is_uniform():
    sampler = _prioritized(4, capacity=10, alpha=1.0)
    assert sampler.max_priority == 1.0
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([3.0, 0.5]))
    assert sampler.max_priority == pytest.approx(3.0 + 1e-6)
    sampler.extend(torch.tensor([4, 5]))
    np.testing.assert_allclose(sampler.tree[[4, 5]], [3.0 + 1e-6] * 2)
    uniform = _prioritized(10, alpha=0.0)
    uniform.update_priority(torch.arange(10), torch.arange(10.0) * 100)
    assert _chi_square(_frequencies(uniform, 10, calls=20), np.full(10, 0.1)) < CHI2_9DF_999


def test_importance_weights_match_numpy_formula():
    n, beta, alpha, eps = 50, 0.7, 0.6, 1e-3
    sampler = _prioritized(n, capacity=64, alpha=alpha, beta=beta, eps=eps)
    td_error = torch.rand(n, generator=torch.Generator().manual_seed(3)) * 5
    sampler.update_priority(torch.arange(n), td_error)
    index, weight = sampler.sample(n, 256, generator=torch.Generator().manual_seed(4))
    p = (td_error.double().numpy() + eps) ** alpha
    probability = p / p.sum()
    w_all = (n * probability) ** -beta
    expected = w_all[index.numpy()] / w_all.max()
    assert weight.dtype == torch.float32
    np.testing.assert_allclose(weight.numpy(), expected, rtol=1e-5)
    assert weight.max() <= 1.0


def test_update_priority_changes_frequencies_and_weights():
    sampler = _prioritized(10, alpha=1.0, beta=1.0)
    generator = torch.Generator().manual_seed(0)
    _, weight = sampler.sample(10, 100, generator=generator)
    assert torch.all(weight == 1.0)  # all items at the initial max priority
    before = _frequencies(sampler, 10, calls=20)
    assert _chi_square(before, np.full(10, 0.1)) < CHI2_9DF_999
    sampler.update_priority(torch.tensor([7]), torch.tensor([9.0]))  # item 7: 9 vs 1 for the others
    after = _frequencies(sampler, 10, calls=20)
    expected = np.full(10, 1.0)
    expected[7] = 9.0 + 1e-6
    assert _chi_square(after, expected / expected.sum()) < CHI2_9DF_999
    index, weight = sampler.sample(10, 100, generator=generator)
    np.testing.assert_allclose(weight[index == 7].numpy(), 1 / (9.0 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(weight[index != 7].numpy(), 1.0, rtol=1e-6)


def test_update_priority_accepts_any_float_device_shape_and_negative_td_error():
    sampler = _prioritized(6, alpha=1.0, eps=0.5)
    sampler.update_priority(torch.tensor([[0], [1], [1]]), torch.tensor([[-2.0], [1.0], [3.0]], dtype=torch.float16))
    np.testing.assert_allclose(sampler.tree[[0, 1, 2]], [2.5, 3.5, 1.0])  # |p| + eps; last duplicate wins
    assert sampler.tree.total == pytest.approx(2.5 + 3.5 + 4 * 1.0)


def test_extend_with_scattered_positions():
    sampler = PrioritizedSampler(alpha=1.0)
    sampler.bind(10)
    sampler.extend(torch.tensor([8, 9, 0, 1]))  # a wrapped run: filled by slices
    sampler.update_priority(torch.tensor([8]), torch.tensor([4.0]))
    sampler.extend(torch.tensor([5, 2, 7]))  # scattered: point updates
    np.testing.assert_allclose(sampler.tree.leaves, [1, 1, 4, 0, 0, 4, 0, 4, 4, 1], rtol=1e-5)


def test_beta_annealing_linear_then_constant():
    sampler = _prioritized(4, alpha=1.0, beta=0.4, beta_end=1.0, beta_annealing_steps=4)
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 4.0]))
    generator = torch.Generator().manual_seed(0)
    betas = []
    for expected_beta in [0.4, 0.55, 0.7, 0.85, 1.0, 1.0]:
        assert sampler.beta == pytest.approx(expected_beta)
        betas.append(sampler.beta)
        index, weight = sampler.sample(4, 64, generator=generator)
        p = np.array([1.0, 1.0, 1.0, 4.0]) + 1e-6
        np.testing.assert_allclose(weight.numpy(), (p[index.numpy()] / p.min()) ** -expected_beta, rtol=1e-5)
    assert PrioritizedSampler(beta=0.3).beta == 0.3


def test_state_dict_round_trip_gives_identical_samples():
    sampler = _prioritized(30, capacity=40, beta_annealing_steps=10)
    sampler.update_priority(torch.arange(30), torch.linspace(0, 3, 30))
    generator = torch.Generator().manual_seed(0)
    sampler.sample(30, 8, generator=generator)
    state = _roundtrip(sampler.state_dict())
    restored = PrioritizedSampler(beta_annealing_steps=10)
    restored.bind(40)
    restored.load_state_dict(state)
    assert restored.beta == sampler.beta and restored.max_priority == sampler.max_priority
    for _ in range(3):
        g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        a, b = sampler.sample(30, 16, generator=g1), restored.sample(30, 16, generator=g2)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(IndexError, match=r"index must point at stored items \[0, 30\)"):
        restored.update_priority(torch.tensor([30]), torch.tensor([1.0]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": -0.1}, "alpha must be >= 0"),
        ({"beta": -1.0}, "beta must be >= 0"),
        ({"beta_end": float("nan")}, "beta_end must be a finite number"),
        ({"eps": 0.0}, "eps must be > 0"),
        ({"eps": -1e-6}, "eps must be > 0"),
        ({"beta_annealing_steps": -1}, "beta_annealing_steps must be an int >= 0"),
        ({"beta_annealing_steps": 1.5}, "beta_annealing_steps must be an int >= 0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"PrioritizedSampler: {message}"):
        PrioritizedSampler(**kwargs)


def test_bad_update_priority_and_binding():
    with pytest.raises(RuntimeError, match="not bound"):
        PrioritizedSampler().extend(torch.arange(2))
    sampler = _prioritized(3, capacity=5)
    with pytest.raises(RuntimeError, match="already bound"):
        sampler.bind(5)
    with pytest.raises(ValueError, match=r"priority needs one value per index \(2\), got 3"):
        sampler.update_priority(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(IndexError, match=r"index must point at stored items \[0, 3\)"):
        sampler.update_priority(torch.tensor([3]), torch.ones(1))
    with pytest.raises(ValueError, match="priority must be finite"):
        sampler.update_priority(torch.tensor([0]), torch.tensor([float("inf")]))
    sampler.update_priority(torch.tensor([], dtype=torch.int64), torch.tensor([]))  # empty: no-op
    assert sampler.tree.total == 3.0
