"""Stop training at the first NaN/Inf, or skip the optim steps that hold one, naming it and the step.

:class:`NaNGuard` checks

- collected batches (observations, rewards, ...) on ``RLEvents.BATCH_COLLECTED``: a NaN or Inf
  there always stops the run (skipping optim steps cannot repair what the env returns);
- the loss output, then gradients, on ``RLEvents.BACKWARD_COMPLETED``: before
  ``optimizer.step()`` could spread them into the weights (attach the guard before a gradient
  clipper, which would rescale an Inf gradient into NaNs), and losses first, so a NaN loss is
  reported as such rather than as the NaN gradients it causes. With ``nonfinite="stop"`` it
  raises; with ``nonfinite="skip"`` the step is skipped and counted.

and raises :class:`NonFiniteError` (Ignite re-raises it from ``run()``, before any later
handler of the iteration, so no checkpoint is written from that state). The checks are
:class:`engine_rl.finite.NonFiniteCheck`'s: one reduction and one host sync per check while
all is finite; the offending entry is searched only on failure.

In a data-parallel run (world size > 1) the ranks decide together, with one all-reduce per
check (:func:`engine_rl.distributed.reporting_rank`; none in one process): a step that one rank
finds non-finite (a loss output of its own data; gradients are already averaged) is skipped by
every rank, so the weights and ``nonfinite_skipped`` stay the same on all of them; a stop stops
every rank, the one that found the value raising :class:`NonFiniteError` (a loss output before a
gradient, then the lowest rank) and the others :class:`NonFiniteElsewhere`, which ``engine-rl
train`` does not print: the run's error is one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from tensordict import TensorDictBase
from torch import nn

from engine_rl.distributed import reporting_rank
from engine_rl.events import RLEvents
from engine_rl.finite import NonFiniteCheck, NonFiniteElsewhere, NonFiniteError, first_non_finite
from engine_rl.keys import NestedKey, format_key

__all__ = ["NaNGuard", "NonFiniteElsewhere", "NonFiniteError", "first_non_finite"]

DEFAULT_BATCH_KEYS: tuple[NestedKey, ...] = ("observation", ("next", "observation"), ("next", "reward"))

#: What a rank found, for :func:`~engine_rl.distributed.reporting_rank`: the most telling is reported.
_CODES = {"loss output": 2, "gradient": 1}


class NaNGuard:
    """Raise :class:`NonFiniteError` on a NaN/Inf in batches, losses or gradients, or skip the step.

    Args:
        parameters: a module (named parameters) or an iterable of modules/tensors whose
            gradients are checked; ``None``: no gradient check.
        batch_keys: batch entries to check (missing ones are skipped); ``()``: no batch check.
        check_losses: check every tensor of the loss output (``loss*`` and diagnostics).
        nonfinite: what a NaN/Inf in the loss output or the gradients does. ``"stop"``: raise
            before ``optimizer.step()``, so the weights stay those of the previous step.
            ``"skip"``: drop the step's gradients (``parameters``' and those of every optimizer
            the trainer steps), so ``torch.optim`` leaves the weights and its state (Adam's
            step count included) as they were; replace ``state.sample`` by its first 0 rows,
            so handlers that write per-row results back on ``OPTIM_STEP_DONE`` (priorities)
            write nothing; count the step in ``engine.state.metrics[metric_name]``. Target
            networks still move towards the unchanged, finite weights. A NaN/Inf in a batch
            stops either way.
        metric_name: with ``nonfinite="skip"``, the metric counting skipped steps (saved in
            the guard's ``state_dict``, so a resumed run counts on).

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

        Skipping: the step whose loss is NaN leaves ``w`` as it was.

        >>> ok = TensorDict({"observation": torch.ones(2, 1)}, [2])
        >>> scale = iter([1.0, float("nan"), 1.0])
        >>> trainer = create_trainer([ok] * 3, lambda td: {"loss": w * next(scale)}, torch.optim.SGD([w], lr=0.1))
        >>> guard = NaNGuard(parameters=[w], nonfinite="skip").attach(trainer)
        >>> _ = trainer.run(max_epochs=1)
        >>> round(w.item(), 3), trainer.state.metrics["nonfinite_skipped"]
        (0.8, 1)
    """

    def __init__(
        self,
        *,
        parameters: nn.Module | Iterable[nn.Module | torch.Tensor] | None = None,
        batch_keys: Sequence[NestedKey] = DEFAULT_BATCH_KEYS,
        check_losses: bool = True,
        nonfinite: str = "stop",
        metric_name: str = "nonfinite_skipped",
    ) -> None:
        named = self._named_parameters(parameters) if parameters is not None else []
        self.check = NonFiniteCheck(named, nonfinite=nonfinite)
        self.parameters = self.check.parameters
        self.batch_keys = list(batch_keys)
        self.check_losses = check_losses
        self.metric_name = metric_name
        self._rank, self._world = 0, 1  # the process group's, read when a run starts

    @property
    def nonfinite(self) -> str:
        """``"stop"`` or ``"skip"``."""
        return self.check.nonfinite

    @property
    def skipped(self) -> int:
        """Optim steps skipped so far (``nonfinite="skip"``)."""
        return self.check.skipped

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

    def check_gradients(self, named_parameters: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Check (and, with ``"skip"``, drop) the gradients of these ``(name, parameter)`` pairs too."""
        known = {id(p) for _, p in self.parameters}
        self.parameters.extend((name, p) for name, p in named_parameters if id(p) not in known)

    @staticmethod
    def _counters(engine: Engine) -> tuple[Any, Any, Any]:
        s = engine.state
        return tuple(getattr(s, name, "?") for name in ("batches", "frames", "optim_steps"))

    def _elsewhere(self, engine: Engine, reporter: int, what: str) -> NonFiniteElsewhere:
        batches, frames, steps = self._counters(engine)
        return NonFiniteElsewhere(
            f"NaNGuard: rank {reporter} of {self._world} found a non-finite {what} at batch {batches} (frames "
            f"{frames}, optim step {steps}) and stops the run with its error; this rank stops with it"
        )

    def check_batch(self, engine: Engine) -> None:
        """Raise :class:`NonFiniteError` naming the first batch key holding a NaN/Inf (with
        several ranks: the lowest rank holding one; the others raise :class:`NonFiniteElsewhere`)."""
        batch: TensorDictBase = engine.state.batch
        keys = batch.keys(include_nested=True)
        bad = self.check.data((format_key(k), batch[k]) for k in self.batch_keys if k in keys)
        if self._world > 1:
            reporter = reporting_rank(int(bad is not None))
            if reporter is not None and reporter != self._rank:
                raise self._elsewhere(engine, reporter, "value in its batch")
        if bad is not None:
            batches, frames, steps = self._counters(engine)
            always = (
                "; non-finite data stops whatever nonfinite says: skipping optim steps cannot repair what the env "
                "returns" if self.nonfinite == "skip" else ""
            )
            raise NonFiniteError(
                f"NaNGuard: non-finite value (NaN or Inf) in batch key {bad!r} at batch {batches} "
                f"(frames {frames}, optim step {steps}){always}"
            )

    def _loss_items(self, engine: Engine) -> list[tuple[str, torch.Tensor]]:
        losses = engine.state.losses
        if losses is None or not self.check_losses:
            return []
        items = losses.items() if isinstance(losses, Mapping) else losses.items(include_nested=True, leaves_only=True)
        return [(format_key(k), v) for k, v in items if isinstance(v, torch.Tensor)]

    def check_step(self, engine: Engine) -> None:
        """Losses and gradients with one sync; on a NaN/Inf raise (``"stop"``) or skip the step.

        With several ranks, one all-reduce more: a step any rank finds non-finite is skipped
        (or stops the run) on every rank."""
        optimizers = getattr(engine, "optimizers", ())
        found = self.check.step(self._loss_items(engine), optimizers=optimizers)
        reporter = self._rank
        if self._world > 1:
            reporter = reporting_rank(0 if found is None else _CODES[found.kind])
            if reporter is None:
                return
        elif found is None:
            return
        if self.nonfinite == "stop":
            if reporter != self._rank:
                raise self._elsewhere(engine, reporter, "loss output or gradient")
            batches, frames, steps = self._counters(engine)
            what = f"loss output (NaN or Inf) {found.name!r}"
            if found.kind == "gradient":
                what = f"gradient (NaN or Inf) of parameter {found.name!r}"
            raise NonFiniteError(
                f"NaNGuard: non-finite {what} at optim step {steps} (batch {batches}, frames {frames}); "
                "the optimizer step was not taken"
            )
        if found is None:  # another rank's loss output: every rank skips the step
            self.check.skip(optimizers)
        sample = getattr(engine.state, "sample", None)
        if isinstance(sample, TensorDictBase) and sample.batch_dims:
            engine.state.sample = sample[:0]  # per-row write-backs (priorities) write nothing for this step
        self._publish(engine)

    def _read_group(self, _: Engine) -> None:
        self._rank, self._world = idist.get_rank(), idist.get_world_size()

    def _publish(self, engine: Engine) -> None:
        engine.state.metrics[self.metric_name] = self.check.skipped

    def attach(self, engine: Engine) -> NaNGuard:
        """Check batches on ``BATCH_COLLECTED``; losses, then gradients, on ``BACKWARD_COMPLETED``
        (each only if configured). Attach it before handlers that read the batch or change the
        gradients (replay, normalizers, clippers)."""
        if not isinstance(engine, Engine):
            raise TypeError(f"NaNGuard.attach: argument engine must be an ignite Engine, got {type(engine).__name__}")
        engine.add_event_handler(Events.STARTED, self._read_group)
        if self.batch_keys:
            engine.add_event_handler(RLEvents.BATCH_COLLECTED, self.check_batch)
        if self.check_losses or self.parameters:
            engine.add_event_handler(RLEvents.BACKWARD_COMPLETED, self.check_step)
        if self.nonfinite == "skip":
            engine.add_event_handler(Events.STARTED, self._publish)  # 0, or the resumed count
        return self

    def state_dict(self) -> dict[str, Any]:
        """The count of skipped steps."""
        return self.check.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.check.load_state_dict(state)
