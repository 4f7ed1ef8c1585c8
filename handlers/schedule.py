"""Hyperparameters that follow the frame count: learning rates, PPO's clip range, coefficients.

:class:`FrameSchedule` sets a value from ``state.frames`` on every collected batch
(``RLEvents.BATCH_COLLECTED``), before that batch's optim steps: an optimizer's ``lr`` (all its
param groups) or any attribute of any object (``PPOLoss.clip_epsilon``). rl-baselines3-zoo's
``lin_0.001`` is ``FrameSchedule(optimizer, "lr", start=1e-3, end=0.0, total_frames=N)``: the
value is ``start + (end - start) * frames / total_frames``, ``frames`` counting the batch just
collected, as Stable-Baselines3's progress counter does; past ``total_frames`` it stays ``end``.
"""

from __future__ import annotations

from typing import Any

import torch
from ignite.engine import Engine

from engine_rl.algos.exploration import LinearSchedule
from engine_rl.checks import positive_int
from engine_rl.events import RLEvents
from handlers._attach import add_handler

__all__ = ["FrameSchedule"]


class FrameSchedule:
    """Set ``target``'s ``name`` to a linear function of the frames collected.

    Args:
        target: a ``torch.optim.Optimizer`` (the value goes into every param group's ``name``)
            or any object (``setattr(target, name, value)``).
        name: the hyperparameter, e.g. ``"lr"`` or ``"clip_epsilon"``.
        start: value at frame 0.
        end: value from ``total_frames`` on.
        total_frames: length of the ramp.
        metric: also publish the value as ``engine.state.metrics[metric]`` (``None``: don't).

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> w = torch.nn.Parameter(torch.zeros(()))
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> data = [TensorDict({"x": torch.zeros(25)}, [25])] * 4
        >>> trainer = create_trainer(data, lambda td: {"loss": w * 0.0}, opt)
        >>> lrs = []
        >>> schedule = FrameSchedule(opt, "lr", start=1.0, end=0.0, total_frames=100).attach(trainer)
        >>> _ = trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: lrs.append(opt.param_groups[0]["lr"]))
        >>> _ = trainer.run(max_epochs=1)
        >>> lrs
        [0.75, 0.5, 0.25, 0.0]
    """

    def __init__(
        self,
        target: Any,
        name: str,
        *,
        start: float,
        end: float,
        total_frames: int,
        metric: str | None = None,
    ) -> None:
        if isinstance(target, torch.optim.Optimizer):
            if any(name not in group for group in target.param_groups):
                raise ValueError(f"FrameSchedule: the optimizer's param groups have no {name!r} entry")
        elif not hasattr(target, name):
            raise ValueError(f"FrameSchedule: argument target ({type(target).__name__}) has no attribute {name!r}")
        total_frames = positive_int(total_frames, name="argument total_frames", owner="FrameSchedule")
        self.target = target
        self.name = name
        self.schedule = LinearSchedule(start, end, total_frames)
        self.metric = metric

    def value(self, frames: int) -> float:
        """The value after ``frames`` frames."""
        return self.schedule.value(frames)

    def apply(self, frames: int) -> float:
        """Set the value for ``frames`` frames and return it."""
        value = self.value(frames)
        if isinstance(self.target, torch.optim.Optimizer):
            for group in self.target.param_groups:
                group[self.name] = value
        else:
            setattr(self.target, self.name, value)
        return value

    def __call__(self, engine: Engine) -> None:
        value = self.apply(int(engine.state.frames))
        if self.metric is not None:
            engine.state.metrics[self.metric] = value

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> FrameSchedule:
        """Update on ``event`` (default: every collected batch)."""
        add_handler(engine, self, event, every, owner="FrameSchedule")
        return self
