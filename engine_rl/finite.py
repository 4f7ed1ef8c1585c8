"""NaN and Inf in training: where the first one is, and what a step that holds one does.

- :func:`first_non_finite`: the name of the first tensor holding a NaN or Inf. One reduction
  (the tensors' total 2-norm, ``torch.nn.utils.get_total_norm``) and one host sync answer for
  all of them while they are finite; the per-tensor search runs only when that norm is not.
- :class:`NonFiniteCheck`: the non-finite policy of a training step, free of any engine: data
  (observations, rewards) is checked and reported; a step whose loss output or gradients hold
  a NaN or Inf is reported (the caller stops) or, with ``nonfinite="skip"``, skipped (its
  gradients dropped, so ``optimizer.step()`` changes nothing) and counted.

:class:`handlers.NaNGuard` is its adapter to the trainer's events; it, the gradient clipper and
the evaluation (:func:`engine_rl.collectors.run_episodes`) raise :class:`NonFiniteError`. In a
data-parallel run the rank that found the value raises it and the others stop with
:class:`NonFiniteElsewhere`, so a run that stops says why once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch

__all__ = [
    "NONFINITE_POLICIES", "Found", "NonFiniteCheck", "NonFiniteElsewhere", "NonFiniteError", "check_nonfinite_policy",
    "first_non_finite",
]

NONFINITE_POLICIES: tuple[str, ...] = ("stop", "skip")
"""What a non-finite loss output or gradient does: ``"stop"`` the run or ``"skip"`` the optim step."""

_get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6


class NonFiniteError(FloatingPointError):
    """A NaN or Inf was found; the message names what, where and when."""


class NonFiniteElsewhere(NonFiniteError):
    """Another rank of a data-parallel run found a NaN or Inf and stops the run with its own
    :class:`NonFiniteError`; this rank stops too, and ``engine-rl train`` prints nothing for it,
    so the run's error is said once."""


def check_nonfinite_policy(value: Any, *, owner: str) -> str:
    """``value`` if it is one of :data:`NONFINITE_POLICIES`, else a ``ValueError`` naming ``owner``.

    Examples:
        >>> check_nonfinite_policy("skip", owner="DQNConfig")
        'skip'
        >>> check_nonfinite_policy("ignore", owner="DQNConfig")
        Traceback (most recent call last):
        ...
        ValueError: DQNConfig: nonfinite must be 'stop' or 'skip', got 'ignore'
    """
    if not isinstance(value, str) or value not in NONFINITE_POLICIES:
        raise ValueError(f"{owner}: nonfinite must be 'stop' or 'skip', got {value!r}")
    return value


def _norm_is_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether the total 2-norm of ``tensors`` is finite: one reduction, one host sync.

    A NaN or Inf entry makes it non-finite; so can finite entries whose norm exceeds the dtype's
    range (about 3.4e38 in float32), which the exact search in the callers then clears.
    """
    if not tensors:
        return True
    with torch.no_grad():
        if _get_total_norm is not None:
            total = _get_total_norm(tensors, 2.0)
        else:  # torch < 2.6: the same sum, one norm per tensor
            device = tensors[0].device
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t).to(device) for t in tensors]))
    return math.isfinite(float(total))


def _floating(named: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """The floating-point tensors of ``named`` (integers and booleans cannot be NaN), detached."""
    return [(name, t.detach()) for name, t in named if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _items(named: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> Iterable[tuple[str, Any]]:
    return named.items() if isinstance(named, Mapping) else named


def _exact_search(items: list[tuple[str, torch.Tensor]]) -> str | None:
    for name, t in items:
        if not bool(torch.isfinite(t).all()):
            return name
    return None


def first_non_finite(named: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first tensor holding a NaN or Inf, or ``None`` if all are finite.

    Args:
        named: ``(name, tensor)`` pairs or a mapping; tensors that are not floating point are
            skipped.

    Examples:
        >>> first_non_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))])
        'b'
        >>> first_non_finite({"a": torch.ones(2), "big": torch.full((4,), 3e38)}) is None
        True
    """
    items = _floating(_items(named))
    if _norm_is_finite([t for _, t in items]):
        return None
    return _exact_search(items)  # only on failure


class Found(NamedTuple):
    """Where a non-finite value was found in a step: ``kind`` ``"loss output"`` or ``"gradient"``,
    and the entry's or parameter's ``name``."""

    kind: str
    name: str


class NonFiniteCheck:
    """The non-finite policy of training: find the first NaN/Inf in data, losses and gradients;
    skip the steps that hold one when asked to.

    Data (a batch's observations and rewards) is only checked: :meth:`data` names the entry and
    the caller stops, since skipping optim steps cannot repair what an env returns. A step is
    checked after the backward and before ``optimizer.step()``: :meth:`step` looks at the loss
    output first (a NaN loss is reported as such rather than as the NaN gradients it causes),
    then at the gradients; with ``nonfinite="stop"`` it reports (the caller raises), with
    ``"skip"`` it also drops the step's gradients, so ``torch.optim`` optimizers leave those
    parameters and their state untouched (Adam's step count included), and counts the step in
    :attr:`skipped`.

    Args:
        parameters: ``(name, parameter)`` pairs whose gradients are checked and, on a skip,
            dropped (e.g. ``module.named_parameters()``).
        nonfinite: ``"stop"`` or ``"skip"`` (:data:`NONFINITE_POLICIES`).

    Examples:
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> check = NonFiniteCheck([("w", w)], nonfinite="skip")
        >>> w.grad = torch.ones(2)
        >>> check.step({"loss": torch.tensor(0.5)}) is None
        True
        >>> w.grad = torch.tensor([1.0, float("inf")])
        >>> check.step({"loss": torch.tensor(0.5)})
        Found(kind='gradient', name='w')
        >>> w.grad is None, check.skipped
        (True, 1)
        >>> check.data({"observation": torch.zeros(3), "reward": torch.tensor([0.0, float("nan")])})
        'reward'
    """

    def __init__(self, parameters: Iterable[tuple[str, torch.Tensor]] = (), *, nonfinite: str = "stop") -> None:
        self.parameters = list(parameters)
        bad = [type(p).__name__ for _, p in self.parameters if not isinstance(p, torch.Tensor)]
        if bad:
            raise TypeError(f"NonFiniteCheck: argument parameters must be (name, tensor) pairs, got {bad}")
        self.nonfinite = check_nonfinite_policy(nonfinite, owner="NonFiniteCheck")
        self.skipped = 0

    def data(self, named: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> str | None:
        """The name of the first data entry holding a NaN or Inf, or ``None``."""
        return first_non_finite(named)

    def step(
        self,
        losses: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]] = (),
        *,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> Found | None:
        """Check a step's loss output and gradients (one host sync while they are finite).

        Args:
            losses: the loss output's entries (``loss*`` and diagnostics), by name.
            optimizers: with ``nonfinite="skip"``, their parameters' gradients are dropped too
                (parameters that :attr:`parameters` does not name still skip the step).

        Returns:
            ``None`` if all are finite, else where the first NaN/Inf is (a loss entry before a
            gradient); with ``nonfinite="skip"`` the step has then been skipped.
        """
        loss_items = _floating(_items(losses))
        grad_items = [(name, p.grad) for name, p in self.parameters if p.grad is not None]
        if _norm_is_finite([t for _, t in loss_items] + [g for _, g in grad_items]):
            return None
        name = _exact_search(loss_items)
        found = Found("loss output", name) if name is not None else None
        if found is None:
            name = _exact_search(grad_items)
            found = Found("gradient", name) if name is not None else None
        if found is not None and self.nonfinite == "skip":
            self.skip(optimizers)
        return found

    def skip(self, optimizers: Iterable[torch.optim.Optimizer] = ()) -> None:
        """Drop the gradients of :attr:`parameters` and of ``optimizers``' parameters; count the step."""
        for _, p in self.parameters:
            p.grad = None
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        self.skipped += 1

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.skipped = int(state["skipped"])
