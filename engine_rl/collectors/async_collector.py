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
loads the newest complete version before each batch. Neither side waits for the other.

Failures and shutdown. An exception in the worker (an env error, a policy error) is raised in
the learner at its next batch as :class:`AsyncCollectorError`, with the worker's traceback; a
worker that dies (killed) is detected by the learner while it waits, and raises the same error
naming the exit code or signal. The worker ignores Ctrl-C (the learner owns it) and exits on
its own once the learner's process is gone, however it ended. :meth:`AsyncCollector.shutdown`
— called by a ``with`` block, by :meth:`AsyncCollector.attach`'s ``COMPLETED`` handler, by a
recipe's closers, or at last when the collector is garbage-collected or the interpreter exits —
stops the worker: ask, join with a timeout, then terminate, then kill. No process outlives it.

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
import queue
import signal
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp
from gymnasium.vector import VectorEnv
from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.collectors.async_worker import _FRAMES, _POLL_S, _W_SEEN, _W_SEQ, _worker_main
from engine_rl.collectors.info import check_info_keys
from engine_rl.keys import format_key
from engine_rl.replay import SharedReplayBuffer
from engine_rl.replay.storage import nest_keys

__all__ = ["AsyncCollector", "AsyncCollectorError"]

_STOP_S = 5.0  # how long a stopping worker may take before it is terminated


class AsyncCollectorError(RuntimeError):
    """The worker process of an :class:`AsyncCollector` failed or died.

    Attributes:
        exitcode: the worker's exit code (negative: killed by that signal), or ``None`` if it
            had not exited when the error was raised.
        worker_traceback: the traceback text of the worker's exception, if it raised one.
    """

    def __init__(self, message: str, *, exitcode: int | None = None, worker_traceback: str | None = None) -> None:
        super().__init__(message)
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback


def _exit_text(exitcode: int | None) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"


def _stop_process(process: Any, stop: Any, timeout: float) -> None:
    """Ask ``process`` to stop; join; terminate; kill. Safe to call more than once."""
    if process is None or process.pid is None:
        return
    stop.set()
    process.join(timeout)
    if process.is_alive():
        process.terminate()
        process.join(1.0)
    if process.is_alive():
        process.kill()
        process.join(1.0)


# ---------------------------------------------------------------------------- learner side
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
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"AsyncCollector: argument {name} must be a positive int, got {value!r}")
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
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"AsyncCollector: argument timeout must be a positive number, got {timeout!r}")
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
        with torch.no_grad():
            self._weights = TensorDict.from_module(self._policy).data.clone().share_memory_()
        self._weight_keys = {format_key(k) for k in self._weights.keys(include_nested=True, leaves_only=True)}
        self._counters = torch.zeros(3, dtype=torch.int64).share_memory_()
        self._counters_np = self._counters.numpy()
        self._resume: Mapping[str, Any] | None = None  # worker state to start from
        self._worker_state: dict[str, Any] | None = None  # the latest one received
        self._process: Any = None
        self._finalizer: weakref.finalize | None = None
        self._first: TensorDictBase | None = None
        self._states: dict[int, dict[str, Any]] = {}
        self._requests = 0
        self._closed = False

    # -- properties -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts)."""
        return None if self._process is None else self._process.pid

    @property
    def is_alive(self) -> bool:
        """True while the worker process runs."""
        return self._process is not None and self._process.is_alive()

    @property
    def worker_frames(self) -> int:
        """Frames the worker has collected so far (read live from shared memory), in flight included."""
        return int(self._counters_np[_FRAMES])

    @property
    def weights_version(self) -> int:
        """Weight updates pushed by :meth:`update_policy_weights_`."""
        return int(self._counters_np[_W_SEQ]) // 2

    @property
    def worker_weights_version(self) -> int:
        """The newest of those the worker has loaded."""
        return int(self._counters_np[_W_SEEN]) // 2

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("AsyncCollector: shut down; build a new collector to collect again")
        if self._process is not None:
            return
        ctx = mp.get_context(self.context)
        if self.context == "forkserver":
            ctx.set_forkserver_preload([__name__])  # the server imports torch & co once
        self._ready, self._space = ctx.Semaphore(0), ctx.Semaphore(self.max_ahead)
        self._stop = ctx.Event()
        self._commands, self._results = ctx.Queue(), ctx.Queue()
        alive_r, self._alive_w = ctx.Pipe(duplex=False)  # the worker watches alive_r for this process's end
        resume, self._resume = pickle.dumps(self._resume), None
        self._process = ctx.Process(
            target=_worker_main,
            name="engine_rl-async-collector",
            args=(
                self.env_fn, pickle.dumps(self._policy), self.frames_per_batch, self.seed, resume,
                self._weights, self._counters, self._ready, self._space, self._stop,
                self._commands, self._results, alive_r, self.num_threads, self.info_keys,
            ),
        )
        self._process.start()
        alive_r.close()
        self._finalizer = weakref.finalize(self, _stop_process, self._process, self._stop, _STOP_S)

    def shutdown(self) -> None:
        """Stop the worker (its state is fetched first, for :meth:`state_dict`); idempotent."""
        self._shutdown(fetch_state=True)

    def _shutdown(self, *, fetch_state: bool) -> None:
        if self._closed:
            return
        process = self._process
        if fetch_state and process is not None and process.is_alive() and self.buffer.has_writer:
            try:
                self._worker_state = self._request_state(min(self.timeout, 10.0))
            except AsyncCollectorError:
                pass  # it failed meanwhile (and _fail shut it down) or does not answer: stop it anyway
        if self._closed:
            return
        self._closed = True
        if process is None:
            return
        _stop_process(process, self._stop, _STOP_S)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._commands.cancel_join_thread()
        self._commands.close()
        self._results.close()
        self._alive_w.close()
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
        process = self._process
        if process.is_alive():
            process.join(1.0)  # a worker that reported an error is exiting
        err = AsyncCollectorError(message, exitcode=process.exitcode, worker_traceback=worker_traceback)
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
        try:
            self._handle(self._results.get(timeout=wait) if wait > 0 else self._results.get_nowait())
            while True:
                self._handle(self._results.get_nowait())
        except queue.Empty:
            pass
        if not self._process.is_alive():
            try:  # an error message sent just before it exited
                self._handle(self._results.get(timeout=0.5))
            except queue.Empty:
                pass
            raise self._fail(
                f"AsyncCollector: the worker process (pid {self.pid}) {_exit_text(self._process.exitcode)} "
                "without reporting an error (if it failed while starting, its stderr says why); collection stopped"
            )

    def _request_state(self, timeout: float) -> dict[str, Any]:
        self._requests += 1
        request = self._requests
        self._commands.put(("state", request))
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
            self._commands.put(("writer", buffer.writer().parts))
        else:
            while True:
                index, writes = buffer.commit()
                if writes:
                    break
                if not self._ready.acquire(timeout=_POLL_S):
                    self._check()
            for _ in range(writes):
                self._space.release()
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
        if weights is None:
            return
        if isinstance(weights, nn.Module):
            weights = TensorDict.from_module(weights)
        elif isinstance(weights, Mapping) and not isinstance(weights, TensorDictBase):
            weights = TensorDict(
                {tuple(k.split(".")): v for k, v in weights.items() if isinstance(v, torch.Tensor)}, batch_size=[]
            )
        if not isinstance(weights, TensorDictBase):
            raise TypeError(
                "AsyncCollector.update_policy_weights_: weights must be a TensorDict, a state_dict, an nn.Module "
                f"or None, got {type(weights).__name__}"
            )
        got = {format_key(k) for k in weights.keys(include_nested=True, leaves_only=True)}
        if got != self._weight_keys:
            raise KeyError(
                "AsyncCollector.update_policy_weights_: the weights do not match the policy: "
                f"missing {sorted(self._weight_keys - got)}, unexpected {sorted(got - self._weight_keys)}"
            )
        counters = self._counters_np
        counters[_W_SEQ] += 1  # odd: the worker waits for the copy to finish
        try:
            with torch.no_grad():
                self._weights.update_(weights)
        finally:
            counters[_W_SEQ] += 1

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Learner-side counters and the worker's state (``"worker"``: its collector's and its
        policy's ``state_dict``, fetched now while it runs, the last one known after
        :meth:`shutdown`). Raises :class:`AsyncCollectorError` if the worker died. Tensors,
        numbers, strings and plain containers only."""
        worker = self._worker_state
        if self._process is not None and not self._closed:
            # a running worker answers; a dead one raises here rather than leave a stale state
            worker = self._worker_state = self._request_state(self.timeout)
        elif self._process is None and self._resume is not None:
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
        if self._process is not None:
            raise RuntimeError("AsyncCollector.load_state_dict: the worker already started; load before iterating")
        missing = {"frames", "batches", "worker"} - set(state_dict)
        if missing:
            raise KeyError(f"AsyncCollector.load_state_dict: missing key(s) {sorted(missing)}")
        self.frames = int(state_dict["frames"])
        self.batches = int(state_dict["batches"])
        self._resume = state_dict["worker"]
        version = int(state_dict.get("weights_version", 0))
        self._counters_np[_W_SEQ] = self._counters_np[_W_SEEN] = 2 * version

    def __repr__(self) -> str:
        state = "not started" if self._process is None else ("running" if self.is_alive else "stopped")
        return (
            f"AsyncCollector(frames_per_batch={self.frames_per_batch}, max_ahead={self.max_ahead}, "
            f"frames={self.frames}, worker={state})"
        )
