import io
import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.actors import DeterministicActor, TanhGaussianActor, box_bounds


class ConstantHead(nn.Module):
    """Ignores the observation; outputs a learnable [mean, log_std] row for every input row."""

    def __init__(self, mean, log_std):
        super().__init__()
        self.out = nn.Parameter(torch.tensor([*mean, *log_std], dtype=torch.float32))

    def forward(self, obs):
        return self.out.expand(*obs.shape[:-1], -1)


def _actor(mean, log_std, low=None, high=None, **kw):
    d = len(mean)
    low = [-1.0] * d if low is None else low
    high = [1.0] * d if high is None else high
    return TanhGaussianActor(ConstantHead(mean, log_std), low=low, high=high, **kw)


def _obs(n, d=3):
    return TensorDict({"observation": torch.randn(n, d)}, [n])


def _numeric_density(a, mean, std, h=1e-5):
    """p(a) of a = tanh(u), u ~ N(mean, std), by a central difference of the CDF (float64)."""
    a = torch.as_tensor(a, dtype=torch.float64)
    cdf = lambda x: 0.5 * (1 + torch.erf((torch.atanh(x) - mean) / (std * math.sqrt(2.0))))  # noqa: E731
    return (cdf(a + h) - cdf(a - h)) / (2 * h)


def test_actions_stay_within_asymmetric_bounds_even_when_saturated():
    torch.manual_seed(0)
    low, high = [-2.0, 0.0], [2.0, 5.0]
    for mean in ([0.0, 0.0], [50.0, -50.0], [-50.0, 50.0]):
        actor = _actor(mean, [1.0, 1.0], low, high)
        action = actor(_obs(1000))["action"]
        assert action.shape == (1000, 2)
        assert bool((action >= torch.tensor(low)).all() and (action <= torch.tensor(high)).all())
    # centred mean: actions spread over the box, centred on its middle
    action = _actor([0.0, 0.0], [0.5, 0.5], low, high)(_obs(4000))["action"]
    torch.testing.assert_close(action.mean(0), torch.tensor([0.0, 2.5]), atol=0.1, rtol=0)
    assert float(action[:, 1].min()) < 1.0 and float(action[:, 1].max()) > 4.0


def test_scale_and_unscale_are_inverse_and_map_unit_box_to_bounds():
    actor = _actor([0.0, 0.0], [0.0, 0.0], [-2.0, 0.0], [2.0, 5.0])
    unit = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    torch.testing.assert_close(actor.scale(unit), torch.tensor([[-2.0, 0.0], [2.0, 5.0], [0.0, 2.5]]))
    torch.testing.assert_close(actor.unscale(actor.scale(unit)), unit)


@pytest.mark.parametrize("mean,log_std", [(0.0, 0.0), (0.7, -0.5), (-1.5, 0.8)])
def test_squashed_log_prob_matches_numeric_density(mean, log_std):
    actor = _actor([mean], [log_std])
    a = torch.tensor([[-0.95], [-0.5], [0.0], [0.3], [0.9]])
    got = actor.log_prob(torch.zeros(5, 3), a).double()
    expected = _numeric_density(a.squeeze(-1), mean, math.exp(log_std)).log()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_sampled_log_prob_is_the_density_of_the_sampled_action_in_two_dims():
    torch.manual_seed(1)
    mean, log_std = [0.4, -1.0], [-0.3, 0.5]
    actor = _actor(mean, log_std)
    unit, log_prob = actor.sample(torch.zeros(200, 3))
    assert unit.shape == (200, 2) and log_prob.shape == (200,)
    # independent dimensions: the joint density is the product of the 1-D numeric densities
    expected = sum(
        _numeric_density(unit[:, i].double().clamp(-0.999, 0.999), mean[i], math.exp(log_std[i])).log()
        for i in range(2)
    )
    keep = unit.abs().amax(-1) < 0.999  # away from the edges, where the finite difference is poor
    assert keep.sum() > 150
    torch.testing.assert_close(log_prob.double()[keep], expected[keep], atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(actor.log_prob(torch.zeros(200, 3), unit)[keep], log_prob[keep], atol=1e-3, rtol=1e-3)


def test_log_prob_stays_finite_when_tanh_saturates():
    actor = _actor([30.0], [-20.0])  # u ~ 30: tanh(u) rounds to 1.0 in float32
    unit, log_prob = actor.sample(torch.zeros(4, 3))
    assert bool((unit == 1.0).all()) and bool(torch.isfinite(log_prob).all())


def test_sample_is_reparameterized():
    actor = _actor([0.1], [-0.2])
    unit, log_prob = actor.sample(torch.zeros(8, 3))
    (unit.sum() + log_prob.sum()).backward()
    assert actor.net.out.grad is not None and bool((actor.net.out.grad != 0).all())


def test_log_std_is_clamped():
    actor = _actor([0.0], [10.0], log_std_min=-5.0, log_std_max=2.0)
    assert actor.distribution(torch.zeros(1, 3))[1].item() == 2.0
    actor = _actor([0.0], [-10.0], log_std_min=-5.0, log_std_max=2.0)
    assert actor.distribution(torch.zeros(1, 3))[1].item() == -5.0


def test_return_log_prob_writes_log_prob():
    td = _actor([0.0], [0.0], return_log_prob=True)(_obs(6))
    assert sorted(td.keys()) == ["action", "log_prob", "observation"] and td["log_prob"].shape == (6,)
    assert "log_prob" not in _actor([0.0], [0.0])(_obs(6)).keys()


def test_deterministic_policy_acts_with_the_mean_and_leaves_the_training_policy_stochastic():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
    policy = actor.deterministic()
    assert isinstance(policy, DeterministicActor) and policy.actor is actor
    obs = torch.randn(5, 3)
    mean, _ = actor.distribution(obs)
    torch.testing.assert_close(policy(TensorDict({"observation": obs}, [5]))["action"], 2.0 * torch.tanh(mean))
    a1 = actor(TensorDict({"observation": obs}, [5]))["action"]
    a2 = actor(TensorDict({"observation": obs}, [5]))["action"]
    assert not torch.equal(a1, a2)
    # the evaluation policy follows training updates (same weights)
    with torch.no_grad():
        actor.net[-1].bias.add_(1.0)
    assert not torch.equal(policy(TensorDict({"observation": obs}, [5]))["action"], 2.0 * torch.tanh(mean))
    assert set(policy.state_dict()) == {f"actor.{k}" for k in actor.state_dict()}


def test_build_rejects_a_discrete_action_space():
    with pytest.raises(ValueError, match=r"TanhGaussianActor needs a continuous \(Box\) action space; got Discrete"):
        TanhGaussianActor.build(4, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="demo needs finite action bounds"):
        box_bounds(gym.spaces.Box(-float("inf"), 1.0, (1,)), owner="demo")


def test_constructor_checks_bounds():
    with pytest.raises(ValueError, match="TanhGaussianActor: need finite bounds with high > low"):
        _actor([0.0], [0.0], low=[1.0], high=[1.0])
    with pytest.raises(ValueError, match="TanhGaussianActor: low and high must have the same non-empty shape"):
        TanhGaussianActor(nn.Linear(3, 2), low=[-1.0], high=[1.0, 1.0])


def test_actor_state_dict_round_trips_with_weights_only():
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))
    buf = io.BytesIO()
    torch.save(actor.state_dict(), buf)
    buf.seek(0)
    other = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))
    other.load_state_dict(torch.load(buf, weights_only=True))
    obs = torch.randn(4, 3)
    torch.testing.assert_close(other.mean_action(obs), actor.mean_action(obs))
