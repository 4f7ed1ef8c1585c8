"""RayCollector: batches as a GymCollector's, weights to the actors, a killed actor, state, failures.

One local Ray (2 CPUs) serves the whole module; each collector uses it as it is (and so leaves it
running), the fixture shuts it down at the end.
"""

import os
import signal
import time
import warnings
from functools import partial

import pytest
import torch
from torch import nn

ray = pytest.importorskip("ray")

from engine_rl.collectors import GymCollector, make_vec_env  # noqa: E402
from engine_rl.collectors.ray_collector import RayCollector, RayCollectorError, check_ray_address  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


class Constant(nn.Module):
    """Acts with the action its parameter holds (so the weights an actor holds show in its batch)."""

    def __init__(self, action: int = 0) -> None:
        super().__init__()
        self.action = nn.Parameter(torch.tensor(float(action)))

    def forward(self, td):
        return td.set("action", torch.full(td.batch_size, int(self.action.item()), dtype=torch.int64))


def make(sync, env_fn=partial(make_vec_env, "CartPole-v1"), **kwargs):
    options = dict(num_envs=4, frames_per_batch=40, num_workers=2, sync=sync, seed=0)
    return RayCollector(env_fn, Constant(), **{**options, **kwargs})


def test_sync_batch_is_the_gym_collectors():
    # the actors' env copies get the seeds of one GymCollector's 4 copies (copy i: seed + i, as a
    # SyncVectorEnv seeds them): with a policy that ignores its input, the joined batch is the same frames
    sync_env = partial(make_vec_env, "CartPole-v1", mode="sync")
    with make(sync=True, env_fn=sync_env) as collector, GymCollector(sync_env(4), Constant(),
                                                    frames_per_batch=40, seed=0) as local:
        for ours, theirs in zip(collector, local):
            assert ours.batch_size == theirs.batch_size == torch.Size([4, 10])
            assert (ours == theirs).all()
            if collector.batches == 2:
                break
        assert collector.frames == 80 and collector.policy_lag == 0


def test_weights_reach_the_actors_and_the_lag_counts_updates():
    with make(sync=False) as collector:
        batches = iter(collector)
        first = next(batches)
        assert first.batch_size == torch.Size([2, 20])  # one actor's frames_per_batch
        collector.update_policy_weights_(Constant(1))
        lags, actions = [], []
        for _ in range(4):
            batch = next(batches)
            lags.append(collector.policy_lag)
            actions.append(int(batch["action"][0, -1]))
            collector.update_policy_weights_(Constant(1))
        # round-robin, an actor's next request sent as its batch is taken (before that batch's update):
        # both first requests and actor 0's second carry the initial weights, the later ones newer
        # weights, each batch's two updates old when it is taken
        assert actions == [0, 0, 1, 1]
        assert lags == [1, 2, 2, 2]
        assert collector.frames == 5 * 40


def test_a_killed_actor_is_restarted_and_its_batch_dropped():
    with make(sync=True) as collector:
        batches = iter(collector)
        next(batches)
        pid = collector.pids()[1]
        os.kill(pid, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match=r"actor 1 died .* dropped and training continues"):
            batch = next(batches)
        assert batch.batch_size == torch.Size([4, 10])
        assert collector.frames == 80 and collector.restarts == [0, 1]  # the dropped share is not counted
        assert collector.pids()[1] != pid
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            next(batches)  # the restarted actor delivers again


def test_sync_state_resumes_exactly():
    with make(sync=True) as straight:
        batches = iter(straight)
        next(batches)
        state = straight.state_dict()
        expected = next(batches)
    assert state["frames"] == 40 and len(state["workers"]) == 2
    with make(sync=True) as resumed:
        resumed.load_state_dict(state)
        assert (next(iter(resumed)) == expected).all()
        assert resumed.frames == 80


def test_state_after_shutdown_is_the_last_known():
    collector = make(sync=True)
    next(iter(collector))
    collector.shutdown()
    state = collector.state_dict()
    assert all(worker is not None for worker in state["workers"]) and state["frames"] == 40


def test_an_actor_that_cannot_be_made_raises():
    def broken(n):
        raise OSError("no such env")

    with RayCollector(broken, Constant(), num_envs=2, frames_per_batch=2, num_workers=2, seed=0) as collector:
        with pytest.raises(RayCollectorError, match="actor 0 could not be made: .*no such env"):
            next(iter(collector))


def test_bad_arguments_name_what_is_accepted():
    with pytest.raises(ValueError, match="num_envs must be a multiple of num_workers=2, got 3"):
        make(sync=True, num_envs=3, frames_per_batch=30)
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        make(sync=True, num_workers=0)


def test_an_unreachable_address_fails_fast():
    start = time.monotonic()
    with pytest.raises(ValueError, match="no Ray head answers there"):
        check_ray_address("10.255.255.1:6379", owner="demo", timeout=1.0)  # unroutable: no answer at all
    assert time.monotonic() - start < 5
    with pytest.raises(ValueError, match="HOST:PORT"):
        check_ray_address("localhost", owner="demo")
