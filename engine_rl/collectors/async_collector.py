"""Asynchronous collection: a :class:`GymCollector` in a background process writing the replay buffer.

:class:`AsyncCollector` starts a worker process (``forkserver`` by default: forking a process
that runs torch threads is unsafe) that owns its env and its own copy of the policy, steps them
with a :class:`~engine_rl.collectors.GymCollector` and writes every batch straight into a
:class:`~engine_rl.replay.SharedReplayBuffer` while the learner optimizes. The trainer
iterates the collector like any other: each batch it yields holds the frames the worker wrote
since the previous one (flat, ``[n]``), already in the buffer — so ``state.frames`` counts
collected frames and ``BATCH_COLLECTED`` handlers (episode statistics) see them, but **no**
:class:`~handlers.ReplayExtender` may be attached: it would store them twice.

Wiring (what ``dqn-cartpole --set async_collection=true`` does)::

    buffer = SharedReplayBuffer(100_000, seed=0)
    collector = AsyncCollector(partial(make_vec_env, "CartPole-v1", 8), explore,
                               frames_per_batch=256, buffer=buffer, seed=0)
    trainer = create_trainer(collector, loss, optimizer, ...)
    ReplaySampler(buffer, 64).attach(trainer)        # no ReplayExtender
    WeightSync(explore, collector).attach(trainer)   # learner weights -> worker, each batch
    collector.attach(trainer)                        # stop the worker when training completes

Pacing. The worker may write ``max_ahead`` batches that the learner has not taken yet; then it
waits. With the default 1 the learner trains on each batch once, at its configured updates per
frame, while the worker collects the next one (policy lag: up to two batches); a larger value
lets collection run further ahead and the updates-per-frame ratio (``utd``, logged by
:class:`~handlers.Throughput`) drop when the learner is the slower side.

Weights. :meth:`AsyncCollector.update_policy_weights_` (what :class:`~handlers.WeightSync`
calls) copies the learner's weights into a shared-memory copy and bumps a version; the worker
loads the newest complete version before each batch. Neither side waits for the other (see
:class:`~engine_rl.collectors.shared_weights.SharedWeights`).

Failures and shutdown. An exception in the worker (an env error, a policy error) is raised in
the learner at its next batch as :class:`AsyncCollectorError`, with the worker's traceback; a
worker that dies (killed) is detected by the learner while it waits, and raises the same error
naming the exit code or signal. The worker ignores Ctrl-C (the learner owns it) and exits on
its own once the learner's process is gone, however it ended. :meth:`AsyncCollector.shutdown`
— called by a ``with`` block, by :meth:`AsyncCollector.attach`'s ``COMPLETED`` handler, by a
recipe's closers, or at last when the collector is garbage-collected or the interpreter exits —
stops the worker: ask, join with a timeout, then terminate, then kill. No process outlives it.
The process plumbing is :mod:`engine_rl.collectors.async_process`, the worker's loop
:mod:`engine_rl.collectors.async_worker`.

Scripts. The worker is started with ``forkserver`` (or ``spawn``), which imports the main
module again in the new process: as with any such ``multiprocessing`` use, a script must run
its training under ``if __name__ == "__main__":`` (``engine-rl train`` does), and ``env_fn``,
the policy's classes and everything they need must be importable there.

Checkpoints. :meth:`AsyncCollector.state_dict` asks the worker for its collector state (env
state, episode counters) and its policy's ``state_dict`` (e.g. the exploration schedule) and
adds the learner-side counters; a collector loaded from it starts its worker from there. The
frames in flight when it was taken (at most ``max_ahead + 1`` batches) are not in it.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from gymnasium.vector import VectorEnv
from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.checks import positive_int, positive_number
from engine_rl.collectors.async_process import AsyncCollectorError, WorkerProcess
from engine_rl.collectors.async_worker import _POLL_S
from engine_rl.collectors.info import check_info_keys
from engine_rl.collectors.shared_weights import SharedWeights
from engine_rl.replay import SharedReplayBuffer
from engine_rl.keys import nest_keys

__all__ = ["AsyncCollector", "AsyncCollectorError"]


class AsyncCollector:
    """Collect in a background process that writes a shared replay buffer; iterate the new frames.

    See the module docstring for the wiring, pacing, weights, failures and checkpoints.

    Args:
        env_fn: picklable callable building the worker's gymnasium vector env (e.g.
            ``functools.partial(make_vec_env, "CartPole-v1", 8)``); it runs in the worker.
        policy: the acting policy (an ``nn.Module`` on the CPU, e.g. an exploration wrapper
            around the learner's network). It is copied: the worker acts with its own copy,
            which :meth:`update_policy_weights_` refreshes.
        frames_per_batch: frames of each batch the worker collects (a multiple of the env's
            ``num_envs``) — the unit it writes in.
        buffer: the :class:`~engine_rl.replay.SharedReplayBuffer` the worker writes and the
            learner samples; its capacity must be at least ``(2 * max_ahead + 1) * frames_per_batch``.
        seed: seed of the worker's envs (copy ``i`` gets ``seed + i``).
        max_ahead: batches the worker may write before the learner takes them.
        context: multiprocessing start method, ``"forkserver"`` or ``"spawn"``.
        num_threads: torch threads of the worker.
        timeout: seconds to wait for the worker to answer a state request.
        info_keys: scalar entries of the env's ``info`` the worker records per frame under
            ``("next", "info", key)``, as :class:`~engine_rl.collectors.GymCollector` does; they
            are stored in the buffer with the rest of each batch.

    Examples:
        >>> from functools import partial
        >>> from engine_rl.algos import QValuePolicy
        >>> from engine_rl.collectors import make_vec_env
        >>> from engine_rl.replay import SharedReplayBuffer
        >>> policy = QValuePolicy(nn.Linear(4, 2))
        >>> buffer = SharedReplayBuffer(1_000, seed=0)
        >>> with AsyncCollector(partial(make_vec_env, "CartPole-v1", 2), policy,
        ...                     frames_per_batch=32, buffer=buffer, seed=0) as collector:
        ...     batches = [batch for _, batch in zip(range(3), collector)]
        >>> [b.batch_size for b in batches], len(buffer), collector.frames
        ([torch.Size([32]), torch.Size([32]), torch.Size([32])], 96, 96)
    """

    def __init__(
        self,
        env_fn: Callable[[], VectorEnv],
        policy: nn.Module,
        *,
        frames_per_batch: int,
        buffer: SharedReplayBuffer,
        seed: int | None = None,
        max_ahead: int = 1,
        context: str = "forkserver",
        num_threads: int = 1,
        timeout: float = 60.0,
        info_keys: Sequence[str] = (),
    ) -> None:
        if not callable(env_fn):
            raise TypeError(f"AsyncCollector: argument env_fn must be callable, got {type(env_fn).__name__}")
        if not isinstance(policy, nn.Module):
            raise TypeError(f"AsyncCollector: argument policy must be an nn.Module, got {type(policy).__name__}")
        ints = (("frames_per_batch", frames_per_batch), ("max_ahead", max_ahead), ("num_threads", num_threads))
        for name, value in ints:
            positive_int(value, name=f"argument {name}", owner="AsyncCollector")
        if not isinstance(buffer, SharedReplayBuffer):
            raise TypeError(
                "AsyncCollector: argument buffer must be a SharedReplayBuffer (the worker writes it), "
                f"got {type(buffer).__name__}"
            )
        need = (2 * max_ahead + 1) * frames_per_batch
        if buffer.capacity < need:
            raise ValueError(
                f"AsyncCollector: the buffer's capacity ({buffer.capacity}) must be at least "
                f"(2 * max_ahead + 1) * frames_per_batch = {need}"
            )
        if context not in ("forkserver", "spawn"):
            raise ValueError(f"AsyncCollector: argument context must be 'forkserver' or 'spawn', got {context!r}")
        positive_number(timeout, name="argument timeout", owner="AsyncCollector")
        self.info_keys = check_info_keys(info_keys, owner="AsyncCollector")
        self.env_fn = env_fn
        self.frames_per_batch = frames_per_batch
        self.buffer = buffer
        self.seed = seed
        self.max_ahead = max_ahead
        self.context = context
        self.num_threads = num_threads
        self.timeout = float(timeout)
        #: Frames handed to the trainer (committed to the buffer).
        self.frames = 0
        #: Batches handed to the trainer.
        self.batches = 0
        self._policy = copy.deepcopy(policy)
        self._weights = SharedWeights(self._policy, owner="AsyncCollector.update_policy_weights_")
        self._worker_frames = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._resume: Mapping[str, Any] | None = None  # worker state to start from
        self._worker_state: dict[str, Any] | None = None  # the latest one received
        self._worker: WorkerProcess | None = None
        self._first: TensorDictBase | None = None
        self._states: dict[int, dict[str, Any]] = {}
        self._requests = 0
        self._closed = False

    # -- properties -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts)."""
        return None if self._worker is None else self._worker.pid

    @property
    def is_alive(self) -> bool:
        """True while the worker process runs."""
        return self._worker is not None and self._worker.is_alive

    @property
    def env_unsupported(self) -> str | None:
        """Why the loaded state holds no env state of the worker's collector (its envs start new
        episodes: :meth:`engine_rl.collectors.GymCollector.state_dict`), or None."""
        collector = (self._resume or {}).get("collector") or {}
        return collector.get("env_unsupported")

    @property
    def worker_frames(self) -> int:
        """Frames the worker has collected so far (read live from shared memory), in flight included."""
        return int(self._worker_frames[0])

    @property
    def weights_version(self) -> int:
        """Weight updates pushed by :meth:`update_policy_weights_`."""
        return self._weights.version

    @property
    def worker_weights_version(self) -> int:
        """The newest of those the worker has loaded."""
        return self._weights.loaded_version

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("AsyncCollector: shut down; build a new collector to collect again")
        if self._worker is not None:
            return
        resume, self._resume = pickle.dumps(self._resume), None
        job = (
            self.env_fn, pickle.dumps(self._policy), self.frames_per_batch, self.seed, resume,
            self._weights, self._worker_frames, self.num_threads, self.info_keys,
        )
        self._worker = WorkerProcess(self.context, max_ahead=self.max_ahead, job=job)

    def shutdown(self) -> None:
        """Stop the worker (its state is fetched first, for :meth:`state_dict`); idempotent."""
        self._shutdown(fetch_state=True)

    def _shutdown(self, *, fetch_state: bool) -> None:
        if self._closed:
            return
        worker = self._worker
        if fetch_state and worker is not None and worker.is_alive and self.buffer.has_writer:
            try:
                self._worker_state = self._request_state(min(self.timeout, 10.0))
            except AsyncCollectorError:
                pass  # it failed meanwhile (and _fail shut it down) or does not answer: stop it anyway
        if self._closed:
            return
        self._closed = True
        if worker is None:
            return
        worker.stop()
        self.buffer.close_writer()

    def attach(self, engine: Engine) -> RemovableEventHandle:
        """Stop the worker when ``engine`` completes its run (``Events.COMPLETED``)."""
        return engine.add_event_handler(Events.COMPLETED, lambda _: self.shutdown())

    def __enter__(self) -> AsyncCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- talking to the worker ------------------------------------------------------------
    def _fail(self, message: str, *, worker_traceback: str | None = None) -> AsyncCollectorError:
        exitcode = self._worker.wait_exit(1.0)  # a worker that reported an error is exiting
        err = AsyncCollectorError(message, exitcode=exitcode, worker_traceback=worker_traceback)
        self._shutdown(fetch_state=False)
        return err

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "error":
            _, name, text, tb = message
            raise self._fail(
                f"AsyncCollector: the worker process (pid {self.pid}) raised {name}: {text}\n"
                f"--- worker traceback ---\n{tb.rstrip()}",
                worker_traceback=tb,
            )
        if kind == "first":
            self._first = TensorDict(nest_keys(message[1]), batch_size=[next(iter(message[1].values())).shape[0]])
        elif kind == "state":
            self._states[message[1]] = message[2]

    def _check(self, wait: float = 0.0) -> None:
        """Handle the worker's messages (waiting up to ``wait`` s for one); raise if it died."""
        if self._closed:
            raise RuntimeError("AsyncCollector: shut down; build a new collector to collect again")
        for message in self._worker.receive(wait):
            self._handle(message)
        if not self._worker.is_alive:
            for message in self._worker.receive(0.5):  # an error message sent just before it exited
                self._handle(message)
            raise self._fail(
                f"AsyncCollector: the worker process (pid {self.pid}) {self._worker.exit_text()} "
                "without reporting an error (if it failed while starting, its stderr says why); collection stopped"
            )

    def _request_state(self, timeout: float) -> dict[str, Any]:
        self._requests += 1
        request = self._requests
        self._worker.send(("state", request))
        deadline = time.monotonic() + timeout
        while request not in self._states:
            if time.monotonic() > deadline:
                raise AsyncCollectorError(
                    f"AsyncCollector: the worker (pid {self.pid}) did not answer a state request within {timeout} s"
                )
            self._check(wait=_POLL_S)
        return self._states.pop(request)

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase]:
        self._start()
        while True:
            yield self._next_batch()

    def _next_batch(self) -> TensorDictBase:
        buffer = self.buffer
        if not buffer.has_writer:  # first batch: it fixes the buffer's layout, then the worker writes
            while self._first is None:
                self._check(wait=_POLL_S)
            batch, self._first = self._first, None
            buffer.extend(batch)
            self._worker.send(("writer", buffer.writer().parts))
        else:
            while True:
                index, writes = buffer.commit()
                if writes:
                    break
                if not self._worker.ready.acquire(timeout=_POLL_S):
                    self._check()
            for _ in range(writes):
                self._worker.space.release()
            batch = buffer.storage.get(index)
        self.frames += batch.numel()
        self.batches += 1
        return batch

    # -- weights --------------------------------------------------------------------------
    def update_policy_weights_(
        self, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module | None = None
    ) -> None:
        """Publish new policy weights; the worker loads them before its next batch.

        Args:
            weights: ``TensorDict.from_module(learner_policy)``, its ``state_dict()`` or the
                ``nn.Module`` itself, with the structure of the ``policy`` given at construction.
                ``None`` does nothing.
        """
        if weights is not None:
            self._weights.publish(weights)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Learner-side counters and the worker's state (``"worker"``: its collector's and its
        policy's ``state_dict``, fetched now while it runs, the last one known after
        :meth:`shutdown`). Raises :class:`AsyncCollectorError` if the worker died. Tensors,
        numbers, strings and plain containers only."""
        worker = self._worker_state
        if self._worker is not None and not self._closed:
            # a running worker answers; a dead one raises here rather than leave a stale state
            worker = self._worker_state = self._request_state(self.timeout)
        elif self._worker is None and self._resume is not None:
            worker = dict(self._resume)
        return {
            "frames": self.frames,
            "batches": self.batches,
            "seed": self.seed,
            "weights_version": self.weights_version,
            "worker": worker,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` before the first batch: the worker starts from the saved
        collector and policy state (new episodes if none was saved)."""
        if self._worker is not None:
            raise RuntimeError("AsyncCollector.load_state_dict: the worker already started; load before iterating")
        missing = {"frames", "batches", "worker"} - set(state_dict)
        if missing:
            raise KeyError(f"AsyncCollector.load_state_dict: missing key(s) {sorted(missing)}")
        self.frames = int(state_dict["frames"])
        self.batches = int(state_dict["batches"])
        self._resume = state_dict["worker"]
        version = int(state_dict.get("weights_version", 0))
        self._weights.set_version(version)

    def __repr__(self) -> str:
        state = "not started" if self._worker is None else ("running" if self.is_alive else "stopped")
        return (
            f"AsyncCollector(frames_per_batch={self.frames_per_batch}, max_ahead={self.max_ahead}, "
            f"frames={self.frames}, worker={state})"
        )
