import io
import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch.distributions import Categorical, Normal

from engine_rl.algos.multi_discrete import MultiCategoricalActorCritic, MultiDiscreteLogits
from engine_rl.algos.networks import mlp
from engine_rl.algos.normalization import Normalizer
from engine_rl.algos.policies import CategoricalActorCritic, GaussianActor, GaussianActorCritic, orthogonal_init_
from engine_rl.algos.policy_factory import make_actor_critic

BOX4 = gym.spaces.Box(-1.0, 1.0, (4,))


def _td(obs):
    return TensorDict({"observation": obs}, [obs.shape[0]])


def _categorical(seed=0, **kwargs):
    torch.manual_seed(1)
    return CategoricalActorCritic(mlp(4, 3, (8,)), mlp(4, 1, (8,)), seed=seed, **kwargs)


def test_categorical_acting_writes_keys_and_consistent_log_prob():
    policy = _categorical()
    obs = torch.randn(64, 4)
    with torch.no_grad():
        td = policy(_td(obs))
    assert td["action"].dtype == torch.int64 and td["action"].shape == (64,)
    assert td["log_prob"].shape == (64,) and set(td.keys()) == {"observation", "action", "log_prob"}
    logits = policy.actor(obs)
    torch.testing.assert_close(td["log_prob"], Categorical(logits=logits).log_prob(td["action"]))
    torch.testing.assert_close(policy.value(obs), policy.critic(obs).squeeze(-1))


def test_categorical_sampling_follows_the_probabilities():
    policy = CategoricalActorCritic(torch.nn.Linear(1, 3), None, seed=0)
    with torch.no_grad():
        policy.actor.weight.zero_()
        policy.actor.bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
        actions = policy(_td(torch.zeros(30_000, 1)))["action"]
    freq = torch.bincount(actions, minlength=3).float() / actions.numel()
    torch.testing.assert_close(freq, torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0), atol=0.01, rtol=0)


def test_categorical_sampling_is_torch_multinomial_from_the_policy_generator():
    # the same draws and the same generator state afterwards as torch.multinomial with a
    # generator seeded alike: resuming from the saved generator state continues the same draws
    policy = _categorical(seed=7)
    reference = torch.Generator().manual_seed(7)
    obs = torch.randn(8, 4)
    with torch.no_grad():
        for _ in range(200):
            obs = obs + 0.3 * torch.randn(8, 4)
            actions = policy(_td(obs))["action"]
            probs = policy.actor(obs).log_softmax(-1).exp()
            expected = torch.multinomial(probs, 1, generator=reference).squeeze(-1)
            assert torch.equal(actions, expected)
    assert torch.equal(policy._generator.get_state(), reference.get_state())


def test_categorical_sampling_over_batch_dimensions_follows_the_probabilities():
    policy = CategoricalActorCritic(torch.nn.Linear(1, 4), None, seed=3)
    with torch.no_grad():
        policy.actor.weight.zero_()
        policy.actor.bias.copy_(torch.tensor([0.0, 1.0, 2.0, -30.0]))  # the last option: p ~ 1e-14
        td = TensorDict({"observation": torch.zeros(100, 400, 1)}, [100, 400])
        actions = policy(td)["action"]
    assert actions.shape == (100, 400) and td["log_prob"].shape == (100, 400)
    freq = torch.bincount(actions.flatten(), minlength=4).float() / actions.numel()
    expected = torch.softmax(torch.tensor([0.0, 1.0, 2.0, -30.0]), 0)
    torch.testing.assert_close(freq, expected, atol=0.005, rtol=0)  # 40k draws: 3 standard errors < 0.0075
    assert freq[3] == 0.0


def test_multi_categorical_sampling_follows_each_dimension_and_never_draws_a_padded_option():
    head = MultiDiscreteLogits(torch.nn.Linear(1, 5), (2, 3))
    policy = MultiCategoricalActorCritic(head, None, seed=1)
    with torch.no_grad():
        head.net.weight.zero_()
        head.net.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.5, 2.0]))
        actions = policy(_td(torch.zeros(40_000, 1)))["action"]
    assert actions.shape == (40_000, 2) and int(actions[:, 0].max()) <= 1
    for dim, logits in ((0, [1.0, 0.0]), (1, [0.0, 0.5, 2.0])):
        freq = torch.bincount(actions[:, dim], minlength=len(logits)).float() / actions.shape[0]
        torch.testing.assert_close(freq, torch.softmax(torch.tensor(logits), 0), atol=0.01, rtol=0)
    again = MultiCategoricalActorCritic(head, None, seed=1)
    with torch.no_grad():
        assert torch.equal(again(_td(torch.zeros(40_000, 1)))["action"], actions)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_categorical_sampling_on_cuda_uses_the_policy_generator():
    a, b = _categorical(seed=4).cuda(), _categorical(seed=4).cuda()
    obs = torch.randn(256, 4, device="cuda")
    with torch.no_grad():
        actions = a(_td(obs))["action"]
        assert actions.device.type == "cuda" and torch.equal(actions, b(_td(obs))["action"])


def test_categorical_evaluate_matches_torch_distributions():
    policy = _categorical()
    obs, action = torch.randn(10, 4), torch.randint(3, (10,))
    log_prob, entropy, value = policy.evaluate(obs, action)
    dist = Categorical(logits=policy.actor(obs))
    torch.testing.assert_close(log_prob, dist.log_prob(action))
    torch.testing.assert_close(entropy, dist.entropy())
    torch.testing.assert_close(value, policy.critic(obs).squeeze(-1))
    assert log_prob.requires_grad and value.requires_grad


def test_gaussian_acting_and_evaluate_match_torch_normal():
    torch.manual_seed(0)
    actor = GaussianActor(mlp(3, 2, (8,)), action_dim=2, log_std_init=-0.5)
    policy = GaussianActorCritic(actor, mlp(3, 1, (8,)), seed=0)
    obs = torch.randn(7, 3)
    with torch.no_grad():
        td = policy(_td(obs))
    assert td["action"].shape == (7, 2) and td["action"].dtype == torch.float32
    dist = Normal(actor.mean_net(obs), torch.full((2,), math.exp(-0.5)))
    torch.testing.assert_close(td["log_prob"], dist.log_prob(td["action"]).sum(-1))
    log_prob, entropy, _ = policy.evaluate(obs, td["action"])
    torch.testing.assert_close(log_prob, dist.log_prob(td["action"]).sum(-1))
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))


def test_gaussian_samples_have_the_policy_std():
    policy = GaussianActorCritic(GaussianActor(torch.nn.Linear(1, 1), action_dim=1, log_std_init=math.log(2.0)), None,
                                 seed=0)
    with torch.no_grad():
        policy.actor.mean_net.weight.zero_()
        policy.actor.mean_net.bias.fill_(3.0)
        a = policy(_td(torch.zeros(20_000, 1)))["action"]
    assert a.mean().item() == pytest.approx(3.0, abs=0.05) and a.std().item() == pytest.approx(2.0, abs=0.05)


def test_greedy_is_deterministic_shares_weights_and_not_the_rng():
    policy = _categorical()
    greedy = policy.greedy()
    obs = torch.randn(32, 4)
    with torch.no_grad():
        out = greedy(_td(obs))
    assert set(out.keys()) == {"observation", "action"}
    assert torch.equal(out["action"], policy.actor(obs).argmax(-1))
    assert greedy.actor is policy.actor and greedy.critic is policy.critic
    assert not policy.deterministic  # the training policy's flag is untouched
    # evaluating does not advance the training policy's generator: same samples either way
    twin = _categorical()
    with torch.no_grad():
        for _ in range(3):
            greedy(_td(obs))
        a = policy(_td(obs))["action"]
        b = twin(_td(obs))["action"]
    assert torch.equal(a, b)


def test_gaussian_greedy_acts_with_the_mean():
    policy = make_actor_critic(BOX4, gym.spaces.Box(-2.0, 2.0, (2,)), seed=0)
    obs = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(policy.greedy()(_td(obs))["action"], policy.actor(obs)[0])


def test_seeded_sampling_is_reproducible_and_resumes_from_state_dict():
    obs = torch.randn(16, 4)
    a, b = _categorical(seed=5), _categorical(seed=5)
    with torch.no_grad():
        assert torch.equal(a(_td(obs))["action"], b(_td(obs))["action"])
        buf = io.BytesIO()
        torch.save(a.state_dict(), buf)
        expected = [a(_td(obs))["action"] for _ in range(3)]
        c = _categorical(seed=99)
        buf.seek(0)
        c.load_state_dict(torch.load(buf, weights_only=True))
        assert all(torch.equal(c(_td(obs))["action"], e) for e in expected)


def test_acting_does_not_run_the_critic():
    policy = _categorical()
    calls = []
    policy.critic.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        td = policy(_td(torch.zeros(2, 4)))
    assert calls == [] and "state_value" not in td.keys() and policy.out_keys == ["action", "log_prob"]
    assert policy.value(torch.zeros(2, 4)).shape == (2,) and calls == [1]


def test_observation_normalizer_inside_the_policy_is_shared_and_saved():
    norm = Normalizer((4,), epsilon=0.0)
    norm.update(torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 5.0, 8.0]]))
    policy = _categorical(obs_normalizer=norm)
    greedy = policy.greedy()
    assert greedy.obs_normalizer is norm
    obs = torch.randn(3, 4)
    torch.testing.assert_close(policy.value(obs), policy.critic(norm(obs)).squeeze(-1))
    assert "obs_normalizer.mean" in greedy.state_dict() and "obs_normalizer.count" in policy.state_dict()


def test_make_actor_critic_picks_the_policy_from_the_action_space():
    assert isinstance(make_actor_critic(BOX4, gym.spaces.Discrete(2), seed=0), CategoricalActorCritic)
    cont = make_actor_critic(BOX4, gym.spaces.Box(-1.0, 1.0, (3,)), log_std_init=-1.0, seed=0)
    assert isinstance(cont, GaussianActorCritic) and cont.actor.log_std.tolist() == [-1.0] * 3
    norm = make_actor_critic(BOX4, gym.spaces.Discrete(2), normalize_observations=True, seed=0)
    assert isinstance(norm.obs_normalizer, Normalizer)


@pytest.mark.parametrize(
    ("obs_space", "act_space", "kind", "match"),
    [
        (BOX4, gym.spaces.Discrete(2), "gaussian", r"a Gaussian policy needs a Box action space, got Discrete\(2\)"),
        (BOX4, gym.spaces.Box(-1, 1, (2,)), "categorical", r"a categorical policy needs a Discrete action space"),
        (BOX4, gym.spaces.MultiBinary(2), "auto",
         r"the action space must be Discrete or 1-D MultiDiscrete \(categorical policy\) or a 1-D Box \(Gaussian "
         r"policy\), got MultiBinary\(2\)"),
        (BOX4, gym.spaces.MultiDiscrete([[2, 2]]), "auto", r"the action space must be Discrete or 1-D MultiDiscrete"),
        (gym.spaces.Text(5), gym.spaces.Discrete(2), "auto", r"the observation space is Text\(1, 5, .*which cannot "
         r"be stored; each leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict of these; flatten it"),
        (BOX4, gym.spaces.Discrete(2), "beta", r"kind must be 'auto', 'categorical' or 'gaussian', got 'beta'"),
    ],
)
def test_make_actor_critic_errors(obs_space, act_space, kind, match):
    with pytest.raises(ValueError, match=r"make_actor_critic: " + match):
        make_actor_critic(obs_space, act_space, kind=kind)


def test_orthogonal_init_gains():
    torch.manual_seed(0)
    net = orthogonal_init_(mlp(16, 16, (16,)), gain=2.0, last_gain=0.5)
    w0, w1 = net[0].weight, net[-1].weight
    torch.testing.assert_close(w0 @ w0.t(), 4.0 * torch.eye(16), atol=1e-4, rtol=0)
    torch.testing.assert_close(w1 @ w1.t(), 0.25 * torch.eye(16), atol=1e-4, rtol=0)
    assert float(net[0].bias.abs().sum()) == 0.0
