import io
import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl import create_trainer
from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.sac import QEnsemble, SACLoss
from handlers import TargetNetUpdater


class ConstantHead(nn.Module):
    """[mean, log_std] for every row, whatever the observation."""

    def __init__(self, mean, log_std):
        super().__init__()
        self.out = nn.Parameter(torch.tensor([*mean, *log_std], dtype=torch.float32))

    def forward(self, obs):
        return self.out.expand(*obs.shape[:-1], -1)


def _actor(mean=(0.0,), log_std=(0.0,), bound=2.0):
    d = len(mean)
    return TanhGaussianActor(ConstantHead(mean, log_std), low=[-bound] * d, high=[bound] * d)


class HandQ(nn.Module):
    """Two critics by hand: Q_i(s, a) = c_i * s[:, 0] + d_i * a[:, 0] (a in [-1, 1])."""

    def __init__(self, c, d):
        super().__init__()
        self.c = nn.Parameter(torch.tensor(c))
        self.d = nn.Parameter(torch.tensor(d))
        self.calls = []

    def forward(self, obs, action, *, detach_params=False):
        c, d = (self.c.detach(), self.d.detach()) if detach_params else (self.c, self.d)
        self.calls.append(detach_params)
        return c[:, None] * obs[:, 0] + d[:, None] * action[:, 0]


def _sample(n=4, obs_dim=3, act_dim=1, terminated=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    td = TensorDict(
        {
            "observation": torch.randn(n, obs_dim, generator=g),
            "action": torch.rand(n, act_dim, generator=g) * 4 - 2,
            ("next", "observation"): torch.randn(n, obs_dim, generator=g),
            ("next", "reward"): torch.randn(n, generator=g),
            ("next", "terminated"): torch.tensor([False] * n if terminated is None else terminated),
            ("next", "truncated"): torch.ones(n, dtype=torch.bool),
        },
        [n],
    )
    return td


def test_target_entropy_defaults_to_minus_action_dim():
    actor = TanhGaussianActor.build(5, gym.spaces.Box(-1.0, 1.0, (3,)), hidden=(8,))
    assert SACLoss(actor, QEnsemble(5, 3, (8,))).target_entropy == -3.0
    assert SACLoss(actor, QEnsemble(5, 3, (8,)), target_entropy=-0.5).target_entropy == -0.5


@pytest.mark.parametrize(
    "log_std,target_entropy,alpha_should",
    [(-4.0, -1.0, "grow"), (0.0, -3.0, "shrink")],
)
def test_temperature_loss_sign_moves_alpha_towards_the_entropy_target(log_std, target_entropy, alpha_should):
    # log_std=-4: entropy ~ -3.2 < target -1 -> alpha must grow; log_std=0: entropy ~ -0.9 > -3 -> shrink
    torch.manual_seed(0)
    loss_fn = SACLoss(_actor((0.0,), (log_std,)), HandQ([1.0, 1.0], [0.0, 0.0]), alpha_init=2.0,
                      target_entropy=target_entropy)
    out = loss_fn(_sample(n=256))
    entropy = out["entropy"].item()
    assert (entropy < target_entropy) == (alpha_should == "grow")
    # loss_alpha = -log_alpha * (log_prob + target_entropy) = log(2) * (entropy - target_entropy)
    torch.testing.assert_close(out["loss_alpha"], torch.tensor(math.log(2.0) * (entropy - target_entropy)))
    out["loss_alpha"].backward()
    grad = loss_fn.log_alpha.grad.item()
    assert grad == pytest.approx(entropy - target_entropy, rel=1e-5)
    opt = torch.optim.SGD([loss_fn.log_alpha], lr=0.1)
    opt.step()
    assert (loss_fn.alpha > 2.0) == (alpha_should == "grow")


def test_twin_q_min_target_by_hand():
    gamma, alpha = 0.9, 0.5
    critic = HandQ([1.0, 3.0], [2.0, -1.0])
    target = HandQ([2.0, -1.0], [1.0, 1.0])
    actor = _actor((0.3,), (-1.0,))
    loss_fn = SACLoss(actor, critic, target, gamma=gamma, alpha_init=alpha)
    td = _sample(n=4, terminated=[False, True, False, False])
    torch.manual_seed(7)
    out = loss_fn(td)
    torch.manual_seed(7)  # the loss draws a' ~ pi(.|s') first: replay the same draw
    next_a, next_lp = actor.sample(td["next", "observation"])
    s0, s1 = td["observation"][:, 0], td["next", "observation"][:, 0]
    q1_next, q2_next = 2.0 * s1 + next_a[:, 0], -1.0 * s1 + next_a[:, 0]
    not_terminated = torch.tensor([1.0, 0.0, 1.0, 1.0])
    y = td["next", "reward"] + gamma * not_terminated * (torch.minimum(q1_next, q2_next) - alpha * next_lp)
    a = td["action"][:, 0] / 2.0  # critics see actions in [-1, 1]
    q1, q2 = s0 + 2.0 * a, 3.0 * s0 - a
    expected = 0.5 * (((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean())
    torch.testing.assert_close(out["loss_qvalue"], expected)
    torch.testing.assert_close(td["td_error"], torch.maximum((q1 - y).abs(), (q2 - y).abs()))
    assert out["alpha"].item() == pytest.approx(alpha)
    # the min really switches between critics across these items
    assert bool(((q1_next < q2_next).any() and (q1_next > q2_next).any()))


def test_actor_loss_uses_min_q_of_the_fresh_action_with_detached_critics():
    critic = HandQ([0.0, 0.0], [2.0, -1.0])  # Q1 = 2a, Q2 = -a: min is -|a|-ish
    actor = _actor((0.5,), (-2.0,))
    loss_fn = SACLoss(actor, critic, gamma=0.9, alpha_init=0.25)
    td = _sample(n=5)
    torch.manual_seed(3)
    out = loss_fn(td)
    torch.manual_seed(3)
    actor.sample(td["next", "observation"])  # the target's draw comes first
    new_a, log_prob = actor.sample(td["observation"])
    expected = (0.25 * log_prob - torch.minimum(2.0 * new_a[:, 0], -new_a[:, 0])).mean()
    torch.testing.assert_close(out["loss_actor"], expected)
    assert critic.calls == [False, True]  # critics on the data action, then detached on the fresh one


def _grads(loss, groups):
    params = [p for ps in groups.values() for p in ps]
    grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    out, i = {}, 0
    for name, ps in groups.items():
        g = grads[i : i + len(ps)]
        i += len(ps)
        out[name] = any(x is not None and bool((x != 0).any()) for x in g)
    return out


def test_each_loss_trains_only_its_own_parameters():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
    loss_fn = SACLoss(actor, QEnsemble(3, 1, (16,)))
    out = loss_fn(_sample(n=32))
    groups = {
        "actor": list(actor.parameters()),
        "critic": list(loss_fn.critic.parameters()),
        "alpha": [loss_fn.log_alpha],
    }
    assert _grads(out["loss_qvalue"], groups) == {"actor": False, "critic": True, "alpha": False}
    assert _grads(out["loss_actor"], groups) == {"actor": True, "critic": False, "alpha": False}
    assert _grads(out["loss_alpha"], groups) == {"actor": False, "critic": False, "alpha": True}
    assert not any(p.requires_grad for p in loss_fn.target_critic.parameters())
    assert not out["alpha"].requires_grad and not out["entropy"].requires_grad


def test_termination_stops_bootstrapping_truncation_does_not():
    critic = HandQ([0.0, 0.0], [0.0, 0.0])
    target = HandQ([1.0, 1.0], [0.0, 0.0])  # Q'(s', a') = s'[0]
    loss_fn = SACLoss(_actor((0.0,), (-20.0,)), critic, target, gamma=1.0, alpha_init=1e-12, learn_alpha=False)
    td = _sample(n=2, terminated=[True, False])  # both truncated too
    loss_fn(td)
    y = td["next", "reward"] + torch.tensor([0.0, 1.0]) * td["next", "observation"][:, 0]
    torch.testing.assert_close(td["td_error"], y.abs(), atol=1e-5, rtol=1e-5)  # Q(s, a) = 0


def test_importance_weights_scale_the_critic_loss():
    torch.manual_seed(0)
    loss_fn = SACLoss(_actor(), QEnsemble(3, 1, (8,)))
    td = _sample(n=4)
    torch.manual_seed(1)
    plain = loss_fn(td.clone())["loss_qvalue"]
    td["weight"] = torch.full((4,), 3.0)
    torch.manual_seed(1)
    torch.testing.assert_close(loss_fn(td)["loss_qvalue"], 3.0 * plain)


def test_fixed_alpha_returns_no_alpha_loss():
    loss_fn = SACLoss(_actor(), QEnsemble(3, 1, (8,)), alpha_init=0.2, learn_alpha=False)
    out = loss_fn(_sample())
    assert "loss_alpha" not in out.keys() and not loss_fn.log_alpha.requires_grad
    assert out["alpha"].item() == pytest.approx(0.2)


def test_missing_key_names_it():
    td = _sample()
    del td["next", "reward"]
    with pytest.raises(KeyError, match=r"SACLoss needs key\(s\) \['next.reward'\]"):
        SACLoss(_actor(), QEnsemble(3, 1, (8,)))(td)


def test_constructor_checks_arguments():
    with pytest.raises(TypeError, match="SACLoss: actor must be a TanhGaussianActor"):
        SACLoss(nn.Linear(3, 2), QEnsemble(3, 1, (8,)))
    with pytest.raises(ValueError, match="SACLoss: gamma must be in"):
        SACLoss(_actor(), QEnsemble(3, 1, (8,)), gamma=1.5)
    with pytest.raises(ValueError, match="SACLoss: alpha_init must be > 0"):
        SACLoss(_actor(), QEnsemble(3, 1, (8,)), alpha_init=0.0)
    with pytest.raises(ValueError, match="QEnsemble: num_q must be a positive int"):
        QEnsemble(3, 1, num_q=0)


def test_q_ensemble_equals_independent_mlps_and_detach_blocks_param_grads():
    torch.manual_seed(0)
    q = QEnsemble(3, 2, (8, 6), num_q=3)
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    out = q(obs, act)
    assert out.shape == (3, 5)
    x = torch.cat([obs, act], -1)
    for i in range(3):
        h = torch.relu(x @ q.weights[0][i] + q.biases[0][i])
        h = torch.relu(h @ q.weights[1][i] + q.biases[1][i])
        torch.testing.assert_close(out[i], (h @ q.weights[2][i] + q.biases[2][i]).squeeze(-1))
    # members are initialized independently
    assert not torch.equal(q.weights[1][0], q.weights[1][1])
    act.requires_grad_(True)
    detached = q(obs, act, detach_params=True)
    torch.testing.assert_close(detached, out)
    detached.sum().backward()
    assert act.grad is not None and all(p.grad is None for p in q.parameters())
    assert q(torch.randn(2, 4, 3), torch.randn(2, 4, 2)).shape == (3, 2, 4)
    # the first k critics alone: the same values, and gradients only for their slices
    first = q(obs, act.detach(), first=2)
    torch.testing.assert_close(first, out[:2])
    first.sum().backward()
    assert q.weights[1].grad[:2].abs().sum() > 0 and q.weights[1].grad[2].abs().sum() == 0
    with pytest.raises(ValueError, match=r"QEnsemble: first must be in \[1, 3\], got 4"):
        q(obs, act, first=4)


def test_loss_state_dict_round_trips_with_weights_only():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))
    loss_fn = SACLoss(actor, QEnsemble(3, 1, (8,)), alpha_init=0.3)
    buf = io.BytesIO()
    torch.save(loss_fn.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(1)
    other = SACLoss(TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,)), QEnsemble(3, 1, (8,)))
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.alpha == pytest.approx(0.3)
    for a, b in zip(loss_fn.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b)


def test_trainer_with_three_optimizers_and_soft_target_updates():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
    critic = QEnsemble(3, 1, (16,))
    loss_fn = SACLoss(actor, critic)
    modules = {"actor": actor, "critic": critic, "target": loss_fn.target_critic}
    before = {name: {k: p.detach().clone() for k, p in m.named_parameters()} for name, m in modules.items()}
    opts = {
        "actor": torch.optim.Adam(actor.parameters(), lr=1e-3),
        "critic": torch.optim.Adam(critic.parameters(), lr=1e-3),
        "alpha": torch.optim.Adam([loss_fn.log_alpha], lr=1e-3),
    }
    trainer = create_trainer([_sample(n=16)] * 3, loss_fn, opts, optim_steps_per_batch=2)
    updater = TargetNetUpdater(critic, loss_fn.target_critic, tau=0.5)
    updater.attach(trainer)
    trainer.run(max_epochs=1)
    assert trainer.state.optim_steps == 6 and updater.num_updates == 6
    assert sorted(trainer.state.output) == ["loss_actor", "loss_alpha", "loss_qvalue"]
    assert loss_fn.alpha != 1.0
    for name, module in modules.items():
        assert all(not torch.equal(p, before[name][k]) for k, p in module.named_parameters()), name


def test_an_n_step_sample_bootstraps_with_its_own_discount():
    critic = HandQ([0.0, 0.0], [0.0, 0.0])
    target = HandQ([1.0, 1.0], [0.0, 0.0])  # Q'(s', a') = s'[0]
    loss_fn = SACLoss(_actor((0.0,), (-20.0,)), critic, target, gamma=0.9, alpha_init=1e-12, learn_alpha=False)
    td = _sample(n=3, terminated=[False, False, False])
    td["next", "discount"] = torch.tensor([0.9**3, 0.0, 0.9**2])  # 3 steps; a terminal; a truncation after 2
    loss_fn(td)
    y = td["next", "reward"] + td["next", "discount"] * td["next", "observation"][:, 0]
    torch.testing.assert_close(td["td_error"], y.abs(), atol=1e-5, rtol=1e-5)  # Q(s, a) = 0
