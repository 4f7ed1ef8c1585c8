"""The optimizer the recipes build: ``torch.optim.Adam`` with torch's fused kernel where it has one.

``torch.optim.Adam(fused=True)`` runs one kernel for all parameters per step instead of torch's
default ``foreach`` implementation (a few kernels per step); on the dqn-cartpole Q network it
is the faster of the two (``docs/benchmarks.md``). It exists for CPU (torch >= 2.4), CUDA and
other devices with a fused kernel; where the parameters' device or dtype has none, :func:`adam`
builds the default (``foreach``) Adam instead. Either way the object is a plain
``torch.optim.Adam``: schedulers, hooks and checkpoints work as usual, and a state dict saved
by one loads into the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from engine_rl.checks import positive_number

__all__ = ["adam"]


def adam(params: Iterable[Any], *, lr: float, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, lr=lr, fused=True, **kwargs)``, or without ``fused`` where unsupported.

    Args:
        params: parameters or parameter groups, as for ``torch.optim.Adam``.
        lr: learning rate (a positive float).
        kwargs: any other ``torch.optim.Adam`` argument (``eps``, ``betas``, ``weight_decay``, ...).

    Examples:
        >>> net = torch.nn.Linear(3, 1)
        >>> opt = adam(net.parameters(), lr=0.1)
        >>> type(opt).__name__, opt.defaults["fused"]
        ('Adam', True)
        >>> adam(net.parameters(), lr=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: adam: lr must be a positive finite number, got -1.0
    """
    positive_number(lr, name="lr", owner="adam", finite=True)
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True, **kwargs)
    except RuntimeError as err:  # no fused kernel for these parameters' device or dtype
        if "fused" not in str(err):
            raise
        return torch.optim.Adam(params, lr=lr, **kwargs)
