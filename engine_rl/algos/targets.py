"""Target networks: copy (:class:`HardUpdate`) or Polyak-average (:class:`SoftUpdate`) a source
module's parameters and buffers into a target module.

Both are plain objects with a ``step()`` method, free of any engine; the
:class:`handlers.TargetNetUpdater` handler calls ``step()`` on ``RLEvents.OPTIM_STEP_DONE``.

The soft update is one fused ``torch._foreach_lerp_`` over all floating-point tensors,
``target <- target + tau * (source - target) = (1 - tau) * target + tau * source``; integer buffers
(e.g. BatchNorm's ``num_batches_tracked``) are copied.

The parameter lists are built once, at construction: ``.to(device)``/``.double()`` keep the
``Parameter`` objects (only their data changes), so moving both modules later is fine; buffers,
which ``.to()`` replaces, are looked up at every step. After anything that replaces parameter
objects (``load_state_dict(..., assign=True)``, assigning ``module.weight = ...``), build a new
updater.
"""

from __future__ import annotations

import torch
from torch import nn

from engine_rl.checks import fraction

__all__ = ["HardUpdate", "SoftUpdate", "check_matching_modules", "check_tau"]


def _named_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    named = dict(module.named_parameters())
    named.update(module.named_buffers())
    return named


def check_matching_modules(source: nn.Module, target: nn.Module, *, consumer: str) -> None:
    """Raise if ``source`` and ``target`` differ in parameter/buffer names, shapes, dtypes or devices.

    Args:
        source: the trained module.
        target: its target copy.
        consumer: who asks (for the error message), e.g. ``"SoftUpdate"``.

    Examples:
        >>> from torch import nn
        >>> check_matching_modules(nn.Linear(2, 3), nn.Linear(2, 3), consumer="demo")
        >>> check_matching_modules(nn.Linear(2, 3), nn.Linear(2, 4), consumer="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: parameter 'weight' has shape (3, 2) in source but (4, 2) in target
    """
    for name, module in (("source", source), ("target", target)):
        if not isinstance(module, nn.Module):
            raise TypeError(f"{consumer}: argument {name} must be a torch.nn.Module, got {type(module).__name__}")
    if source is target:
        raise ValueError(f"{consumer}: source and target are the same module; the target must be a separate copy")
    src, tgt = _named_tensors(source), _named_tensors(target)
    if src.keys() != tgt.keys():
        only_src = sorted(src.keys() - tgt.keys())
        only_tgt = sorted(tgt.keys() - src.keys())
        raise ValueError(
            f"{consumer}: source and target have different parameters/buffers: "
            f"only in source {only_src}, only in target {only_tgt}"
        )
    if list(src) != list(tgt):
        raise ValueError(
            f"{consumer}: source and target register their parameters/buffers in a different order; "
            "build the target as copy.deepcopy(source)"
        )
    for name, s in src.items():
        t = tgt[name]
        for what, a, b in (
            ("shape", tuple(s.shape), tuple(t.shape)),
            ("dtype", s.dtype, t.dtype),
            ("device", s.device, t.device),
        ):
            if a != b:
                raise ValueError(f"{consumer}: parameter {name!r} has {what} {a} in source but {b} in target")
        if t.data_ptr() == s.data_ptr() and t.numel() > 0:
            raise ValueError(
                f"{consumer}: parameter {name!r} is shared by source and target; the target must be a copy"
            )


def check_tau(tau: float, *, consumer: str) -> float:
    """Return ``tau`` as a float if it is a number in (0, 1]; raise a ``ValueError`` naming ``consumer`` otherwise."""
    return fraction(tau, name="argument tau", owner=consumer, zero=False)


class HardUpdate:
    """Copy every parameter and buffer of ``source`` into ``target`` at each :meth:`step`.

    Args:
        source: the trained module.
        target: the target module; same parameter names, shapes, dtypes and devices (checked).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> online, target = nn.Linear(2, 1), nn.Linear(2, 1)
        >>> update = HardUpdate(online, target)
        >>> update.step()
        >>> torch.equal(online.weight, target.weight), update.num_updates
        (True, 1)
    """

    def __init__(self, source: nn.Module, target: nn.Module) -> None:
        check_matching_modules(source, target, consumer=type(self).__name__)
        self.source = source
        self.target = target
        self.num_updates = 0
        self._source_params = list(source.parameters())
        self._target_params = list(target.parameters())
        self._has_buffers = any(True for _ in source.buffers())

    @torch.no_grad()
    def step(self) -> None:
        """Copy ``source`` into ``target`` (parameters and buffers), in place."""
        src, tgt = self._source_params, self._target_params
        if self._has_buffers:
            src = [*src, *self.source.buffers()]
            tgt = [*tgt, *self.target.buffers()]
        if tgt:
            torch._foreach_copy_(tgt, src)
        self.num_updates += 1

    def state_dict(self) -> dict[str, int]:
        """``{"num_updates": int}`` (the weights themselves live in the modules' own state dicts)."""
        return {"num_updates": self.num_updates}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.num_updates = int(state_dict["num_updates"])


class SoftUpdate(HardUpdate):
    """Polyak averaging: ``target <- (1 - tau) * target + tau * source`` at each :meth:`step`.

    Floating-point parameters and buffers are averaged in one fused ``torch._foreach_lerp_``;
    integer buffers are copied.

    Args:
        source: the trained module.
        target: the target module; same parameter names, shapes, dtypes and devices (checked).
        tau: weight of the source, in (0, 1]; ``tau=1`` is a hard copy.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> online, target = nn.Linear(1, 1), nn.Linear(1, 1)
        >>> with torch.no_grad():
        ...     _ = online.weight.fill_(1.0), target.weight.fill_(0.0)
        >>> SoftUpdate(online, target, tau=0.1).step()
        >>> round(target.weight.item(), 6)
        0.1
    """

    def __init__(self, source: nn.Module, target: nn.Module, *, tau: float) -> None:
        self.tau = check_tau(tau, consumer=type(self).__name__)
        super().__init__(source, target)

    @torch.no_grad()
    def step(self) -> None:
        """Move ``target`` a fraction ``tau`` of the way towards ``source``, in place."""
        src, tgt = self._source_params, self._target_params
        if self._has_buffers:
            src, tgt = list(src), list(tgt)
            for s, t in zip(self.source.buffers(), self.target.buffers()):
                if t.is_floating_point():
                    src.append(s)
                    tgt.append(t)
                else:
                    t.copy_(s)
        if tgt:
            torch._foreach_lerp_(tgt, src, self.tau)
        self.num_updates += 1
