"""The collector carries a recurrent policy's state: stored per frame, reset where episodes start,
kept across batches and in the collector's state_dict; refused where it cannot be carried."""

import pytest
import torch
from torch import nn

from engine_rl.collectors import GymCollector, TorchEnvCollector, make_vec_env, run_episodes
from engine_rl.envs import make_torch_env
from support.seeds import seed


class StepCounter(nn.Module):
    """A recurrent policy whose state counts the steps it took in the current episode (action: 0 or 1 by
    the count's parity, so episodes end at different steps); the stored state of a frame must equal
    the frame's step in its episode, minus one."""

    recurrent_state_shape = (2,)

    def forward(self, td):
        state = td["recurrent_state"]
        td.set("action", (state[:, 0].long() % 2))
        td.set(("next", "recurrent_state"), state + torch.tensor([1.0, 2.0]))
        return td


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync"])  # next-step and same-step autoreset
def test_stored_state_is_the_step_in_the_episode_across_batches(mode):
    env = make_vec_env("CartPole-v1", 3, mode=mode)
    with GymCollector(env, StepCounter(), frames_per_batch=3 * 40, seed=seed(0)) as collector:
        batches = [collector.collect() for _ in range(4)]
    starts = 0
    for batch in batches:
        steps_before = batch["next", "episode_length"] - 1
        assert batch["recurrent_state"].dtype == torch.float32 and batch["recurrent_state"].shape == (3, 40, 2)
        assert torch.equal(batch["recurrent_state"][..., 0], steps_before.float())
        assert torch.equal(batch["recurrent_state"][..., 1], 2 * steps_before.float())
        assert torch.equal(batch["is_init"], steps_before == 0)
        assert ("next", "recurrent_state") not in batch.keys(include_nested=True)  # rebuilt, not stored
        starts += int(batch["is_init"].sum())
    assert starts > 3  # episodes ended and restarted inside the batches


def test_state_dict_carries_the_live_states_so_a_loaded_collector_continues_exactly():
    def collector():
        return GymCollector(make_vec_env("CartPole-v1", 2), StepCounter(), frames_per_batch=2 * 16, seed=seed(1))

    a = collector()
    first = a.collect()
    saved = a.state_dict()
    assert saved["stepper"]["memory"]["state"].shape == (2, 2)
    assert torch.equal(saved["stepper"]["memory"]["state"][:, 0],
                       first["next", "episode_length"][:, -1].float() * ~first["next", "done"][:, -1])
    expected = [a.collect() for _ in range(3)]
    b = collector()
    b.load_state_dict(saved)
    for want in expected:
        got = b.collect()
        assert torch.equal(got["recurrent_state"], want["recurrent_state"]) and torch.equal(got["is_init"], want["is_init"])
    a.shutdown(), b.shutdown()


def test_a_feed_forward_state_does_not_load_into_a_recurrent_collector():
    def left(td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))

    with GymCollector(make_vec_env("CartPole-v1", 2), left, frames_per_batch=8, seed=seed(2)) as plain:
        plain.collect()
        state = plain.state_dict()
    with GymCollector(make_vec_env("CartPole-v1", 2), StepCounter(), frames_per_batch=8) as recurrent:
        with pytest.raises(ValueError, match="^GymCollector.load_state_dict: the state is from a feed-forward policy, "
                                             "this one is recurrent$"):
            recurrent.load_state_dict(state)


def test_evaluation_carries_the_state_within_each_episode():
    seen = []

    class Recording(StepCounter):
        def forward(self, td):
            seen.append(td["recurrent_state"][:, 0].clone())
            return super().forward(td)

    result = run_episodes(make_vec_env("CartPole-v1", 2), Recording(), num_episodes=2, seed=seed(3))
    counts = torch.stack(seen)  # [steps, 2]: 0, 1, 2, ... within each copy's first episode
    for copy in range(2):
        length = int(result["length"][copy])
        assert counts[:length, copy].tolist() == list(range(length))


def test_a_recurrent_policy_must_write_its_next_state():
    class Forgetful(nn.Module):
        recurrent_state_shape = (1,)

        def forward(self, td):
            return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))

    with GymCollector(make_vec_env("CartPole-v1", 2), Forgetful(), frames_per_batch=4) as collector:
        with pytest.raises(KeyError, match=r"GymCollector: a recurrent policy \(it has recurrent_state_shape\) must "
                                           r"write its state after the step under \('next', 'recurrent_state'\)"):
            collector.collect()


def test_the_torch_env_collector_and_evaluation_refuse_a_recurrent_policy():
    env = make_torch_env("CartPole-v1", 2, device="cpu")
    with pytest.raises(ValueError, match="^TorchEnvCollector: StepCounter is a recurrent policy "
                                         r"\(recurrent_state_shape \(2,\)\), which TorchEnvCollector does not support; "
                                         r"collect with GymCollector \(env_backend 'gymnasium'\)$"):
        TorchEnvCollector(env, StepCounter(), frames_per_batch=4)
    with pytest.raises(ValueError, match="^run_episodes on a TorchEnv: StepCounter is a recurrent policy"):
        run_episodes(env, StepCounter(), num_episodes=1)
