"""Gradient norms and clipping, vectorized with ``torch._foreach_*`` (one kernel per device).

- :func:`grad_norm`: the total norm of the gradients, as if they were one concatenated vector.
- :func:`clip_grad_norm_`: rescale the gradients so their total norm is at most ``max_norm``.
- :func:`clip_grad_value_`: clamp every gradient entry into ``[-max_value, max_value]``.

Both clipping functions return the *pre-clip* total norm (a 0-dim tensor on the first gradient's
device: no host sync until you call ``.item()``). Parameters without a gradient are skipped.
The :class:`handlers.GradClipper` handler calls them on ``RLEvents.BACKWARD_COMPLETED``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

__all__ = ["clip_grad_norm_", "clip_grad_value_", "grad_norm"]

Parameters = torch.Tensor | Iterable[torch.Tensor]

# numpy scalars round as torch's CPU ops do in these dtypes (a few host ops instead of four tensor ops)
_HOST_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


def _check_positive(name: str, value: float, consumer: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{consumer}: argument {name} must be a positive number, got {value!r}")
    return float(value)


def _check_norm_type(norm_type: float, consumer: str) -> float:
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or not norm_type > 0:
        raise ValueError(f"{consumer}: argument norm_type must be a positive number or math.inf, got {norm_type!r}")
    return float(norm_type)


def _grads_by_device(parameters: Parameters) -> dict[torch.device, list[torch.Tensor]]:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    groups: dict[torch.device, list[torch.Tensor]] = {}
    for p in parameters:
        g = p.grad
        if g is not None:
            groups.setdefault(g.device, []).append(g)
    return groups


def _total_norm(groups: dict[torch.device, list[torch.Tensor]], norm_type: float) -> torch.Tensor:
    if not groups:
        return torch.zeros(())
    if len(groups) == 1:  # the usual case: no per-tensor device moves
        (grads,) = groups.values()
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, norm_type)), norm_type)
    first = next(iter(groups))
    per_device = [
        torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, norm_type)), norm_type).to(first)
        for grads in groups.values()
    ]
    return torch.linalg.vector_norm(torch.stack(per_device), norm_type)


def grad_norm(parameters: Parameters, *, norm_type: float = 2.0) -> torch.Tensor:
    """Total ``norm_type``-norm of the gradients of ``parameters`` (0 if none has a gradient).

    Args:
        parameters: a tensor or an iterable of tensors (e.g. ``module.parameters()``).
        norm_type: the p of the p-norm; ``math.inf`` for the max-norm.

    Returns:
        A 0-dim tensor (no host sync).

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, 4.0])
        >>> grad_norm([w]).item()
        5.0
    """
    norm_type = _check_norm_type(norm_type, "grad_norm")
    return _total_norm(_grads_by_device(parameters), norm_type)


def clip_grad_norm_(
    parameters: Parameters,
    max_norm: float,
    *,
    norm_type: float = 2.0,
    skip_unclipped: bool = False,
    skip_nonfinite: bool = False,
) -> torch.Tensor:
    """Scale the gradients in place so that their total norm is at most ``max_norm``.

    Gradients are multiplied by ``min(1, max_norm / (norm + 1e-6))`` without any host sync,
    unless ``skip_unclipped`` is set.

    Args:
        parameters: a tensor or an iterable of tensors with ``.grad``.
        max_norm: the largest allowed total norm (> 0).
        norm_type: the p of the p-norm; ``math.inf`` for the max-norm.
        skip_unclipped: read the norm on the host (one sync), compute the factor there (float32
            and float64 gradients; in their precision, so it is the same number) and skip the
            multiplication when it is 1 (the norm is within ``max_norm``). The gradients are
            bitwise the same either way; on CPU, where the read is free, it saves a pass over
            every gradient and the factor's four small tensor ops.
        skip_nonfinite: leave the gradients as they are when the norm is NaN or Inf (one host
            read), for a caller that raises and names the offending gradient; otherwise they are
            scaled by the NaN (or 0) factor, as ``torch.nn.utils.clip_grad_norm_`` does.

    Returns:
        The total norm *before* clipping, a 0-dim tensor.

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, 4.0])
        >>> clip_grad_norm_([w], 1.0).item()
        5.0
        >>> w.grad
        tensor([0.6000, 0.8000])
    """
    max_norm = _check_positive("max_norm", max_norm, "clip_grad_norm_")
    norm_type = _check_norm_type(norm_type, "clip_grad_norm_")
    groups = _grads_by_device(parameters)
    total = _total_norm(groups, norm_type)
    host = _HOST_FLOATS.get(total.dtype) if skip_unclipped else None
    if host is not None:
        value = total.item()
        if skip_nonfinite and not math.isfinite(value):
            return total
        # the factor on the host, rounded as the tensor ops below round it: (1 / (norm + 1e-6)) * max_norm
        factor = host(1.0) / (host(value) + host(1e-6)) * host(max_norm)
        if factor >= 1.0:
            return total
        for grads in groups.values():
            torch._foreach_mul_(grads, float(factor))
        return total
    if skip_nonfinite and not math.isfinite(total.item()):
        return total
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # `max_norm / t` is t.reciprocal() * max_norm
    if skip_unclipped and coef.item() == 1.0:
        return total
    for device, grads in groups.items():
        torch._foreach_mul_(grads, coef if device == coef.device else coef.to(device))
    return total


def clip_grad_value_(
    parameters: Parameters, max_value: float, *, norm_type: float = 2.0, compute_norm: bool = True
) -> torch.Tensor | None:
    """Clamp every gradient entry into ``[-max_value, max_value]``, in place.

    Args:
        parameters: a tensor or an iterable of tensors with ``.grad``.
        max_value: the largest allowed absolute value of a gradient entry (> 0).
        norm_type: the p of the p-norm returned.
        compute_norm: compute and return the pre-clip total norm (``False``: return ``None``
            and skip that work).

    Returns:
        The total norm *before* clipping (a 0-dim tensor), or ``None``.

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, -4.0])
        >>> clip_grad_value_([w], 1.0).item()
        5.0
        >>> w.grad
        tensor([ 1., -1.])
    """
    max_value = _check_positive("max_value", max_value, "clip_grad_value_")
    norm_type = _check_norm_type(norm_type, "clip_grad_value_")
    groups = _grads_by_device(parameters)
    total = _total_norm(groups, norm_type) if compute_norm else None
    for grads in groups.values():
        torch._foreach_clamp_min_(grads, -max_value)
        torch._foreach_clamp_max_(grads, max_value)
    return total

