import io

import numpy as np
import pytest
import torch

from engine_rl.algos.normalization import Normalizer, ReturnScaler, RunningMeanStd, merge_moments


def _roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_running_mean_std_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 3)) for n in (5, 1, 17, 40)]
    rms = RunningMeanStd((3,), epsilon=0.0)
    for b in batches:
        rms.update(torch.as_tensor(b))
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-12)
    assert rms.count.item() == len(data)
    np.testing.assert_allclose(rms.std.numpy(), data.std(0), rtol=1e-12)


def test_one_batch_equals_item_by_item_updates():
    x = torch.tensor([1.0, -2.0, 7.5, 0.25, 3.0], dtype=torch.float64)
    whole, single = RunningMeanStd(), RunningMeanStd()
    whole.update(x)
    for v in x:
        single.update(v.reshape(1))
    torch.testing.assert_close(whole.mean, single.mean)
    torch.testing.assert_close(whole.var, single.var)


def test_pseudo_count_weighs_the_prior():
    # epsilon = 1e-4 items of mean 0, var 1 (Stable-Baselines3's default), then [2, 4]
    rms = RunningMeanStd(epsilon=1e-4)
    rms.update(torch.tensor([2.0, 4.0]))
    n0, n = 1e-4, 2.0
    mean = 3.0 * n / (n0 + n)
    var = (1.0 * n0 + 1.0 * n + 3.0**2 * n0 * n / (n0 + n)) / (n0 + n)
    assert rms.mean.item() == pytest.approx(mean, rel=1e-12) and rms.var.item() == pytest.approx(var, rel=1e-12)


def test_ema_statistics_against_numpy():
    batches = [np.array([1.0, 3.0]), np.array([10.0, 10.0, 16.0]), np.array([-4.0])]
    rms = RunningMeanStd(epsilon=0.0, ema=0.9)
    for b in batches:
        rms.update(torch.as_tensor(b))
    mean, second = batches[0].mean(), (batches[0] ** 2).mean()  # the first batch sets them
    for b in batches[1:]:
        mean = 0.9 * mean + 0.1 * b.mean()
        second = 0.9 * second + 0.1 * (b**2).mean()
    assert rms.mean.item() == pytest.approx(mean) and rms.var.item() == pytest.approx(second - mean**2)


def test_merge_moments_ignores_empty_batches_and_checks_shapes():
    m, v, n = torch.zeros(2), torch.ones(2), torch.tensor(3.0)
    assert merge_moments(m, v, n, torch.zeros(0, 2)) == (m, v, n)
    with pytest.raises(ValueError, match=r"RunningMeanStd: update expects items of shape \(2,\), got .* \(4, 3\)"):
        RunningMeanStd((2,)).update(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"RunningMeanStd: argument ema must be None or a decay in \(0, 1\), got 1.0"):
        RunningMeanStd(ema=1.0)


def test_running_mean_std_state_dict_roundtrip():
    rms = RunningMeanStd((2,))
    rms.update(torch.randn(10, 2))
    other = RunningMeanStd((2,))
    other.load_state_dict(_roundtrip(rms.state_dict()))
    assert torch.equal(other.mean, rms.mean) and torch.equal(other.var, rms.var) and torch.equal(other.count, rms.count)
    with pytest.raises(KeyError, match=r"RunningMeanStd.load_state_dict: missing key\(s\) \['count'\]"):
        other.load_state_dict({"mean": rms.mean, "var": rms.var})


def test_normalizer_transform_clip_and_frozen():
    norm = Normalizer((2,), clip=3.0, eps=0.0, epsilon=0.0)
    data = torch.tensor([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0]])
    norm.update(data)
    mean, std = data.double().mean(0), data.double().std(0, correction=0)
    x = torch.tensor([[2.0, 25.0], [100.0, -100.0]])
    expected = ((x.double() - mean) / std).clamp(-3, 3).float()
    torch.testing.assert_close(norm(x), expected)
    assert norm(x).dtype == torch.float32
    norm.frozen = True
    before = norm.state_dict()
    norm.update(torch.full((5, 2), 1e3))
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())


def test_normalizer_forward_never_changes_statistics():
    norm = Normalizer((1,))
    norm.update(torch.tensor([[1.0], [2.0]]))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    norm.eval()
    norm(torch.randn(50, 1))
    norm.train()
    norm(torch.randn(50, 1))
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())


def test_normalizer_state_dict_roundtrip_refreshes_the_transform():
    norm = Normalizer((3,))
    norm.update(torch.randn(20, 3) * 5 + 2)
    state = _roundtrip(norm.state_dict())
    assert set(state) == {"mean", "var", "count"}  # the float32 shift/scale are derived, not saved
    fresh = Normalizer((3,))
    fresh.load_state_dict(state)
    x = torch.randn(4, 3)
    torch.testing.assert_close(fresh(x), norm(x))


def _discounted(rewards, dones, gamma, carry):
    """Reference: per env, G <- gamma * G + r; reset after done."""
    out = np.zeros_like(rewards)
    g = carry.copy()
    for t in range(rewards.shape[1]):
        g = gamma * g + rewards[:, t]
        out[:, t] = g
        g = np.where(dones[:, t], 0.0, g)
    return out, g


def test_return_scaler_statistics_against_numpy_on_a_known_sequence():
    gamma, eps = 0.9, 1e-8
    r1 = np.array([[1.0, 0.0, 2.0, 1.0], [0.5, 0.5, -1.0, 3.0]])
    d1 = np.array([[False, True, False, False], [False, False, False, True]])
    r2 = np.array([[1.0, 1.0, 0.0], [2.0, 0.0, 1.0]])
    d2 = np.array([[False, False, True], [True, False, False]])
    scaler = ReturnScaler(gamma=gamma, clip=None, eps=eps, epsilon=0.0)

    ret1, carry = _discounted(r1, d1, gamma, np.zeros(2))
    out1 = scaler(torch.tensor(r1, dtype=torch.float32), torch.tensor(d1))
    assert scaler.stats.var.item() == pytest.approx(ret1.var(), rel=1e-12)
    np.testing.assert_allclose(out1.numpy(), r1 / np.sqrt(ret1.var() + eps), rtol=1e-6)

    ret2, carry = _discounted(r2, d2, gamma, carry)  # the running returns continue across blocks
    out2 = scaler(torch.tensor(r2, dtype=torch.float32), torch.tensor(d2))
    all_returns = np.concatenate([ret1.ravel(), ret2.ravel()])
    assert scaler.stats.mean.item() == pytest.approx(all_returns.mean(), rel=1e-12)
    assert scaler.stats.var.item() == pytest.approx(all_returns.var(), rel=1e-12)
    np.testing.assert_allclose(out2.numpy(), r2 / np.sqrt(all_returns.var() + eps), rtol=1e-6)
    np.testing.assert_allclose(scaler.returns.numpy(), carry)


def test_return_scaler_clamps_and_roundtrips():
    scaler = ReturnScaler(gamma=0.99, clip=0.5)
    out = scaler(torch.tensor([[1.0, -1.0, 100.0]]), torch.zeros(1, 3, dtype=torch.bool))
    assert out.abs().max().item() == pytest.approx(0.5)
    other = ReturnScaler(gamma=0.99, clip=0.5)
    other.load_state_dict(_roundtrip(scaler.state_dict()))
    assert torch.equal(other.returns, scaler.returns) and torch.equal(other.stats.var, scaler.stats.var)
    fresh = ReturnScaler(gamma=0.99)
    fresh.load_state_dict(_roundtrip(fresh.state_dict()))  # before any call: returns is None
    assert fresh.returns is None


def test_return_scaler_errors():
    with pytest.raises(ValueError, match=r"ReturnScaler: argument gamma must be in \[0, 1\], got 2"):
        ReturnScaler(gamma=2)
    with pytest.raises(ValueError, match=r"ReturnScaler: reward and done must both have shape \[num_envs, T\]"):
        ReturnScaler(gamma=0.9)(torch.zeros(3), torch.zeros(3, dtype=torch.bool))
