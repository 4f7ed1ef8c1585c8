"""The learner's end of an :class:`~engine_rl.collectors.AsyncCollector`'s worker process.

:class:`WorkerProcess` starts the worker (``forkserver`` or ``spawn``) with what both sides
share besides tensors: two pacing semaphores, a stop event, a command queue and a result queue,
and a pipe whose closing tells the worker that the learner's process is gone, however it ended.
It reads the worker's messages, tells whether the worker still runs, and stops it: ask, join
with a timeout, then terminate, then kill — also when it is garbage-collected or the
interpreter exits, so no worker outlives its learner. :class:`AsyncCollectorError` is what the
learner raises when the worker failed or died. The worker's side is
:mod:`engine_rl.collectors.async_worker`.
"""

from __future__ import annotations

import queue
import signal
import weakref
from typing import Any

import torch.multiprocessing as mp

from engine_rl.collectors.async_worker import _worker_main

__all__ = ["AsyncCollectorError", "WorkerProcess"]

_STOP_S = 5.0  # how long a stopping worker may take before it is terminated


class AsyncCollectorError(RuntimeError):
    """The worker process of an :class:`~engine_rl.collectors.AsyncCollector` failed or died.

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


class WorkerProcess:
    """One worker process of an :class:`~engine_rl.collectors.AsyncCollector`, seen from the learner.

    Args:
        context: multiprocessing start method, ``"forkserver"`` or ``"spawn"``.
        max_ahead: batches the worker may write before the learner takes them.
        job: the arguments of the worker's own ``_worker_main``, before the shared primitives:
            ``(env_fn, policy_bytes, frames_per_batch, seed, resume_bytes, weights, counters,
            num_threads, info_keys)``.

    Attributes:
        ready: a semaphore the worker releases after each batch it wrote.
        space: a semaphore the worker acquires before writing a batch (``max_ahead`` at first);
            the learner releases it for each batch it took.
    """

    def __init__(self, context: str, *, max_ahead: int, job: tuple) -> None:
        ctx = mp.get_context(context)
        if context == "forkserver":
            ctx.set_forkserver_preload([_worker_main.__module__])  # the server imports torch & co once
        self.ready, self.space = ctx.Semaphore(0), ctx.Semaphore(max_ahead)
        self._stop = ctx.Event()
        self._commands, self._results = ctx.Queue(), ctx.Queue()
        alive_r, self._alive_w = ctx.Pipe(duplex=False)  # the worker watches alive_r for this process's end
        self._process = ctx.Process(
            target=_worker_main,
            name="engine_rl-async-collector",
            args=(*job, self.ready, self.space, self._stop, self._commands, self._results, alive_r),
        )
        self._process.start()
        alive_r.close()
        self._finalizer = weakref.finalize(self, _stop_process, self._process, self._stop, _STOP_S)
        self._stopped = False

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._process.pid

    @property
    def is_alive(self) -> bool:
        """True while the worker runs."""
        return self._process.is_alive()

    def exit_text(self) -> str:
        """How the worker ended, e.g. ``"was killed by SIGKILL (exit code -9)"``."""
        return _exit_text(self._process.exitcode)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the worker to exit; its exit code (``None``: still running)."""
        if self._process.is_alive():
            self._process.join(timeout)
        return self._process.exitcode

    def send(self, command: tuple) -> None:
        """Put ``command`` on the worker's command queue."""
        self._commands.put(command)

    def receive(self, wait: float = 0.0) -> list[tuple]:
        """The worker's messages, oldest first, waiting up to ``wait`` s for the first one."""
        messages: list[tuple] = []
        try:
            messages.append(self._results.get(timeout=wait) if wait > 0 else self._results.get_nowait())
            while True:
                messages.append(self._results.get_nowait())
        except queue.Empty:
            return messages

    def stop(self) -> None:
        """Stop the worker (ask, join, terminate, kill) and close the queues; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        _stop_process(self._process, self._stop, _STOP_S)
        self._finalizer.detach()
        self._commands.cancel_join_thread()
        self._commands.close()
        self._results.close()
        self._alive_w.close()
