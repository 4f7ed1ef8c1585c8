import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.networks import mlp
from engine_rl.algos.policies import CategoricalActorCritic, GaussianActor, GaussianActorCritic, make_actor_critic
from engine_rl.algos.ppo import PPOLoss
from engine_rl.algos.ppo_fused import categorical_mlp_plan

BOX = gym.spaces.Box(-5.0, 5.0, (4,))


def _policy(activation=nn.Tanh, normalize=False):
    torch.manual_seed(0)
    return make_actor_critic(BOX, gym.spaces.Discrete(3), hidden=(32, 16), activation=activation,
                             normalize_observations=normalize, write_value=False, seed=0)


def _batch(policy, n=96, seed=1):
    """A minibatch collected by a *different* policy, so ratios spread inside and outside the clip range."""
    torch.manual_seed(seed)
    if policy.obs_normalizer is not None:
        policy.obs_normalizer.update(torch.randn(500, 4) * 2 + 1)
    with torch.no_grad():
        batch = policy(TensorDict({"observation": torch.randn(n, 4) * 2}, [n]))
        batch["state_value"] = policy.value(batch["observation"])
    batch["log_prob"] = batch["log_prob"] + torch.randn(n) * 0.3
    batch["advantage"] = torch.randn(n)
    batch["value_target"] = torch.randn(n)
    return batch


def _losses_and_grads(policy, batch, **loss_kwargs):
    loss = PPOLoss(policy, clip_epsilon=0.2, **loss_kwargs)
    out = loss(batch.clone())
    policy.zero_grad(set_to_none=True)
    sum(v for k, v in out.items() if k.startswith("loss_")).backward()
    return out, [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("activation", [nn.Tanh, nn.ReLU])
@pytest.mark.parametrize("value_clip", [None, 0.05])
@pytest.mark.parametrize("normalize", [False, True])
def test_values_and_gradients_are_bitwise_autograds(activation, value_clip, normalize):
    policy = _policy(activation, normalize)
    batch = _batch(policy)
    ref, ref_grads = _losses_and_grads(policy, batch, value_clip=value_clip, fused=False)
    out, grads = _losses_and_grads(policy, batch, value_clip=value_clip, fused=True, sigmoid_tanh=False)
    assert out["loss_objective"].grad_fn.name() == "_CategoricalPPOBackward"
    assert ref["loss_objective"].grad_fn.name() != "_CategoricalPPOBackward"
    assert 0.1 < ref["clip_fraction"].item() < 0.9  # both sides of the clip range are exercised
    assert sorted(out.keys()) == sorted(ref.keys())
    for key in ref.keys():
        assert torch.equal(out[key], ref[key]), key
    for g, r in zip(grads, ref_grads):
        assert torch.equal(g, r)


def test_entropy_bonus_gradients_agree_to_rounding():
    policy = _policy()
    batch = _batch(policy)
    ref, ref_grads = _losses_and_grads(policy, batch, entropy_coef=0.05, fused=False)
    out, grads = _losses_and_grads(policy, batch, entropy_coef=0.05, fused=True, sigmoid_tanh=False)
    assert torch.equal(out["loss_entropy"], ref["loss_entropy"])
    assert out["loss_entropy"].item() == pytest.approx(-0.05 * ref["entropy"].item())
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-7)


def test_sigmoid_tanh_is_within_rounding_of_tanh_and_the_default_on_cpu():
    z = torch.linspace(-20.0, 20.0, 400_001)
    assert (2 * torch.sigmoid(2 * z) - 1 - torch.tanh(z)).abs().max().item() <= 2e-7

    policy = _policy()
    batch = _batch(policy)
    ref, ref_grads = _losses_and_grads(policy, batch, fused=False)
    out, grads = _losses_and_grads(policy, batch)  # the defaults: fused, sigmoid tanh on CPU
    _, exact_grads = _losses_and_grads(policy, batch, sigmoid_tanh=False)
    assert not all(torch.equal(g, e) for g, e in zip(grads, exact_grads))  # the sigmoid form did run
    for key in ref.keys():
        torch.testing.assert_close(out[key], ref[key], rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_training_steps_stay_bitwise_equal():
    policies = [_policy(), _policy()]
    batch = _batch(policies[0])
    losses = [PPOLoss(policies[0], fused=False), PPOLoss(policies[1], sigmoid_tanh=False)]
    optims = [torch.optim.Adam(p.parameters(), lr=3e-3) for p in policies]
    for _ in range(25):
        for policy, loss, opt in zip(policies, losses, optims):
            out = loss(batch.clone())
            opt.zero_grad()
            (out["loss_objective"] + out["loss_critic"]).backward()
            opt.step()
    for a, b in zip(policies[0].parameters(), policies[1].parameters()):
        assert torch.equal(a, b)
    assert out["clip_fraction"].item() > 0


def test_plan_accepts_the_default_networks_only():
    obs, action = torch.zeros(5, 4), torch.zeros(5, dtype=torch.long)
    plan = categorical_mlp_plan(_policy(), obs, action)
    assert [layer.out_features for layer in plan.actor] == [32, 16, 3]
    assert plan.actor_activations == ("tanh", "tanh") and plan.critic[-1].out_features == 1
    assert categorical_mlp_plan(_policy(nn.ReLU), obs, action).critic_activations == ("relu", "relu")

    gaussian = GaussianActorCritic(GaussianActor(mlp(4, 1, (8,)), action_dim=1), mlp(4, 1, (8,)), seed=0)
    assert categorical_mlp_plan(gaussian, obs, torch.zeros(5, 1)) is None
    odd_activation = CategoricalActorCritic(mlp(4, 2, (8,), activation=nn.ELU), mlp(4, 1, (8,)), seed=0)
    assert categorical_mlp_plan(odd_activation, obs, action) is None
    two_value_critic = CategoricalActorCritic(mlp(4, 2, (8,)), mlp(4, 2, (8,)), seed=0)
    assert categorical_mlp_plan(two_value_critic, obs, action) is None
    not_sequential = CategoricalActorCritic(nn.Linear(4, 2), mlp(4, 1, (8,)), seed=0)
    assert categorical_mlp_plan(not_sequential, obs, action) is None

    policy = _policy()
    assert categorical_mlp_plan(policy, torch.zeros(2, 5, 4), torch.zeros(2, 5, dtype=torch.long)) is None
    assert categorical_mlp_plan(policy, obs, torch.zeros(4, dtype=torch.long)) is None
    assert categorical_mlp_plan(policy, obs, action, [torch.zeros(5), torch.zeros(5, 1)]) is None
    assert categorical_mlp_plan(policy, obs, action, [torch.zeros(5), torch.zeros(5)]) is not None
    assert categorical_mlp_plan(policy, obs.requires_grad_(), action) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert categorical_mlp_plan(policy, torch.zeros(5, 4), action) is None
    handle = policy.actor[1].register_forward_hook(lambda *args: None)
    assert categorical_mlp_plan(policy, torch.zeros(5, 4), action) is None
    handle.remove()
    assert categorical_mlp_plan(policy, torch.zeros(5, 4), action) is not None


def test_hooked_networks_take_autograds_path_and_see_their_hooks():
    policy = _policy()
    batch = _batch(policy)
    seen = []
    policy.critic[0].register_forward_hook(lambda module, args, output: seen.append(output.shape))
    out = PPOLoss(policy)(batch)
    assert out["loss_objective"].grad_fn.name() != "_CategoricalPPOBackward"
    assert seen == [torch.Size([96, 32])]


def test_misshapen_value_targets_take_autograds_path_with_its_broadcast():
    policy = _policy()
    batch = _batch(policy)
    batch = TensorDict({**batch.to_dict(), "value_target": batch["value_target"].unsqueeze(-1)}, [96])
    fused, reference = PPOLoss(policy)(batch), PPOLoss(policy, fused=False)(batch)
    assert fused["loss_objective"].grad_fn.name() != "_CategoricalPPOBackward"
    assert torch.equal(fused["loss_critic"], reference["loss_critic"])


def test_no_grad_evaluation_and_argument_errors():
    policy = _policy()
    batch = _batch(policy)
    with torch.no_grad():
        out = PPOLoss(policy)(batch)
    assert out["loss_objective"].grad_fn is None and out["loss_critic"].ndim == 0
    with pytest.raises(TypeError, match="PPOLoss: argument fused must be a bool, got 1"):
        PPOLoss(policy, fused=1)
    with pytest.raises(TypeError, match="PPOLoss: argument sigmoid_tanh must be a bool or None, got 'cpu'"):
        PPOLoss(policy, sigmoid_tanh="cpu")


@pytest.mark.parametrize("activation", [nn.Tanh, nn.ReLU])
@pytest.mark.parametrize("value_clip", [None, 0.05])
@pytest.mark.parametrize("entropy_coef", [0.0, 0.05])
def test_written_gradients_are_bitwise_the_nodes_backward(activation, value_clip, entropy_coef):
    policy = _policy(activation, normalize=True)
    batch = _batch(policy)
    kwargs = dict(value_clip=value_clip, entropy_coef=entropy_coef)
    ref, ref_grads = _losses_and_grads(policy, batch, **kwargs)  # the node, back-propagated by autograd
    loss = PPOLoss(policy, clip_epsilon=0.2, write_gradients=True, **kwargs)
    policy.zero_grad(set_to_none=True)
    out = loss(batch.clone())
    assert loss.wrote_gradients
    assert sorted(out.keys()) == sorted(ref.keys())
    for key in ref.keys():
        assert torch.equal(out[key], ref[key]), key
        assert not out[key].requires_grad, key
    for p, r in zip(policy.parameters(), ref_grads):
        assert torch.equal(p.grad, r)


def test_write_gradients_falls_back_to_the_node_without_grad_mode_or_with_a_frozen_layer():
    policy = _policy()
    batch = _batch(policy)
    loss = PPOLoss(policy, write_gradients=True)
    with torch.no_grad():
        out = loss(batch.clone())
    assert not loss.wrote_gradients and all(p.grad is None for p in policy.parameters())
    policy.critic[0].weight.requires_grad_(False)
    out = loss(batch.clone())
    assert not loss.wrote_gradients and out["loss_objective"].grad_fn.name() == "_CategoricalPPOBackward"
    with pytest.raises(TypeError, match="PPOLoss: argument write_gradients must be a bool, got None"):
        PPOLoss(policy, write_gradients=None)
