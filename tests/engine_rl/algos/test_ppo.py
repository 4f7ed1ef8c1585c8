import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.networks import mlp
from engine_rl.algos.policies import CategoricalActorCritic
from engine_rl.algos.ppo import PPOLoss


class FixedPolicy(nn.Module):
    """evaluate() returns preset log-probs (a leaf with grad), entropies and values."""

    def __init__(self, log_prob, entropy, value):
        super().__init__()
        self.critic = nn.Identity()
        self.log_prob = torch.tensor(log_prob, requires_grad=True)
        self.entropy = torch.tensor(entropy)
        self.value_ = torch.tensor(value, requires_grad=True)

    def evaluate(self, obs, action):
        return self.log_prob, self.entropy, self.value_


RATIO = [0.5, 1.0, 1.5, 1.1]


def _toy(**extra):
    td = TensorDict(
        {
            "observation": torch.zeros(4, 1),
            "action": torch.zeros(4, dtype=torch.long),
            "log_prob": torch.zeros(4),  # old policy: log-prob 0, so ratio = exp(new log-prob)
            "advantage": torch.tensor([1.0, -1.0, 1.0, -1.0]),
            "value_target": torch.tensor([1.0, 0.0, 3.0, 6.0]),
            **extra,
        },
        [4],
    )
    policy = FixedPolicy([math.log(r) for r in RATIO], [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    return td, policy


def test_ratio_and_clip_on_a_toy_batch():
    td, policy = _toy()
    out = PPOLoss(policy, clip_epsilon=0.2, normalize_advantage=False)(td)
    # per item min(r * A, clip(r, 0.8, 1.2) * A):
    #   r=0.5, A=+1 -> min(0.5, 0.8)  = 0.5   (below the clip range with A > 0: not clipped)
    #   r=1.0, A=-1 -> -1
    #   r=1.5, A=+1 -> min(1.5, 1.2)  = 1.2   (clipped)
    #   r=1.1, A=-1 -> min(-1.1, -1.1) = -1.1
    assert out["loss_objective"].item() == pytest.approx(-(0.5 - 1.0 + 1.2 - 1.1) / 4)
    assert out["clip_fraction"].item() == pytest.approx(0.5)  # |r - 1| > 0.2 for r = 0.5 and 1.5
    kl = sum((r - 1) - math.log(r) for r in RATIO) / 4
    assert out["approx_kl"].item() == pytest.approx(kl, rel=1e-5)
    assert out["entropy"].item() == pytest.approx(2.5)
    # value loss: 0.5 * mean((V - target)^2) = 0.5 * (0 + 4 + 0 + 4) / 4
    assert out["loss_critic"].item() == pytest.approx(1.0)
    assert "loss_entropy" not in out.keys()  # entropy_coef = 0

    # gradients through the surrogate: zero where the clipped term is the minimum
    out["loss_objective"].backward()
    expected = [-0.25 * 0.5 * 1.0, -0.25 * 1.0 * -1.0, 0.0, -0.25 * 1.1 * -1.0]
    torch.testing.assert_close(policy.log_prob.grad, torch.tensor(expected))


def test_value_clipping_and_entropy_bonus():
    td, policy = _toy(state_value=torch.tensor([1.0, 1.0, 3.0, 3.0]))
    loss = PPOLoss(policy, value_clip=0.5, value_coef=0.5, entropy_coef=0.01, normalize_advantage=False)
    assert "state_value" in loss.in_keys
    out = loss(td)
    # clipped V = old + clamp(V - old, -0.5, 0.5) = [1, 1.5, 3, 3.5]; errors [0, 1.5, 0, -2.5]
    assert out["loss_critic"].item() == pytest.approx(0.5 * (1.5**2 + 2.5**2) / 4)
    assert out["loss_entropy"].item() == pytest.approx(-0.01 * 2.5)


def test_advantages_are_normalized_per_minibatch():
    td, policy = _toy()
    td["advantage"] = td["advantage"] * 10 + 3  # same normalized values as the toy's
    a = PPOLoss(policy, normalize_advantage=True)(td)["loss_objective"]
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0]) * 10 + 3
    norm = (adv - adv.mean()) / (adv.std() + 1e-8)
    r = torch.tensor(RATIO)
    expected = -torch.min(r * norm, r.clamp(0.8, 1.2) * norm).mean()
    assert a.item() == pytest.approx(expected.item(), rel=1e-5)


def test_clip_epsilon_is_a_plain_attribute_a_schedule_can_change():
    td, policy = _toy()
    loss = PPOLoss(policy, normalize_advantage=False)
    loss.clip_epsilon = 0.6
    out = loss(td)
    assert out["clip_fraction"].item() == 0.0
    assert out["loss_objective"].item() == pytest.approx(-(0.5 - 1.0 + 1.5 - 1.1) / 4)


def test_real_policy_starts_at_ratio_one_and_improves_the_objective():
    torch.manual_seed(0)
    policy = CategoricalActorCritic(mlp(3, 2, (16,)), mlp(3, 1, (16,)), seed=0)
    with torch.no_grad():
        batch = policy(TensorDict({"observation": torch.randn(128, 3)}, [128]))
    # action 1 is good, action 0 is bad
    batch["advantage"] = batch["action"].float() * 2 - 1
    batch["value_target"] = torch.zeros(128)
    loss = PPOLoss(policy, clip_epsilon=0.2)
    out = loss(batch)
    assert out["approx_kl"].abs().item() < 1e-6 and out["clip_fraction"].item() == 0.0
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    p1_before = policy.actor(batch["observation"]).softmax(-1)[:, 1].mean().item()
    for _ in range(30):
        out = loss(batch)
        opt.zero_grad()
        (out["loss_objective"] + out["loss_critic"]).backward()
        opt.step()
    p1_after = policy.actor(batch["observation"]).softmax(-1)[:, 1].mean().item()
    assert p1_after > p1_before + 0.1
    # the clip keeps the ratio of the positive-advantage items from running far past 1 + eps
    assert out["clip_fraction"].item() > 0.0 and out["approx_kl"].item() > 0.0


def test_missing_keys_name_the_loss_and_the_keys():
    td, policy = _toy()
    del td["advantage"]
    with pytest.raises(KeyError, match=r"PPOLoss needs key\(s\) \['advantage'\] but the TensorDict has"):
        PPOLoss(policy)(td)


def test_constructor_errors():
    policy = FixedPolicy([0.0], [0.0], [0.0])
    with pytest.raises(ValueError, match="PPOLoss: argument clip_epsilon must be a positive number, got 0"):
        PPOLoss(policy, clip_epsilon=0)
    with pytest.raises(ValueError, match="PPOLoss: argument entropy_coef must be a non-negative number, got -1"):
        PPOLoss(policy, entropy_coef=-1)
    with pytest.raises(ValueError, match="PPOLoss: argument value_clip must be positive or None, got 0"):
        PPOLoss(policy, value_clip=0)
    with pytest.raises(TypeError, match=r"PPOLoss: argument policy must have an evaluate\(observation, action\)"):
        PPOLoss(nn.Linear(1, 1))
    actor_only = CategoricalActorCritic(nn.Linear(1, 2), None)
    with pytest.raises(ValueError, match="PPOLoss: the policy has no critic"):
        PPOLoss(actor_only)
