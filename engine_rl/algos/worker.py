"""One process-wide worker thread for the losses that compute part of a step beside the caller.

:class:`~engine_rl.algos.SACLoss` (``target_worker=True``) submits its TD-target computation
here and computes the critics' and the actor's passes on the calling thread meanwhile. On CPU
with one torch thread per op the two run on two cores: torch releases the GIL inside its ops.

The thread is created on first use, shared by every loss in the process (tasks run one after
another), and recreated in a child after ``os.fork``. Grad mode and autocast are per thread:
:func:`autocast_state` and :func:`in_autocast` carry the caller's autocast into the worker.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch

__all__ = ["autocast_state", "in_autocast", "result_after", "submit"]

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:
    global _executor, _lock
    _executor, _lock = None, threading.Lock()  # the parent's thread does not exist in the child


os.register_at_fork(after_in_child=_forget_after_fork)


def submit(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``fn(*args)`` on the worker thread; returns its future."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine_rl-loss-worker")
        executor = _executor
    return executor.submit(fn, *args)


def result_after(future: Future[Any], fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``(fn(), future.result())``: ``fn`` runs on this thread while the worker runs ``future``.

    If ``fn`` raises, the worker's task is still waited for (so nothing reads the networks once
    this returns) and ``fn``'s error is raised; otherwise the worker's error, if any.
    """
    try:
        here = fn()
    except BaseException:
        with contextlib.suppress(BaseException):
            future.result()
        raise
    return here, future.result()


def autocast_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    """This thread's autocast setting for ``device_type``: ``(device_type, enabled, dtype)``."""
    return device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


def in_autocast(state: tuple[str, bool, torch.dtype]) -> contextlib.AbstractContextManager[Any]:
    """A context that sets ``state`` (from :func:`autocast_state`) on the current thread."""
    device_type, enabled, dtype = state
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)
