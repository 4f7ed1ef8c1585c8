import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.sac import QEnsemble
from engine_rl.algos.td3 import TanhActor, TD3Loss

BOX = gym.spaces.Box(-2.0, 2.0, (1,))


class RecordingQ(nn.Module):
    """Two critics: Q_0 = sum(obs) + 10 * a, Q_1 = sum(obs) + 10 * a + offset; records the actions."""

    def __init__(self, offset=1.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(10.0))
        self.offset = offset
        self.actions = []

    def forward(self, obs, action, *, detach_params=False, first=None):
        self.actions.append(action.detach().clone())
        w = self.w.detach() if detach_params else self.w
        q0 = obs.sum(-1) + w * action.squeeze(-1)
        return torch.stack([q0, q0 + self.offset][: first or 2])


def _sample(n=4, terminated=None, truncated=None):
    td = TensorDict(
        {
            "observation": torch.arange(n, dtype=torch.float32).unsqueeze(-1).expand(n, 3).clone(),
            "action": torch.zeros(n, 1),
            ("next", "observation"): torch.ones(n, 3),
            ("next", "reward"): torch.full((n,), 2.0),
            ("next", "terminated"): torch.zeros(n, dtype=torch.bool) if terminated is None else terminated,
        },
        [n],
    )
    if truncated is not None:
        td["next", "truncated"] = truncated
    return td


def _actor(seed=0):
    torch.manual_seed(seed)
    return TanhActor.build(3, BOX, hidden=(8,))


def test_actor_scales_to_the_bounds_and_back():
    actor = _actor()
    obs = torch.randn(5, 3)
    unit = actor.unit_action(obs)
    action = actor(TensorDict({"observation": obs}, [5]))["action"]
    torch.testing.assert_close(action, 2.0 * unit)
    torch.testing.assert_close(actor.unscale(action), unit)
    with pytest.raises(ValueError, match=r"TanhActor needs a continuous \(Box\) action space; got Discrete\(2\)"):
        TanhActor.build(3, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="TanhActor: need low and high of the same non-empty shape with high > low"):
        TanhActor(nn.Linear(3, 1), low=[1.0], high=[1.0])


def test_critic_target_by_hand_min_of_the_target_critics_and_termination():
    actor, critic = _actor(), RecordingQ(offset=1.0)
    loss_fn = TD3Loss(actor, critic, gamma=0.5, target_noise=0.0)
    td = _sample(terminated=torch.tensor([False, True, False, True]))
    out = loss_fn(td)
    next_unit = loss_fn.target_actor.unit_action(torch.ones(4, 3))
    q_next = 3.0 + 10.0 * next_unit.squeeze(-1)  # min of the two critics: the one without offset
    target = 2.0 + 0.5 * torch.tensor([1.0, 0.0, 1.0, 0.0]) * q_next
    q = torch.arange(4, dtype=torch.float32) * 3  # obs sums; stored action 0
    expected = ((q - target) ** 2).mean() + ((q + 1.0 - target) ** 2).mean()
    torch.testing.assert_close(out["loss_qvalue"], expected)
    torch.testing.assert_close(td["td_error"], torch.maximum((q - target).abs(), (q + 1.0 - target).abs()))


def test_truncation_still_bootstraps():
    actor, critic = _actor(), RecordingQ()
    loss_fn = TD3Loss(actor, critic, gamma=1.0, target_noise=0.0)
    plain, truncated = _sample(), _sample(truncated=torch.ones(4, dtype=torch.bool))
    torch.testing.assert_close(loss_fn(plain)["loss_qvalue"], loss_fn(truncated)["loss_qvalue"])


def test_target_smoothing_noise_is_clipped_then_the_action_is_kept_in_the_box():
    actor = _actor()
    critic = RecordingQ()
    loss_fn = TD3Loss(actor, critic, target_noise=100.0, noise_clip=0.3)
    target_critic = loss_fn.target_critic
    loss_fn(_sample(n=256))
    fed = target_critic.actions[0]  # the target critic's input: a' = clip(mu'(s') + clip(noise), -1, 1)
    base = loss_fn.target_actor.unit_action(torch.ones(256, 3))
    delta = fed - base
    assert float(delta.abs().max()) <= 0.3 + 1e-6
    assert (delta.abs() > 0.29).float().mean() > 0.9  # noise of std 100 is almost always clipped
    assert float(fed.abs().max()) <= 1.0


def test_actor_loss_every_policy_delay_calls_uses_the_first_critic_and_trains_only_the_actor():
    actor, critic = _actor(), RecordingQ(offset=5.0)
    loss_fn = TD3Loss(actor, critic, policy_delay=3)
    keys = [sorted(loss_fn(_sample()).keys()) for _ in range(6)]
    assert keys == [["loss_qvalue"]] * 2 + [["loss_actor", "loss_qvalue"]] + [["loss_qvalue"]] * 2 + [
        ["loss_actor", "loss_qvalue"]
    ]
    assert int(loss_fn.updates) == 6
    out = loss_fn(_sample())  # call 7: critics only
    out["loss_qvalue"].backward()
    assert all(p.grad is None for p in actor.parameters()) and critic.w.grad is not None
    critic.w.grad = None
    for _ in range(2):
        out = loss_fn(_sample())  # call 9 has the actor's loss
    obs = _sample()["observation"]
    torch.testing.assert_close(out["loss_actor"], -(obs.sum(-1) + 10.0 * actor.unit_action(obs).squeeze(-1)).mean())
    out["loss_actor"].backward()
    assert critic.w.grad is None and all(p.grad is not None for p in actor.parameters())


def test_update_count_is_saved_and_restored():
    loss_fn = TD3Loss(_actor(), QEnsemble(3, 1, (8,)))
    for _ in range(3):
        loss_fn(_sample())
    state = loss_fn.state_dict()
    assert int(state["updates"]) == 3
    fresh = TD3Loss(_actor(), QEnsemble(3, 1, (8,)))
    fresh.load_state_dict(state)
    assert sorted(fresh(_sample()).keys()) == ["loss_actor", "loss_qvalue"]  # call 4


def test_missing_key_and_bad_arguments_name_them():
    td = _sample()
    del td["next", "reward"]
    with pytest.raises(KeyError, match=r"TD3Loss needs key\(s\) \['next.reward'\]"):
        TD3Loss(_actor(), QEnsemble(3, 1, (8,)))(td)
    critic = QEnsemble(3, 1, (8,))
    with pytest.raises(ValueError, match="TD3Loss: policy_delay must be a positive int, got 0"):
        TD3Loss(_actor(), critic, policy_delay=0)
    with pytest.raises(ValueError, match="TD3Loss: target_noise must be a non-negative number, got -0.1"):
        TD3Loss(_actor(), critic, target_noise=-0.1)
    with pytest.raises(ValueError, match=r"TD3Loss: gamma must be in \[0, 1\], got 2"):
        TD3Loss(_actor(), critic, gamma=2)
    with pytest.raises(TypeError, match="TD3Loss: actor must be a TanhActor, got Linear"):
        TD3Loss(nn.Linear(3, 1), critic)


def test_an_n_step_sample_bootstraps_with_its_own_discount():
    actor, critic = _actor(), RecordingQ(offset=1.0)
    loss_fn = TD3Loss(actor, critic, gamma=0.5, target_noise=0.0)
    td = _sample()
    td["next", "discount"] = torch.tensor([0.125, 0.0, 0.25, 0.125])  # gamma^k, 0 after a terminal
    out = loss_fn(td)
    next_unit = loss_fn.target_actor.unit_action(torch.ones(4, 3))
    target = 2.0 + td["next", "discount"] * (3.0 + 10.0 * next_unit.squeeze(-1))
    q = torch.arange(4, dtype=torch.float32) * 3
    torch.testing.assert_close(out["loss_qvalue"], ((q - target) ** 2).mean() + ((q + 1.0 - target) ** 2).mean())
