import pytest
import torch

from engine_rl.algos.gae import gae


def _reference(reward, value, next_value, terminated, done, gamma, lmbda):
    """Straight per-step recursion in plain Python floats."""
    n, t = len(reward), len(reward[0])
    adv = [[0.0] * t for _ in range(n)]
    for i in range(n):
        last = 0.0
        for j in reversed(range(t)):
            delta = reward[i][j] + gamma * next_value[i][j] * (0.0 if terminated[i][j] else 1.0) - value[i][j]
            last = delta + gamma * lmbda * (0.0 if done[i][j] else 1.0) * last
            adv[i][j] = last
    return adv


def test_hand_computed_terminated_vs_truncated():
    # one env, 4 steps: step 1 is truncated (time limit), step 3 terminates.
    # gamma = 0.5, lambda = 0.5 -> gamma * lambda = 0.25
    reward = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    value = torch.tensor([[10.0, 20.0, 30.0, 40.0]])
    # V(s'_t): s'_0 = s_1 (20); s'_1 is the true final obs of the truncated episode (V = 8);
    # s'_2 = s_3 (40); s'_3 terminal (its value, 99, must be ignored)
    next_value = torch.tensor([[20.0, 8.0, 40.0, 99.0]])
    terminated = torch.tensor([[False, False, False, True]])
    truncated = torch.tensor([[False, True, False, False]])
    done = terminated | truncated
    adv, target = gae(reward, value, next_value, terminated, done, gamma=0.5, lmbda=0.5)
    # deltas: d0 = 1 + 0.5*20 - 10 = 1
    #         d1 = 2 + 0.5*8  - 20 = -14   (truncation: bootstraps from V(final obs))
    #         d2 = 3 + 0.5*40 - 30 = -7
    #         d3 = 4 + 0            - 40 = -36  (termination: no bootstrap)
    # A3 = -36; A2 = -7 + 0.25 * -36 = -16; A1 = -14 (done: the recursion restarts after it);
    # A0 = 1 + 0.25 * -14 = -2.5
    expected = torch.tensor([[-2.5, -14.0, -16.0, -36.0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(target, expected + value)


def test_truncation_differs_from_termination():
    reward, value = torch.ones(1, 1), torch.zeros(1, 1)
    next_value = torch.full((1, 1), 10.0)
    done = torch.ones(1, 1, dtype=torch.bool)
    trunc, _ = gae(reward, value, next_value, torch.zeros(1, 1, dtype=torch.bool), done, gamma=0.9, lmbda=0.95)
    term, _ = gae(reward, value, next_value, done, done, gamma=0.9, lmbda=0.95)
    assert trunc.item() == pytest.approx(1 + 0.9 * 10) and term.item() == pytest.approx(1.0)


def test_matches_reference_on_random_batch_with_several_envs():
    g = torch.Generator().manual_seed(0)
    n, t = 5, 17
    reward, value, next_value = (torch.randn(n, t, generator=g) for _ in range(3))
    terminated = torch.rand(n, t, generator=g) < 0.1
    done = terminated | (torch.rand(n, t, generator=g) < 0.1)
    adv, target = gae(reward, value, next_value, terminated, done, gamma=0.97, lmbda=0.9)
    ref = torch.tensor(_reference(reward.tolist(), value.tolist(), next_value.tolist(), terminated.tolist(),
                                  done.tolist(), 0.97, 0.9))
    torch.testing.assert_close(adv, ref)
    torch.testing.assert_close(target, ref + value)
    assert adv.is_contiguous() and not adv.requires_grad


def test_lambda_one_is_discounted_return_minus_value_and_zero_is_td_error():
    reward = torch.tensor([[1.0, 1.0, 1.0]])
    value = torch.tensor([[0.5, 0.5, 0.5]])
    next_value = torch.tensor([[0.5, 0.5, 2.0]])  # the last step bootstraps from 2 (not done)
    no = torch.zeros(1, 3, dtype=torch.bool)
    adv1, target1 = gae(reward, value, next_value, no, no, gamma=0.5, lmbda=1.0)
    torch.testing.assert_close(target1, torch.tensor([[1 + 0.5 + 0.25 + 0.125 * 2, 1 + 0.5 + 0.25 * 2, 1 + 0.5 * 2]]))
    adv0, _ = gae(reward, value, next_value, no, no, gamma=0.5, lmbda=0.0)
    torch.testing.assert_close(adv0, reward + 0.5 * next_value - value)


def test_value_with_grad_gives_targets_without_grad():
    value = torch.zeros(2, 3, requires_grad=True)
    no = torch.zeros(2, 3, dtype=torch.bool)
    adv, target = gae(torch.ones(2, 3), value, torch.zeros(2, 3), no, no, gamma=0.9, lmbda=0.9)
    assert not adv.requires_grad and not target.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(gamma=1.5, lmbda=0.9), r"gae: gamma must be in \[0, 1\], got 1.5"),
        (dict(gamma=0.9, lmbda=-0.1), r"gae: lmbda must be in \[0, 1\], got -0.1"),
    ],
)
def test_bad_coefficients(kwargs, match):
    x = torch.zeros(1, 2)
    b = torch.zeros(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        gae(x, x, x, b, b, **kwargs)


def test_bad_shapes_name_the_argument():
    x = torch.zeros(2, 3)
    b = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"gae: reward must have shape \[num_envs, T\], got \(6,\)"):
        gae(x.reshape(-1), x, x, b, b, gamma=0.9, lmbda=0.9)
    with pytest.raises(ValueError, match=r"gae: next_value must have the reward's shape \(2, 3\), got \(3, 2\)"):
        gae(x, x, x.t(), b, b, gamma=0.9, lmbda=0.9)
