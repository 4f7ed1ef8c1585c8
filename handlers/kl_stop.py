"""Stop a batch's optim epochs early when the policy moved too far (PPO's KL early stop).

:class:`KLEarlyStop` reads the loss's ``approx_kl`` after every optim step
(``RLEvents.OPTIM_STEP_DONE``) and, at the end of an optim epoch (``RLEvents.EPOCH_DONE``) in
which it exceeded ``factor * target_kl``, sets ``state.end_optim_epochs = True``: the trainer
skips the batch's remaining epochs. (Stable-Baselines3 checks before each step and breaks at
once; the trainer can stop only between epochs, so with one minibatch per epoch the two agree.)
"""

from __future__ import annotations

from typing import Any

import torch
from ignite.engine import Engine

from engine_rl.checks import positive_number
from engine_rl.events import RLEvents

__all__ = ["KLEarlyStop", "kl_exceeded"]


def kl_exceeded(approx_kl: float, target_kl: float, factor: float = 1.5) -> bool:
    """Whether ``approx_kl > factor * target_kl``.

    Examples:
        >>> kl_exceeded(0.02, 0.01), kl_exceeded(0.014, 0.01)
        (True, False)
    """
    return approx_kl > factor * target_kl


class KLEarlyStop:
    """End the current batch's optim epochs once ``approx_kl > factor * target_kl``.

    Also publishes ``metrics["approx_kl"]`` (the last optim step's value) and
    ``metrics["optim_epochs_run"]`` (epochs run on the last batch).

    Args:
        target_kl: the KL target (> 0).
        factor: the threshold is ``factor * target_kl`` (1.5 as in SB3).
        key: the loss output holding the KL estimate.

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> w = torch.nn.Parameter(torch.zeros(()))
        >>> kls = iter([0.01, 0.02, 0.04, 0.05, 0.06])  # the policy drifts more every step
        >>> def loss(td):
        ...     return {"loss": w * 0.0, "approx_kl": torch.tensor(next(kls))}
        >>> data = [TensorDict({"x": torch.zeros(4)}, [4])]
        >>> trainer = create_trainer(data, loss, torch.optim.SGD([w], lr=0.1), num_epochs=5)
        >>> _ = KLEarlyStop(0.02).attach(trainer)  # threshold 1.5 * 0.02 = 0.03
        >>> _ = trainer.run(max_epochs=1)
        >>> trainer.state.optim_steps, trainer.state.metrics["optim_epochs_run"]
        (3, 3)
    """

    def __init__(self, target_kl: float, *, factor: float = 1.5, key: str = "approx_kl") -> None:
        self.target_kl = positive_number(target_kl, name="argument target_kl", owner="KLEarlyStop")
        self.factor = positive_number(factor, name="argument factor", owner="KLEarlyStop")
        self.key = key
        self._exceeded = False
        self._epochs = 0
        self.num_stops = 0

    def _on_batch(self, _: Engine) -> None:
        self._exceeded = False
        self._epochs = 0

    def _on_step(self, engine: Engine) -> None:
        losses = engine.state.losses
        if losses is None or self.key not in losses.keys():
            present = sorted(map(str, losses.keys())) if losses is not None else []
            raise KeyError(f"KLEarlyStop: the loss output has no {self.key!r}; it has {present}")
        value = losses[self.key]
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        engine.state.metrics["approx_kl"] = value
        if kl_exceeded(value, self.target_kl, self.factor):
            self._exceeded = True

    def _on_epoch(self, engine: Engine) -> None:
        self._epochs += 1
        engine.state.metrics["optim_epochs_run"] = self._epochs
        if self._exceeded:
            engine.state.end_optim_epochs = True
            self.num_stops += 1

    def attach(self, engine: Engine) -> KLEarlyStop:
        """Hook ``BATCH_COLLECTED`` (reset), ``OPTIM_STEP_DONE`` (read) and ``EPOCH_DONE`` (stop)."""
        if not isinstance(engine, Engine):
            raise TypeError(
                f"KLEarlyStop.attach: argument engine must be an ignite Engine, got {type(engine).__name__}"
            )
        engine.add_event_handler(RLEvents.BATCH_COLLECTED, self._on_batch)
        engine.add_event_handler(RLEvents.OPTIM_STEP_DONE, self._on_step)
        engine.add_event_handler(RLEvents.EPOCH_DONE, self._on_epoch)
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"num_stops": self.num_stops}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.num_stops = int(state_dict.get("num_stops", 0))
