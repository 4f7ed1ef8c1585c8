"""One process-wide worker thread for the losses that compute part of a step beside the caller.

:class:`~engine_rl.algos.SACLoss` and :class:`~engine_rl.algos.TD3Loss` (``worker_thread=True``)
submit their TD-target computation here and run the critics' and the actor's passes on the
calling thread meanwhile; then :func:`parallel_backward` runs the critics' backward here while
the caller runs the actor's. On CPU with one torch thread per op the two run on two cores: torch
releases the GIL inside its ops.

The thread is created on first use, shared by every loss in the process (tasks run one after
another), and recreated in a child after ``os.fork``. It runs with torch's intra-op thread count
(:func:`engine_rl.threads.start_torch_thread`; without it its products would use an OpenMP team
of one thread per core). Grad mode and autocast are per thread:
:func:`autocast_state` and :func:`in_autocast` carry the caller's autocast into the worker.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch

from engine_rl.threads import start_torch_thread

__all__ = ["autocast_state", "in_autocast", "parallel_backward", "result_after", "submit"]

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
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine_rl-loss-worker",
                                           initializer=start_torch_thread)
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


_ANCHOR = torch.zeros((), requires_grad=True)  # puts _ParallelBackward in the graph; never gets a gradient


class _ParallelBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, losses: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        ctx.losses = losses  # not inputs: their graphs are run by backward below, not by the caller's engine
        ctx.set_materialize_grads(False)
        return tuple(loss.detach().clone() for loss in losses)

    @staticmethod
    def backward(ctx: Any, grad_first: torch.Tensor | None, grad_second: torch.Tensor | None) -> tuple[None, None]:
        first, second = ctx.losses
        if grad_first is None or grad_second is None:  # one of the two back-propagated alone
            loss, grad = (first, grad_first) if grad_second is None else (second, grad_second)
            if grad is not None:
                torch.autograd.backward(loss, grad)
            return None, None
        future = submit(torch.autograd.backward, first, grad_first)
        result_after(future, lambda: torch.autograd.backward(second, grad_second))
        return None, None


def parallel_backward(first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of two scalar losses whose backward runs ``first``'s graph on the worker thread
    and ``second``'s on the calling thread at the same time.

    Back-propagating anything that sums the copies (``(first + second).backward()``, what the
    trainer does with a loss module's ``loss_*`` entries) gives each graph's leaves the gradients
    they would get from ``first`` and ``second`` themselves, bit for bit; so does
    back-propagating one copy alone. The two graphs must share no tensor that requires a
    gradient (e.g. the critics' loss and an actor loss taken through critics with detached
    parameters). Not for ``retain_graph=True`` or ``create_graph=True``: each graph is freed
    after its backward. Losses that do not require a gradient are returned as they are.

    Examples:
        >>> a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        >>> la, lb = parallel_backward((a * 3).sum(), (b * 5).sum())
        >>> (la + lb).backward()
        >>> a.grad.tolist(), b.grad.tolist(), float(la), float(lb)
        ([3.0, 3.0], [5.0, 5.0], 6.0, 10.0)
    """
    if not (first.requires_grad and second.requires_grad and torch.is_grad_enabled()):
        return first, second
    return _ParallelBackward.apply(_ANCHOR, (first, second))
