"""Two gradient helpers for metrics and checks; clipping itself is torch's own.

- :func:`grad_norm`: the total norm of the gradients, as if they were one concatenated vector
  (``torch.nn.utils.get_total_norm``, computed the same way on torch < 2.6, which lacks it).
- :func:`non_finite_grads`: the names of the parameters whose gradient holds a NaN or Inf.

Clip with ``torch.nn.utils.clip_grad_norm_`` and ``torch.nn.utils.clip_grad_value_``, or attach
:class:`handlers.GradClipper`, which calls them on ``RLEvents.BACKWARD_COMPLETED``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from engine_rl.checks import fail, is_number

__all__ = ["grad_norm", "non_finite_grads"]

_get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6


def grad_norm(parameters: torch.Tensor | Iterable[torch.Tensor], *, norm_type: float = 2.0) -> torch.Tensor:
    """Total ``norm_type``-norm of the gradients of ``parameters`` (0 if none has a gradient).

    Args:
        parameters: a tensor or an iterable of tensors (e.g. ``module.parameters()``).
        norm_type: the p of the p-norm; ``math.inf`` for the max-norm.

    Returns:
        A 0-dim tensor on the first gradient's device (read it with ``.item()``).

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, 4.0])
        >>> grad_norm([w]).item()
        5.0
    """
    if not (is_number(norm_type) and norm_type > 0):
        fail(norm_type, "a positive number or math.inf", name="argument norm_type", owner="grad_norm")
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if _get_total_norm is not None:
        return _get_total_norm(grads, norm_type)
    device = grads[0].device
    norms = [torch.linalg.vector_norm(g, norm_type).to(device) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), norm_type)


def non_finite_grads(named_parameters: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of the parameters whose gradient holds a NaN or Inf (one check per parameter).

    Examples:
        >>> import torch
        >>> net = torch.nn.Linear(2, 1)
        >>> net.weight.grad = torch.tensor([[1.0, float("nan")]])
        >>> net.bias.grad = torch.zeros(1)
        >>> non_finite_grads(net.named_parameters())
        ['weight']
    """
    return [name for name, p in named_parameters if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
