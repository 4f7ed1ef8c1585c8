"""Process-wide settings that make small-network training on CPU faster.

:func:`tune_allocator` keeps glibc's ``malloc`` from returning mid-sized blocks to the kernel.
By default glibc serves every allocation above 128 KiB with a fresh ``mmap`` and unmaps it on
free, so a tensor of 256x256 floats (256 KiB) costs page faults and kernel zeroing each time an
op allocates one: ~65 page faults for an op that computes in ~10 µs. Training allocates and
frees such activations and gradients hundreds of times per optim step; served from the heap
instead, a SAC step on Pendulum (256x256 critics, batch 256) runs ~20% faster here. Nothing
numerical changes. ``engine-rl train`` calls it in every training process (``--no-tune-malloc``
turns it off); library users may call it once at start-up.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["tune_allocator"]

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Allocations below this come from the heap (bigger ones, e.g. replay storage, are mmapped).
DEFAULT_MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap is returned to the kernel only above this.
DEFAULT_TRIM_THRESHOLD = 256 << 20


def tune_allocator(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD, trim_threshold: int = DEFAULT_TRIM_THRESHOLD
) -> bool:
    """Raise glibc's mmap and trim thresholds for this process; return whether it applied.

    Without glibc (macOS, Windows, musl) this does nothing and returns False. The cost is
    memory: up to ``trim_threshold`` bytes of freed heap stay with the process.

    Args:
        mmap_threshold: allocations of at least this many bytes are mmapped (glibc's
            ``M_MMAP_THRESHOLD``; at most 32 MiB on 64-bit glibc).
        trim_threshold: free bytes at the heap's top before glibc trims it (``M_TRIM_THRESHOLD``).

    Examples:
        >>> tune_allocator() in (True, False)
        True
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"tune_allocator: argument {name} must be a positive int (bytes), got {value!r}")
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
