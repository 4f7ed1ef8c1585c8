"""RecurrentActorCritic: stepping equals unrolling, resets at episode starts, the gradient through
time, values of next observations from the state after the step, greedy, the builder's errors."""

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from engine_rl.algos.ppo import PPOLoss
from engine_rl.algos.recurrent import make_recurrent_actor_critic

BOX, TWO = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)


def _rollout(policy, obs, is_init):
    """Act step by step as the collector does; return the batch a collector would store."""
    b, t = is_init.shape
    state = torch.zeros(b, *policy.recurrent_state_shape)
    states, actions, log_probs = [], [], []
    for i in range(t):
        td = TensorDict({"observation": obs[:, i], "recurrent_state": state.masked_fill(is_init[:, i, None], 0.0),
                         "is_init": is_init[:, i]}, [b])
        policy(td)
        states.append(td["recurrent_state"])
        actions.append(td["action"])
        log_probs.append(td["log_prob"])
        state = td["next", "recurrent_state"]
    return torch.stack(states, 1), torch.stack(actions, 1), torch.stack(log_probs, 1)


@pytest.mark.parametrize("core", ["lstm", "gru"])
@pytest.mark.parametrize("critic_core", ["own", "shared", "none"])
def test_evaluating_a_sequence_gives_what_acting_step_by_step_gave(core, critic_core):
    torch.manual_seed(0)
    policy = make_recurrent_actor_critic(BOX, TWO, core=core, core_size=8, critic_core=critic_core, seed=0)
    obs = torch.randn(4, 10, 3)
    is_init = torch.rand(4, 10) < 0.2
    is_init[:, 0] = True
    states, actions, log_probs = _rollout(policy, obs, is_init)
    new_log_prob, entropy, value = policy.evaluate(obs, actions, recurrent_state=states, is_init=is_init)
    torch.testing.assert_close(new_log_prob, log_probs, rtol=0, atol=1e-6)
    assert entropy.shape == value.shape == (4, 10)


def test_a_stored_state_at_t0_is_where_the_sequence_starts_and_is_init_resets_it():
    policy = make_recurrent_actor_critic(BOX, TWO, core="gru", core_size=4, critic_core="shared", seed=0)
    obs = torch.randn(1, 6, 3)
    no_reset = torch.zeros(1, 6, dtype=torch.bool)
    states, actions, _ = _rollout(policy, obs, no_reset)
    # the second half alone, from the state stored at its first step, gives the same log-probabilities
    whole, _, _ = policy.evaluate(obs, actions, recurrent_state=states, is_init=no_reset)
    half, _, _ = policy.evaluate(obs[:, 3:], actions[:, 3:], recurrent_state=states[:, 3:], is_init=no_reset[:, 3:])
    torch.testing.assert_close(half, whole[:, 3:], rtol=0, atol=1e-6)
    # an episode start at step 3 forgets steps 0-2: the same as starting there from zeros
    reset = no_reset.clone()
    reset[:, 3] = True
    restarted, _, _ = policy.evaluate(obs, actions, recurrent_state=states, is_init=reset)
    fresh, _, _ = policy.evaluate(obs[:, 3:], actions[:, 3:], recurrent_state=torch.zeros_like(states[:, 3:]),
                                  is_init=no_reset[:, 3:])
    torch.testing.assert_close(restarted[:, 3:], fresh, rtol=0, atol=1e-6)
    assert not torch.allclose(restarted[:, 3:], whole[:, 3:])


def test_the_gradient_flows_back_through_time_until_an_episode_start():
    policy = make_recurrent_actor_critic(BOX, TWO, core="lstm", core_size=4, critic_core="shared", seed=0)
    obs = torch.randn(1, 5, 3, requires_grad=True)
    actions = torch.zeros(1, 5, dtype=torch.int64)
    state = torch.zeros(1, 5, *policy.recurrent_state_shape)
    for starts, reaches_first in ((torch.zeros(1, 5, dtype=torch.bool), True), (torch.tensor([[0, 0, 1, 0, 0]]).bool(), False)):
        obs.grad = None
        log_prob, _, _ = policy.evaluate(obs, actions, recurrent_state=state, is_init=starts)
        log_prob[0, -1].backward()
        assert bool(obs.grad[0, 0].abs().sum() > 0) is reaches_first
        assert obs.grad[0, 3].abs().sum() > 0


@pytest.mark.parametrize("critic_core", ["own", "shared", "none"])
def test_batch_values_read_next_observations_from_the_state_after_the_step(critic_core):
    policy = make_recurrent_actor_critic(BOX, TWO, core="lstm", core_size=6, critic_core=critic_core, seed=0)
    obs = torch.randn(2, 4, 3)
    is_init = torch.tensor([[1, 0, 0, 1], [1, 0, 1, 0]]).bool()
    # as collected: the next observation is the next step's where the episode goes on, a final one where it ends
    next_obs = torch.randn(2, 4, 3)
    goes_on = ~is_init[:, 1:]
    next_obs[:, :3][goes_on] = obs[:, 1:][goes_on]
    states, actions, _ = _rollout(policy, obs, is_init)
    batch = TensorDict({"observation": obs, ("next", "observation"): next_obs, "recurrent_state": states,
                        "is_init": is_init}, [2, 4])
    value, next_value = policy.batch_values(batch)
    _, _, evaluated = policy.evaluate(obs, actions, recurrent_state=states, is_init=is_init)
    torch.testing.assert_close(value, evaluated, rtol=0, atol=1e-6)
    # V(s'_t): the next observation as step t + 1 of the same episode (no reset) sees it
    for t in range(4):
        seq_obs = torch.cat([obs[:, : t + 1], next_obs[:, t : t + 1]], 1)
        seq_init = torch.cat([is_init[:, : t + 1], torch.zeros(2, 1, dtype=torch.bool)], 1)
        seq_states = torch.cat([states[:, : t + 1], states[:, :1]], 1)  # only t = 0 is read
        _, _, values = policy.evaluate(seq_obs, torch.zeros(2, t + 2, dtype=torch.int64), recurrent_state=seq_states,
                                       is_init=seq_init)
        torch.testing.assert_close(next_value[:, t], values[:, -1], rtol=0, atol=1e-6)


def test_ppo_loss_reads_the_memory_keys_and_greedy_acts_deterministically():
    policy = make_recurrent_actor_critic(BOX, TWO, core="gru", core_size=4, seed=0)
    loss = PPOLoss(policy)
    assert loss.in_keys == ["observation", "action", "log_prob", "advantage", "value_target", "recurrent_state", "is_init"]
    obs, is_init = torch.randn(2, 5, 3), torch.zeros(2, 5, dtype=torch.bool)
    states, actions, log_probs = _rollout(policy, obs, is_init)
    batch = TensorDict({"observation": obs, "action": actions, "log_prob": log_probs, "advantage": torch.randn(2, 5),
                        "value_target": torch.randn(2, 5), "recurrent_state": states, "is_init": is_init}, [2, 5])
    out = loss(batch)
    assert out["approx_kl"].abs().item() < 1e-6
    with pytest.raises(KeyError, match="is_init"):
        loss(batch.exclude("is_init"))
    greedy = policy.greedy()
    td = TensorDict({"observation": obs[:, 0], "recurrent_state": states[:, 0]}, [2])
    assert greedy.deterministic and "log_prob" not in greedy(td.clone()).keys()
    assert torch.equal(greedy(td.clone())["action"], greedy(td.clone())["action"])
    assert greedy.core is policy.core
    with pytest.raises(TypeError, match="use batch_values"):
        policy.value(obs)


@pytest.mark.parametrize("kwargs, message", [
    ({"core": "rnn"}, "make_recurrent_actor_critic: core must be 'lstm' or 'gru', got 'rnn'"),
    ({"critic_core": "both"}, "make_recurrent_actor_critic: critic_core must be 'own', 'shared' or 'none', got 'both'"),
    ({"core_size": 0}, "make_recurrent_actor_critic: core_size must be a positive int, got 0"),
])
def test_builder_errors_name_the_argument(kwargs, message):
    with pytest.raises(ValueError) as err:
        make_recurrent_actor_critic(BOX, TWO, **kwargs)
    assert str(err.value) == message
