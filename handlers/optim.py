"""Gradient clipping between ``loss.backward()`` and ``optimizer.step()``.

:class:`GradClipper` runs on ``RLEvents.BACKWARD_COMPLETED``; the maths is in
:mod:`engine_rl.gradients`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle
from torch import nn

from engine_rl.events import RLEvents
from engine_rl.gradients import clip_grad_norm_, clip_grad_value_, grad_norm
from handlers._attach import add_handler
from handlers.nan_guard import NonFiniteError, first_non_finite

__all__ = ["GradClipper"]


class GradClipper:
    """Clip gradients by total norm or by value after each backward; record the pre-clip norm.

    Exactly one of ``max_norm`` (rescale all gradients so their total norm is at most
    ``max_norm``) and ``max_value`` (clamp each entry into ``[-max_value, max_value]``) is given.
    The total gradient norm *before* clipping goes to ``engine.state.metrics[metric_name]`` as
    a float; reading it (``.item()``) waits for the device, which is free on CPU but a sync per
    step on GPU: pass ``record_norm=False`` to skip it.

    Args:
        parameters: the parameters to clip: an ``nn.Module`` or an iterable of tensors (kept as
            a list, so a generator such as ``module.parameters()`` is fine).
        max_norm: the largest allowed total norm.
        max_value: the largest allowed absolute value of a gradient entry.
        norm_type: the p of the p-norm (``math.inf`` for the max-norm).
        record_norm: put the pre-clip norm into ``engine.state.metrics``.
        metric_name: its key there.
        error_if_nonfinite: raise :class:`~handlers.nan_guard.NonFiniteError` when the pre-clip
            norm is NaN or Inf (a NaN or Inf gradient), naming the first such parameter and the
            optim step, before ``optimizer.step()`` could spread it into the weights. The norm
            is computed for the clipping anyway, so the check costs one host read: what
            :class:`~handlers.NaNGuard`'s gradient check does, without a second pass over the
            gradients (give the guard no ``parameters`` then). Needs ``record_norm=True`` (the
            check reads that norm).

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, 4.0])
        >>> clipper = GradClipper([w], max_norm=1.0)
        >>> clipper.clip().item()
        5.0
        >>> w.grad
        tensor([0.6000, 0.8000])
    """

    def __init__(
        self,
        parameters: nn.Module | Iterable[torch.Tensor],
        *,
        max_norm: float | None = None,
        max_value: float | None = None,
        norm_type: float = 2.0,
        record_norm: bool = True,
        metric_name: str = "grad_norm",
        error_if_nonfinite: bool = False,
    ) -> None:
        names: list[str] | None = None
        if isinstance(parameters, nn.Module):
            named = list(parameters.named_parameters())
            params, names = [p for _, p in named], [n for n, _ in named]
        elif isinstance(parameters, torch.Tensor):
            params = [parameters]
        elif isinstance(parameters, Iterable):
            params = list(parameters)
        else:
            raise TypeError(
                "GradClipper: argument parameters must be an nn.Module or an iterable of tensors, "
                f"got {type(parameters).__name__}"
            )
        bad = [type(p).__name__ for p in params if not isinstance(p, torch.Tensor)]
        if bad or not params:
            raise ValueError(
                f"GradClipper: argument parameters must hold at least one tensor and only tensors, got {bad or 'none'}"
            )
        if (max_norm is None) == (max_value is None):
            raise ValueError(
                f"GradClipper: give exactly one of max_norm and max_value, got max_norm={max_norm!r}, "
                f"max_value={max_value!r}"
            )
        for name, value in (("max_norm", max_norm), ("max_value", max_value), ("norm_type", norm_type)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"GradClipper: argument {name} must be a positive number, got {value!r}")
        if error_if_nonfinite and not record_norm:
            raise ValueError("GradClipper: error_if_nonfinite=True reads the gradient norm; it needs record_norm=True")
        self.parameters = params
        self.names = names if names is not None else [f"param{i}" for i in range(len(params))]
        self.error_if_nonfinite = error_if_nonfinite
        self.max_norm = max_norm
        self.max_value = max_value
        self.norm_type = float(norm_type)
        self.record_norm = record_norm
        self.metric_name = metric_name

    def clip(self) -> torch.Tensor | None:
        """Clip the gradients in place; return the pre-clip total norm (a 0-dim tensor).

        Returns ``None`` when clipping by value with ``record_norm=False`` (the norm is not needed).
        """
        if self.max_norm is not None:
            # the norm is read on the host for the metric anyway, so the factor can be too; a
            # non-finite norm leaves the gradients as they are, for __call__ to name the culprit
            return clip_grad_norm_(self.parameters, self.max_norm, norm_type=self.norm_type,
                                   skip_unclipped=self.record_norm, skip_nonfinite=self.error_if_nonfinite)
        if self.error_if_nonfinite:  # the norm before clamping (which would hide an Inf), then clamp
            norm = grad_norm(self.parameters, norm_type=self.norm_type)
            if math.isfinite(norm.item()):
                clip_grad_value_(self.parameters, self.max_value, compute_norm=False)
            return norm
        return clip_grad_value_(
            self.parameters, self.max_value, norm_type=self.norm_type, compute_norm=self.record_norm
        )

    def __call__(self, engine: Engine) -> None:
        norm = self.clip()
        if self.record_norm and norm is not None:
            value = norm.item()
            if self.error_if_nonfinite and not math.isfinite(value):
                self._raise_non_finite(engine)
            engine.state.metrics[self.metric_name] = value

    def _raise_non_finite(self, engine: Engine) -> None:
        bad = first_non_finite((n, p.grad) for n, p in zip(self.names, self.parameters) if p.grad is not None)
        what = f"gradient (NaN or Inf) of parameter {bad!r}" if bad is not None else "gradient norm (overflow)"
        s = engine.state
        raise NonFiniteError(
            f"GradClipper: non-finite {what} at optim step {getattr(s, 'optim_steps', '?')} "
            f"(batch {getattr(s, 'batches', '?')}, frames {getattr(s, 'frames', '?')})"
        )

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BACKWARD_COMPLETED, every: int = 1
    ) -> RemovableEventHandle:
        """Clip on ``event`` (every ``every`` optim steps); returns Ignite's handle."""
        return add_handler(engine, self, event, every, owner="GradClipper")
