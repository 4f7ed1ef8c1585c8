"""Target-network updates after optimizer steps.

:class:`TargetNetUpdater` runs :class:`engine_rl.algos.targets.HardUpdate` or
:class:`engine_rl.algos.targets.SoftUpdate` on ``RLEvents.OPTIM_STEP_DONE(every=every)``. The event
filter counts ``engine.state.optim_steps``, which checkpoints save, so a resumed run keeps the
schedule (a hard update every 500 steps happens at steps 500, 1000, ... across restarts).
"""

from __future__ import annotations

from typing import Any

from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle
from torch import nn

from engine_rl.algos.targets import HardUpdate, SoftUpdate, check_tau
from engine_rl.checks import positive_int
from engine_rl.events import RLEvents
from handlers._attach import add_handler

__all__ = ["TargetNetUpdater"]


class TargetNetUpdater:
    """Copy (``tau=None``) or Polyak-average (``tau`` in (0, 1]) ``source`` into ``target``.

    - ``tau=None``: hard copy every ``every`` optim steps (DQN: ``every=500`` or so).
    - ``tau`` given: ``target <- (1 - tau) * target + tau * source`` every ``every`` optim
      steps (SAC/DDPG: ``tau=0.005, every=1``), one fused ``_foreach_lerp_`` over all tensors.

    Parameter and buffer names, shapes, dtypes and devices of ``source`` and ``target`` are
    checked at construction (build the target with ``copy.deepcopy(source)``).

    Args:
        source: the trained module.
        target: its target copy (not trained by any optimizer).
        tau: None for hard updates, else the soft-update rate in (0, 1].
        every: optim steps between updates; the default for :meth:`attach`.

    Examples:
        >>> import copy, torch
        >>> online = torch.nn.Linear(2, 1)
        >>> target = copy.deepcopy(online)
        >>> updater = TargetNetUpdater(online, target, tau=0.5)
        >>> with torch.no_grad():
        ...     _ = online.bias.add_(1.0)
        >>> updater.update()
        >>> round((online.bias - target.bias).item(), 6)
        0.5
    """

    def __init__(self, source: nn.Module, target: nn.Module, *, tau: float | None = None, every: int = 1) -> None:
        self.every = positive_int(every, name="argument every", owner="TargetNetUpdater")
        if tau is None:
            self.updater: HardUpdate = HardUpdate(source, target)
        else:
            self.updater = SoftUpdate(source, target, tau=check_tau(tau, consumer="TargetNetUpdater"))
        self.tau = tau

    @property
    def num_updates(self) -> int:
        """Number of updates done so far."""
        return self.updater.num_updates

    def update(self) -> None:
        """Update the target now."""
        self.updater.step()

    def __call__(self, engine: Engine) -> None:
        self.updater.step()

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.OPTIM_STEP_DONE, every: int | None = None
    ) -> RemovableEventHandle:
        """Update on ``event`` every ``every`` times (default: the constructor's ``every``)."""
        return add_handler(engine, self, event, self.every if every is None else every, owner="TargetNetUpdater",
                           exclusive=self.updater.target, twice="the target network would move twice per update")

    def state_dict(self) -> dict[str, int]:
        """``{"num_updates": int}``; the target's weights are saved with the target module."""
        return self.updater.state_dict()

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.updater.load_state_dict(state_dict)
