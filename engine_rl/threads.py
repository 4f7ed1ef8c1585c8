"""Worker threads that compute with torch: give them the process's intra-op thread count.

torch's intra-op thread count (``torch.set_num_threads``) is applied to a thread's OpenMP
settings lazily, the first time that thread enters one of ATen's parallel loops or calls
``torch.get_num_threads()``. A matrix product goes to MKL without passing there, so a fresh
Python thread's first products run with OpenMP's own default: one thread per core. On this
project's 2-core box, with ``torch.set_num_threads(1)`` in the main thread, a worker thread's
256x256 products then ran on an OpenMP team of two, next to the main thread's own: a product on
each thread at the same time took 1.1-1.3 ms, against 0.43-0.50 ms with the worker's count
applied (0.36-0.43 ms for one product alone; ``tests/engine_rl/test_threads.py`` shows the
extra OpenMP thread).

:func:`start_torch_thread` applies the count; the pools that run torch work beside the training
thread (:mod:`engine_rl.algos.worker`, :class:`handlers.ReplaySampler`'s ``background``
thread) pass it as their ``initializer``.

Examples:
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with ThreadPoolExecutor(max_workers=1, initializer=start_torch_thread) as pool:
    ...     pool.submit(torch.get_num_threads).result() == torch.get_num_threads()
    True
"""

from __future__ import annotations

import torch

__all__ = ["start_torch_thread"]


def start_torch_thread() -> None:
    """Apply torch's intra-op thread count to the calling thread (call it first in a new thread).

    ``torch.get_num_threads()`` initializes the calling thread's OpenMP thread count from the
    process-wide setting, which is what this needs; the count is read, not changed.
    """
    torch.get_num_threads()
