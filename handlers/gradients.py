"""Gradient clipping between ``loss.backward()`` and ``optimizer.step()``.

:class:`GradClipper` runs on ``RLEvents.BACKWARD_COMPLETED`` and calls torch's
``torch.nn.utils.clip_grad_norm_`` or ``torch.nn.utils.clip_grad_value_``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle
from torch import nn

from engine_rl.algos.gradients import grad_norm, non_finite_grads
from engine_rl.checks import positive_number
from engine_rl.events import RLEvents
from handlers._attach import add_handler
from handlers.nan_guard import NonFiniteError

__all__ = ["GradClipper"]


class GradClipper:
    """Clip gradients by total norm or by value after each backward; record the pre-clip norm.

    Exactly one of ``max_norm`` (rescale all gradients so their total norm is at most
    ``max_norm``: ``torch.nn.utils.clip_grad_norm_``) and ``max_value`` (clamp each entry into
    ``[-max_value, max_value]``: ``torch.nn.utils.clip_grad_value_``) is given. The total
    gradient norm *before* clipping goes to ``engine.state.metrics[metric_name]`` as a float;
    reading it (``.item()``) waits for the device, a sync per step on GPU: pass
    ``record_norm=False`` to skip it.

    Args:
        parameters: the parameters to clip: an ``nn.Module`` (its parameter names appear in
            errors) or an iterable of tensors (kept as a list; named ``param0``, ``param1``...).
        max_norm: the largest allowed total norm.
        max_value: the largest allowed absolute value of a gradient entry.
        norm_type: the p of the p-norm (``math.inf`` for the max-norm).
        record_norm: put the pre-clip norm into ``engine.state.metrics``.
        metric_name: its key there.
        error_if_nonfinite: raise :class:`~handlers.nan_guard.NonFiniteError` when the pre-clip
            norm is NaN or Inf, naming the parameters whose gradient holds a NaN or Inf and the
            optim step, before any gradient is changed and before ``optimizer.step()`` runs, so
            the weights stay as they were.

    Examples:
        >>> import torch
        >>> net = torch.nn.Linear(2, 1, bias=False)
        >>> net.weight.grad = torch.tensor([[3.0, 4.0]])
        >>> clipper = GradClipper(net, max_norm=1.0, error_if_nonfinite=True)
        >>> clipper.clip().item()
        5.0
        >>> net.weight.grad
        tensor([[0.6000, 0.8000]])
        >>> net.weight.grad[0, 1] = float("nan")
        >>> clipper.clip()
        Traceback (most recent call last):
        ...
        engine_rl.finite.NonFiniteError: GradClipper: non-finite gradient (NaN or Inf) of parameter 'weight'
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
        if isinstance(parameters, nn.Module):
            named = list(parameters.named_parameters())
        elif isinstance(parameters, torch.Tensor):
            named = [("param0", parameters)]
        elif isinstance(parameters, Iterable):
            named = [(f"param{i}", p) for i, p in enumerate(parameters)]
        else:
            raise TypeError(
                "GradClipper: argument parameters must be an nn.Module or an iterable of tensors, "
                f"got {type(parameters).__name__}"
            )
        bad = [type(p).__name__ for _, p in named if not isinstance(p, torch.Tensor)]
        if bad or not named:
            raise ValueError(
                f"GradClipper: argument parameters must hold at least one tensor and only tensors, got {bad or 'none'}"
            )
        if (max_norm is None) == (max_value is None):
            raise ValueError(
                f"GradClipper: give exactly one of max_norm and max_value, got max_norm={max_norm!r}, "
                f"max_value={max_value!r}"
            )
        for name, value in (("max_norm", max_norm), ("max_value", max_value), ("norm_type", norm_type)):
            if value is not None:
                positive_number(value, name=f"argument {name}", owner="GradClipper")
        self.named_parameters = named
        self.parameters = [p for _, p in named]
        self.max_norm = max_norm
        self.max_value = max_value
        self.norm_type = float(norm_type)
        self.record_norm = record_norm
        self.metric_name = metric_name
        self.error_if_nonfinite = error_if_nonfinite

    def clip(self) -> torch.Tensor | None:
        """Clip the gradients in place; return the pre-clip total norm (a 0-dim tensor).

        Returns ``None`` when clipping by value with ``record_norm=False`` and
        ``error_if_nonfinite=False`` (the norm is not needed then). With ``error_if_nonfinite``
        a NaN or Inf norm raises :class:`~handlers.nan_guard.NonFiniteError` before any
        gradient is changed.
        """
        if self.max_norm is not None:
            try:
                return torch.nn.utils.clip_grad_norm_(
                    self.parameters, self.max_norm, norm_type=self.norm_type,
                    error_if_nonfinite=self.error_if_nonfinite, foreach=True,
                )
            except RuntimeError as err:  # torch checks the norm before it scales the gradients
                if self.error_if_nonfinite and "non-finite" in str(err):
                    raise self._non_finite_error() from None
                raise
        norm = None
        if self.record_norm or self.error_if_nonfinite:
            norm = grad_norm(self.parameters, norm_type=self.norm_type)
            if self.error_if_nonfinite and not torch.isfinite(norm):  # before clamping hides an Inf
                raise self._non_finite_error()
        torch.nn.utils.clip_grad_value_(self.parameters, self.max_value, foreach=True)
        return norm

    def _non_finite_error(self) -> NonFiniteError:
        names = non_finite_grads(self.named_parameters)  # the scan runs only on failure
        listed = ", ".join(repr(name) for name in names)
        what = f"gradient (NaN or Inf) of parameter{'s' if len(names) > 1 else ''} {listed}"
        if not names:  # every gradient is finite: their norm overflowed
            what = "gradient norm (overflow)"
        return NonFiniteError(f"GradClipper: non-finite {what}")

    def __call__(self, engine: Engine) -> None:
        try:
            norm = self.clip()
        except NonFiniteError as err:
            s = engine.state
            raise NonFiniteError(
                f"{err} at optim step {getattr(s, 'optim_steps', '?')} (batch {getattr(s, 'batches', '?')}, "
                f"frames {getattr(s, 'frames', '?')}); the optimizer step was not taken"
            ) from None
        if self.record_norm:
            engine.state.metrics[self.metric_name] = norm.item()

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BACKWARD_COMPLETED, every: int = 1
    ) -> RemovableEventHandle:
        """Clip on ``event`` (every ``every`` optim steps); returns Ignite's handle."""
        return add_handler(engine, self, event, every, owner="GradClipper", exclusive=self,
                           twice="grad_norm would report the norm of the already clipped gradients")
