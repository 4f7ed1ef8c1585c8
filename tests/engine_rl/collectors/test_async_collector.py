"""AsyncCollector: a worker process writes the shared replay buffer while the learner trains.

The buffer itself (one process, a racing writer thread) is tested in tests/engine_rl/replay/test_shared.py.

The worker-process tests share one forkserver (started by the first test, ~5 s on the CI box);
each collector then starts in well under a second.
"""

import dataclasses
import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial

import gymnasium as gym
import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict
from torch import nn

from engine_rl import RLEvents, create_trainer
from engine_rl.algos import DQNLoss, QValuePolicy, mlp
from engine_rl.algos.exploration import EpsilonGreedy
from engine_rl.collectors import AsyncCollector, AsyncCollectorError, make_vec_env
from engine_rl.recipes.base import RECIPES, get_recipe
from engine_rl.replay import ReplayBuffer, SharedReplayBuffer
from handlers import ReplaySampler, Throughput, WeightSync
from support.seeds import seed

CARTPOLE = partial(make_vec_env, "CartPole-v1", 2)


class BrokenSensor(gym.Wrapper):
    """CartPole whose sensor fails at the ``fail_at``-th step of this copy."""

    def __init__(self, env, fail_at):
        super().__init__(env)
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise OSError("pole angle sensor disconnected")
        return self.env.step(action)


def cartpole_failing_at(step):
    """Two CartPole copies; copy 1 raises at its ``step``-th step (built in the worker)."""
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1"), lambda: BrokenSensor(gym.make("CartPole-v1"), step)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


class StepInfo(gym.Wrapper):
    """CartPole whose info carries the step number of the episode under "steps"."""

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.t += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "steps": float(self.t)}


def cartpole_with_step_info():
    """Two CartPole copies reporting info["steps"] (built in the worker)."""
    return gym.vector.SyncVectorEnv([lambda: StepInfo(gym.make("CartPole-v1"))] * 2)


def gone(pid, timeout=5.0):
    """True once process ``pid`` no longer exists (or is a zombie) within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def no_worker_left(collector):
    return collector.pid is not None and gone(collector.pid) and not multiprocessing.active_children()


# -- the collector: worker process -----------------------------------------------------------
def test_collector_checks_its_arguments():
    policy = QValuePolicy(nn.Linear(4, 2))
    with pytest.raises(TypeError, match="argument buffer must be a SharedReplayBuffer .*got ReplayBuffer"):
        AsyncCollector(CARTPOLE, policy, frames_per_batch=32, buffer=ReplayBuffer(1000))
    too_small = r"capacity \(64\) must be at least \(2 \* max_ahead \+ 1\) \* frames_per_batch = 96"
    with pytest.raises(ValueError, match=too_small):
        AsyncCollector(CARTPOLE, policy, frames_per_batch=32, buffer=SharedReplayBuffer(64))
    with pytest.raises(ValueError, match="argument max_ahead must be a positive int, got 0"):
        AsyncCollector(CARTPOLE, policy, frames_per_batch=32, buffer=SharedReplayBuffer(64), max_ahead=0)
    with pytest.raises(TypeError, match="argument policy must be an nn.Module"):
        AsyncCollector(CARTPOLE, lambda td: td, frames_per_batch=32, buffer=SharedReplayBuffer(1000))
    with pytest.raises(ValueError, match="argument context must be 'forkserver' or 'spawn'"):
        AsyncCollector(CARTPOLE, policy, frames_per_batch=32, buffer=SharedReplayBuffer(1000), context="fork")
    with pytest.raises(ValueError, match="AsyncCollector: argument info_keys must be a sequence of non-empty strings"):
        AsyncCollector(CARTPOLE, policy, frames_per_batch=32, buffer=SharedReplayBuffer(1000), info_keys="steps")


def test_batches_are_the_new_frames_already_in_the_buffer_and_shutdown_leaves_no_process():
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(CARTPOLE, QValuePolicy(nn.Linear(4, 2)), frames_per_batch=32, buffer=buffer, seed=0)
    with collector:
        batches = [b for _, b in zip(range(4), collector)]
        assert collector.is_alive and collector.worker_frames >= 128
    assert [b.batch_size.numel() for b in batches] == [32] * 4
    assert collector.frames == len(buffer) == 128 and collector.batches == 4
    stored = buffer.storage.get(torch.arange(128))
    assert torch.equal(torch.cat([b["observation"] for b in batches]), stored["observation"])
    assert {"observation", "action", "next"} <= set(batches[1].keys())
    assert bool(batches[2]["next", "episode_length"].ge(1).all())
    assert no_worker_left(collector) and not buffer.has_writer
    collector.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="AsyncCollector: shut down"):
        next(iter(collector))


def test_worker_records_info_keys_into_the_buffer():
    buffer = SharedReplayBuffer(1_000, seed=0)
    push_left = nn.Linear(4, 2)  # always action 0: the pole falls within a few dozen steps, whatever torch's seed
    with torch.no_grad():
        push_left.weight.zero_()
        push_left.bias.copy_(torch.tensor([1.0, 0.0]))
    with AsyncCollector(cartpole_with_step_info, QValuePolicy(push_left), frames_per_batch=64, buffer=buffer,
                        seed=0, info_keys=["steps"]) as collector:
        batches = [b for _, b in zip(range(3), collector)]
    for batch in batches:  # every stored row is a transition: its step number is the episode length
        steps = batch["next", "info", "steps"]
        assert steps.dtype == torch.float32
        assert torch.equal(steps, batch["next", "episode_length"].float())
    assert bool(torch.cat([b["next", "done"] for b in batches]).any())  # episodes ended (and restarted)
    stored = buffer.storage.get(torch.arange(len(buffer)))
    assert torch.equal(stored["next", "info", "steps"], torch.cat([b["next", "info", "steps"] for b in batches]))


def test_weights_pushed_by_the_learner_reach_the_worker():
    learner = QValuePolicy(nn.Linear(4, 2))
    buffer = SharedReplayBuffer(1_000, seed=0)
    with AsyncCollector(CARTPOLE, learner, frames_per_batch=32, buffer=buffer, seed=0) as collector:
        it = iter(collector)
        next(it)
        with torch.no_grad():  # the learner now always prefers action 1
            learner.qnet.weight.zero_()
            learner.qnet.bias.copy_(torch.tensor([0.0, 1.0]))
        collector.update_policy_weights_(TensorDict.from_module(learner).data)
        assert collector.weights_version == 1
        actions = [next(it)["action"] for _ in range(4)]  # at most 2 batches were collected before
        assert collector.worker_weights_version == 1
        assert bool((actions[-1] == 1).all())
        collector.update_policy_weights_(learner.state_dict())  # a state_dict works too
        with pytest.raises(KeyError, match=r"weights do not match the policy: missing \['qnet.bias'\]"):
            collector.update_policy_weights_(TensorDict({"qnet": {"weight": torch.zeros(2, 4)}}, []))


def test_learner_and_worker_overlap_and_utd_is_logged():
    """DQN on CartPole: frames are written while optim steps run; both sides progress."""
    torch.manual_seed(0)
    qnet = mlp(4, 2, (32,))
    explore = EpsilonGreedy(QValuePolicy(qnet), num_actions=2, annealing_frames=500, seed=0)
    buffer = SharedReplayBuffer(5_000, seed=0)
    collector = AsyncCollector(CARTPOLE, explore, frames_per_batch=64, buffer=buffer, seed=0)
    loss = DQNLoss(qnet, gamma=0.99)
    trainer = create_trainer(collector, loss, torch.optim.Adam(qnet.parameters(), lr=1e-3), total_frames=1_280,
                             learning_starts=128, optim_steps_per_batch=24)
    ReplaySampler(buffer, 32).attach(trainer)
    sync = WeightSync(explore, collector)
    sync.attach(trainer)
    collector.attach(trainer)
    Throughput().attach(trainer)
    during = {}  # iteration -> worker frames seen at each optim step

    @trainer.on(RLEvents.OPTIM_STEP_DONE)
    def record(engine):
        during.setdefault(engine.state.iteration, []).append(collector.worker_frames)

    trainer.run()
    s = trainer.state
    assert s.frames == 1_280 and len(buffer) == 1_280 and s.optim_steps == 24 * (s.iteration - 1)
    assert s.metrics["utd"] == pytest.approx(s.optim_steps / s.frames)
    grew = [it for it, seen in during.items() if seen[-1] > seen[0]]
    assert len(grew) >= len(during) // 2  # the worker collected while the learner optimized
    assert sync.num_syncs == s.iteration + 1 and collector.worker_weights_version >= s.iteration - 2
    assert no_worker_left(collector)  # stopped on COMPLETED


def test_killed_worker_raises_a_clear_error_and_leaves_no_process():
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(CARTPOLE, QValuePolicy(nn.Linear(4, 2)), frames_per_batch=32, buffer=buffer, seed=0)
    it = iter(collector)
    next(it)
    os.kill(collector.pid, signal.SIGKILL)
    with pytest.raises(AsyncCollectorError, match=r"worker process \(pid \d+\) was killed by SIGKILL") as info:
        for _ in range(10):
            next(it)
    assert info.value.exitcode == -signal.SIGKILL
    assert no_worker_left(collector) and not buffer.has_writer
    assert collector.state_dict()["frames"] == collector.frames  # still answers, from what it knows


@pytest.mark.parametrize(
    "env_fn, policy, match",
    [
        (partial(make_vec_env, "NoSuchEnv-v0", 2), QValuePolicy(nn.Linear(4, 2)),
         "raised ValueError: make_vec_env: env_id 'NoSuchEnv-v0' is not a registered gymnasium env"),
        (CARTPOLE, QValuePolicy(nn.Linear(3, 2)), "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    ],
    ids=["env", "policy"],
)
def test_exception_in_the_worker_is_raised_in_the_learner_with_its_traceback(env_fn, policy, match):
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(env_fn, policy, frames_per_batch=32, buffer=buffer, seed=0)
    with pytest.raises(AsyncCollectorError, match=match) as info:
        next(iter(collector))
    assert "--- worker traceback ---" in str(info.value) and "_worker_main" in info.value.worker_traceback
    assert no_worker_left(collector)


def test_env_error_mid_run_is_raised_at_the_next_batch_naming_the_env_copy():
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(partial(cartpole_failing_at, 100), QValuePolicy(nn.Linear(4, 2)), frames_per_batch=32,
                               buffer=buffer, seed=0)
    it = iter(collector)
    batches = 0
    with pytest.raises(AsyncCollectorError, match=r"raised EnvError: GymCollector: env.step raised OSError: pole angle "
                                                  r"sensor disconnected -- in env 1 of 2") as info:
        for batches in range(1, 20):
            next(it)
    assert batches >= 3  # the first batches came through; the failure came at the next one
    assert "OSError: pole angle sensor disconnected" in info.value.worker_traceback
    assert no_worker_left(collector) and len(buffer) == collector.frames


def test_ctrl_c_in_the_learner_stops_the_worker_which_itself_ignores_sigint():
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(CARTPOLE, QValuePolicy(nn.Linear(4, 2)), frames_per_batch=32, buffer=buffer, seed=0)
    net = nn.Linear(4, 1)
    trainer = create_trainer(collector, lambda td: {"loss": net(td["observation"]).mean()},
                             torch.optim.SGD(net.parameters(), lr=0.0), total_frames=10_000)

    @trainer.on(Events.ITERATION_COMPLETED(once=2))
    def interrupt(engine):
        os.kill(collector.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends the whole group
        time.sleep(0.2)
        assert collector.is_alive
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), collector:
        trainer.run()
    assert no_worker_left(collector)


def test_garbage_collected_collector_stops_its_worker():
    buffer = SharedReplayBuffer(1_000, seed=0)
    collector = AsyncCollector(CARTPOLE, QValuePolicy(nn.Linear(4, 2)), frames_per_batch=32, buffer=buffer, seed=0)
    it = iter(collector)
    next(it)
    pid = collector.pid
    del it, collector
    gc.collect()
    assert gone(pid) and not multiprocessing.active_children()


def test_state_dict_round_trips_weights_only_and_the_worker_resumes_from_it(tmp_path):
    def build():
        explore = EpsilonGreedy(QValuePolicy(nn.Linear(4, 2)), num_actions=2, annealing_frames=1_000, seed=0)
        return AsyncCollector(CARTPOLE, explore, frames_per_batch=32, buffer=SharedReplayBuffer(1_000), seed=3)

    with build() as collector:
        for _, _batch in zip(range(3), collector):
            pass
        state = collector.state_dict()
    worker = state["worker"]
    assert state["frames"] == 96 and worker["collector"]["frames"] >= 96
    acted = worker["policy"]["_extra_state"]["frames"]  # exploration progress (reset steps included)
    assert acted >= worker["collector"]["frames"]
    torch.save(state, tmp_path / "collector.pt")
    resumed = build()
    resumed.load_state_dict(torch.load(tmp_path / "collector.pt", weights_only=True))
    with resumed:
        next(iter(resumed))
        with pytest.raises(RuntimeError, match="load_state_dict: the worker already started"):
            resumed.load_state_dict(state)
        later = resumed.state_dict()["worker"]
    assert resumed.frames == 128
    assert later["collector"]["frames"] >= worker["collector"]["frames"] + 32
    assert later["policy"]["_extra_state"]["frames"] >= acted + 32
    assert resumed.state_dict()["worker"] is not None  # kept from shutdown


@pytest.mark.slow
@pytest.mark.ci
def test_worker_exits_when_the_learner_process_is_killed(tmp_path):
    """SIGKILL the learner (a fresh interpreter: ~9 s here, hence slow): its worker exits by itself."""
    script = textwrap.dedent(
        """
        import sys, time
        from functools import partial
        from torch import nn
        from engine_rl.algos import QValuePolicy
        from engine_rl.collectors import AsyncCollector, make_vec_env
        from engine_rl.replay import SharedReplayBuffer
        if __name__ == "__main__":
            c = AsyncCollector(partial(make_vec_env, "CartPole-v1", 2), QValuePolicy(nn.Linear(4, 2)),
                               frames_per_batch=32, buffer=SharedReplayBuffer(1000), seed=0)
            next(iter(c))
            print(c.pid, flush=True)
            time.sleep(60)
        """
    )
    path = tmp_path / "learner.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        pid = int(proc.stdout.readline())
        assert not gone(pid, timeout=0.3)
        proc.kill()
        proc.wait()
        assert gone(pid, timeout=10.0), "the worker outlived its learner"
    finally:
        proc.kill()
        proc.wait()


# -- the recipe ------------------------------------------------------------------------------
SMALL = {"async_collection": True, "total_frames": 3_072, "learning_starts": 512, "optim_steps_per_batch": 16,
         "hidden": (32, 32), "eval_every": 4, "eval_episodes": 3, "num_envs": 4, "buffer_size": 4_096}


def test_dqn_cartpole_async_runs_checkpoints_and_resumes(tmp_path):
    from engine_rl.run.driver import make_config, train

    config = make_config("dqn-cartpole", SMALL)
    paused = train("dqn-cartpole", config, tmp_path, progress=False, checkpoint_every=2, until_frames=1_536)
    assert paused["paused"] and not multiprocessing.active_children()
    summary = train("dqn-cartpole", config, tmp_path, progress=False, checkpoint_every=2, resume=True)
    assert summary["frames"] == 3_072 and not summary["paused"] and not multiprocessing.active_children()
    checkpoint = torch.load(summary["checkpoint"], weights_only=True)
    worker = checkpoint["collector"]["worker"]
    assert checkpoint["collector"]["frames"] == 3_072 and worker["collector"]["frames"] >= 3_072
    assert checkpoint["replay"]["storage"]["size"] == 3_072
    train_lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in train_lines if r["kind"] == "train" and "utd" in r]
    assert train_lines and all(r["utd"] == pytest.approx(r["optim_steps"] / r["frames"]) for r in train_lines)


def test_killed_worker_mid_run_fails_the_run_cleanly_and_its_checkpoints_resume(tmp_path, monkeypatch):
    from engine_rl.recipes import dqn_cartpole
    from engine_rl.run.checkpoint import latest_checkpoint
    from engine_rl.run.driver import make_config, train

    build = dqn_cartpole.build_dqn

    def build_then_kill_at_batch_5(cfg):
        setup = build(cfg)
        collector = setup.trainer.collector
        setup.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=5), lambda _: os.kill(collector.pid, 9))
        return setup

    config = make_config("dqn-cartpole", SMALL)
    recipe = get_recipe("dqn-cartpole")
    monkeypatch.setitem(RECIPES, "dqn-cartpole", dataclasses.replace(recipe, build=build_then_kill_at_batch_5))
    with pytest.raises(AsyncCollectorError, match="was killed by SIGKILL"):
        train("dqn-cartpole", config, tmp_path, progress=False, checkpoint_every=2)
    assert not multiprocessing.active_children()
    # checkpoints at batches 2 and 4; the one due at batch 6 (a batch written before the kill) is refused
    assert latest_checkpoint(tmp_path / "checkpoints").name == "checkpoint_1024.pt"
    monkeypatch.undo()
    summary = train("dqn-cartpole", config, tmp_path, progress=False, checkpoint_every=2, resume=True)
    assert summary["frames"] == 3_072 and summary["resumed_from_frames"] == 1024


@pytest.mark.slow
@pytest.mark.ci
def test_dqn_cartpole_async_learns():
    """Async DQN (seed 0, default config) reaches an eval return >= 200 within 90 s on the 2-core box.
    Margin checked over seeds 0-4 (--seed-offset 0-4): reached by 6,144 frames and 12 s at the latest."""
    from engine_rl.run.driver import make_config

    torch.manual_seed(seed(0))
    setup = get_recipe("dqn-cartpole").build(make_config("dqn-cartpole", {"async_collection": True, "eval_every": 4,
                                                                          "seed": seed(0)}))
    trainer, reached = setup.trainer, {}
    Throughput().attach(trainer)

    @trainer.on(Events.ITERATION_COMPLETED)
    def stop(engine):
        if engine.state.metrics.get("eval_return_mean", 0) >= 200 or time.perf_counter() - start > 90:
            reached.update(engine.state.metrics, frames=engine.state.frames, wall=time.perf_counter() - start)
            engine.terminate()

    start = time.perf_counter()
    try:
        trainer.run()
    finally:
        setup.close()
    assert reached["eval_return_mean"] >= 200 and reached["wall"] < 90, reached
    assert reached["utd"] == pytest.approx(trainer.state.optim_steps / trainer.state.frames)
    assert not multiprocessing.active_children()
