"""Stop training at the first NaN/Inf, with an error that names the key and the step.

:class:`NaNGuard` checks

- collected batches (observations, rewards, ...) on ``RLEvents.BATCH_COLLECTED``,
- the loss output, then gradients, on ``RLEvents.BACKWARD_COMPLETED``: before
  ``optimizer.step()`` could spread them into the weights (attach the guard before a gradient
  clipper, which would rescale an Inf gradient into NaNs), and losses first, so a NaN loss is
  reported as such rather than as the NaN gradients it causes,

and raises :class:`NonFiniteError` (Ignite re-raises it from ``run()``). Each check is one fused
reduction (``torch._foreach_norm``) and one host sync over all its tensors; the offending key
is searched only on failure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from ignite.engine import Engine
from tensordict import TensorDictBase
from torch import nn

from engine_rl.events import RLEvents
from engine_rl.keys import NestedKey, format_key

__all__ = ["NaNGuard", "NonFiniteError", "first_non_finite"]

DEFAULT_BATCH_KEYS: tuple[NestedKey, ...] = ("observation", ("next", "observation"), ("next", "reward"))


class NonFiniteError(FloatingPointError):
    """A NaN or Inf was found; the message names what, where and when."""


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """One fused reduction and one host sync: the sum of 2-norms is finite iff every entry is
    (barring a norm above float32's max, ~3e38, which the exact search then clears)."""
    if not tensors:
        return True
    if len({t.device for t in tensors}) > 1:
        return all(bool(torch.isfinite(t).all()) for t in tensors)
    if all(t.ndim == 0 for t in tensors):  # scalars (loss outputs): their sum is enough, no norms
        return math.isfinite(float(torch.stack(tensors).sum()))
    return math.isfinite(float(torch.stack(torch._foreach_norm(tensors)).sum()))


def first_non_finite(named: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first tensor holding a NaN or Inf, or ``None`` if all are finite.

    Examples:
        >>> first_non_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))])
        'b'
        >>> first_non_finite([("a", torch.ones(2))]) is None
        True
    """
    items = [(name, t) for name, t in named if t.is_floating_point()]
    if _all_finite([t for _, t in items]):
        return None
    for name, t in items:  # the slow, exact search, only on failure
        if not bool(torch.isfinite(t).all()):
            return name
    return None


class NaNGuard:
    """Raise :class:`NonFiniteError` on a NaN/Inf in batches, gradients or losses.

    Args:
        parameters: a module (named parameters) or an iterable of modules/tensors whose
            gradients are checked; ``None``: no gradient check.
        batch_keys: batch entries to check (missing ones are skipped); ``()``: no batch check.
        check_losses: check every tensor of the loss output (``loss*`` and diagnostics).

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> w = torch.nn.Parameter(torch.ones(()))
        >>> bad = TensorDict({"observation": torch.tensor([[0.0], [float("inf")]])}, [2])
        >>> trainer = create_trainer([bad], lambda td: {"loss": w * 1.0}, torch.optim.SGD([w], lr=0.1))
        >>> _ = NaNGuard(parameters=[w]).attach(trainer)
        >>> try:
        ...     trainer.run(max_epochs=1)
        ... except NonFiniteError as err:
        ...     print(err)
        NaNGuard: non-finite value (NaN or Inf) in batch key 'observation' at batch 1 (frames 2, optim step 0)
    """

    def __init__(
        self,
        *,
        parameters: nn.Module | Iterable[nn.Module | torch.Tensor] | None = None,
        batch_keys: Sequence[NestedKey] = DEFAULT_BATCH_KEYS,
        check_losses: bool = True,
    ) -> None:
        self.parameters = self._named_parameters(parameters) if parameters is not None else []
        self.batch_keys = list(batch_keys)
        self.check_losses = check_losses

    @staticmethod
    def _named_parameters(parameters: Any) -> list[tuple[str, torch.Tensor]]:
        if isinstance(parameters, nn.Module):
            return list(parameters.named_parameters())
        if isinstance(parameters, torch.Tensor):
            return [("param0", parameters)]
        named: list[tuple[str, torch.Tensor]] = []
        for i, item in enumerate(parameters):
            if isinstance(item, nn.Module):
                named += [(f"{i}.{n}", p) for n, p in item.named_parameters()]
            elif isinstance(item, torch.Tensor):
                named.append((f"param{i}", item))
            else:
                raise TypeError(
                    f"NaNGuard: argument parameters must hold modules or tensors, got {type(item).__name__}"
                )
        return named

    @staticmethod
    def _where(engine: Engine) -> str:
        s = engine.state
        batches, frames, steps = (getattr(s, name, "?") for name in ("batches", "frames", "optim_steps"))
        return f"batch {batches} (frames {frames}, optim step {steps})"

    def check_batch(self, engine: Engine) -> None:
        batch: TensorDictBase = engine.state.batch
        keys = batch.keys(include_nested=True)
        bad = first_non_finite((format_key(k), batch[k]) for k in self.batch_keys if k in keys)
        if bad is not None:
            raise NonFiniteError(
                f"NaNGuard: non-finite value (NaN or Inf) in batch key {bad!r} at {self._where(engine)}"
            )

    def _loss_items(self, engine: Engine) -> list[tuple[str, torch.Tensor]]:
        losses = engine.state.losses
        if losses is None:
            return []
        items = losses.items() if isinstance(losses, Mapping) else losses.items(include_nested=True, leaves_only=True)
        return [(format_key(k), v.detach()) for k, v in items if isinstance(v, torch.Tensor) and v.is_floating_point()]

    def check_loss_output(self, engine: Engine) -> None:
        bad = first_non_finite(self._loss_items(engine))
        if bad is not None:
            raise NonFiniteError(
                f"NaNGuard: non-finite loss output (NaN or Inf) {bad!r} at optim step "
                f"{engine.state.optim_steps} ({self._where(engine)})"
            )

    def check_gradients(self, engine: Engine) -> None:
        bad = first_non_finite((n, p.grad) for n, p in self.parameters if p.grad is not None)
        if bad is not None:
            raise NonFiniteError(
                f"NaNGuard: non-finite gradient (NaN or Inf) of parameter {bad!r} at optim step "
                f"{engine.state.optim_steps} ({self._where(engine)})"
            )

    def check_step(self, engine: Engine) -> None:
        """Losses and gradients with one sync; on failure, name the loss first, else the gradient."""
        tensors = [v for _, v in self._loss_items(engine)] if self.check_losses else []
        if self.parameters:
            tensors += [p.grad for _, p in self.parameters if p.grad is not None]
        if _all_finite(tensors):
            return
        if self.check_losses:
            self.check_loss_output(engine)
        if self.parameters:
            self.check_gradients(engine)

    def attach(self, engine: Engine) -> NaNGuard:
        """Check batches on ``BATCH_COLLECTED``; losses, then gradients, on ``BACKWARD_COMPLETED``
        (each only if configured)."""
        if not isinstance(engine, Engine):
            raise TypeError(f"NaNGuard.attach: argument engine must be an ignite Engine, got {type(engine).__name__}")
        if self.batch_keys:
            engine.add_event_handler(RLEvents.BATCH_COLLECTED, self.check_batch)
        if self.check_losses or self.parameters:
            engine.add_event_handler(RLEvents.BACKWARD_COMPLETED, self.check_step)
        return self
