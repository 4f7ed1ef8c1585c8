"""The worker-process side of :class:`~engine_rl.collectors.AsyncCollector`.

The worker owns its env and its own copy of the policy, steps them with the ordinary
:class:`~engine_rl.collectors.GymCollector` (no second rollout loop), loads the newest weights
the learner published (:class:`~engine_rl.collectors.shared_weights.SharedWeights`), and writes
each batch into the shared replay buffer when the learner has room for it. Failures go back to
the learner as text. The learner's side of the process is
:mod:`engine_rl.collectors.async_process`.
"""

from __future__ import annotations

import pickle
import queue
import signal
import traceback
from collections.abc import Callable
from typing import Any

import torch
from gymnasium.vector import VectorEnv
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.collectors.gym import GymCollector
from engine_rl.collectors.shared_weights import SharedWeights
from engine_rl.replay import SharedWriter
from engine_rl.replay.storage import batch_rows

_POLL_S = 0.05  # how often a waiting side checks on the other


class _Worker:
    """The worker process's loop: sync weights, collect a batch, wait for room, write it."""

    def __init__(
        self,
        collector: GymCollector,
        policy: nn.Module,
        weights: SharedWeights,
        frames: torch.Tensor,
        ready: Any,
        space: Any,
        stop: Any,
        commands: Any,
        results: Any,
        learner_alive: Any,
    ) -> None:
        self.collector = collector
        self.policy = policy
        self.params = TensorDict.from_module(policy)
        self.weights = weights
        self.frames = frames.numpy()  # shared: frames collected
        self.ready, self.space, self.stop = ready, space, stop
        self.commands, self.results = commands, results
        self.writer: SharedWriter | None = None
        self.learner_alive = learner_alive

    def running(self) -> bool:
        # the learner holds the other end of this pipe: it reads as closed (poll() is True) once
        # the learner's process is gone, however it ended (the parent pid says nothing under a
        # forkserver, which outlives the learner as long as this worker runs)
        return not self.stop.is_set() and not self.learner_alive.poll()

    def serve(self, block: bool) -> None:
        """Answer the learner's commands: the writer handle, state requests."""
        while True:
            try:
                command = self.commands.get(timeout=_POLL_S) if block else self.commands.get_nowait()
            except queue.Empty:
                return
            block = False
            kind = command[0]
            if kind == "writer":
                data, counters, cursor = command[1]
                self.writer = SharedWriter(data, counters, cursor=cursor)
            elif kind == "state":
                state = {"collector": self.collector.state_dict(), "policy": self.policy.state_dict()}
                self.results.put(("state", command[1], state))

    def collect(self) -> TensorDictBase:
        self.weights.load_into(self.params)
        batch = self.collector.collect()
        self.frames[0] += batch.numel()
        return batch

    def run(self) -> None:
        batch = self.collect()
        self.results.put(("first", batch_rows(batch)))
        while self.writer is None:
            if not self.running():
                return
            self.serve(block=True)
        while self.running():
            batch = self.collect()
            self.serve(block=False)
            while not self.space.acquire(timeout=_POLL_S):
                if not self.running():
                    return
                self.serve(block=False)
            self.writer.write(batch)
            self.ready.release()


def _worker_main(
    env_fn: Callable[[], VectorEnv],
    policy_bytes: bytes,
    frames_per_batch: int,
    seed: int | None,
    resume_bytes: bytes,
    weights: SharedWeights,
    frames: torch.Tensor,
    num_threads: int,
    info_keys: tuple[str, ...],
    ready: Any,
    space: Any,
    stop: Any,
    commands: Any,
    results: Any,
    learner_alive: Any,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    torch.set_num_threads(num_threads)
    collector, failed = None, False
    try:
        # pickled by the learner (not by torch.multiprocessing, which shares tensors by file
        # descriptor and loses the temporaries some objects pickle, e.g. a torch.Generator's state)
        policy = pickle.loads(policy_bytes)
        resume = pickle.loads(resume_bytes)
        env = env_fn()
        collector = GymCollector(env, policy, frames_per_batch=frames_per_batch, seed=seed, info_keys=info_keys)
        if resume is not None:
            if resume.get("policy") is not None:
                policy.load_state_dict(resume["policy"])
            if resume.get("collector") is not None:
                collector.load_state_dict(resume["collector"])
        _Worker(collector, policy, weights, frames, ready, space, stop, commands, results, learner_alive).run()
    except BaseException as err:  # noqa: BLE001 -- every failure goes to the learner
        failed = True
        results.put(("error", type(err).__name__, str(err), traceback.format_exc()))
    finally:
        if collector is not None:
            try:
                collector.shutdown()
            except Exception:  # noqa: BLE001 -- closing after a failure; the first error is what matters
                pass
        results.close()
        if failed and not learner_alive.poll():
            results.join_thread()  # make sure the error reaches the learner
        else:
            results.cancel_join_thread()  # stopped on request, or nobody left to read: do not wait
