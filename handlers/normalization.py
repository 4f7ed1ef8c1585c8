"""Observation and reward normalization as handlers on ``RLEvents.BATCH_COLLECTED``.

- :class:`ObservationNormalizer` folds each training batch's observations into a
  :class:`~engine_rl.algos.normalization.Normalizer` that lives *inside the policy*: the collector,
  the loss and the evaluator all call the policy, so all apply the same transform, and the
  statistics are saved with the policy's ``state_dict``. Only this handler updates them, so
  evaluation never does (and ``normalizer.frozen = True`` stops updates altogether).
- :class:`RewardNormalizer` scales each batch's rewards in place by the running std of the
  discounted return (:class:`~engine_rl.algos.normalization.ReturnScaler`), then clamps.
- :class:`RewardClipper` replaces each batch's rewards by their sign (Mnih et al., 2015: Atari
  scores of any scale become -1, 0, +1 for the loss).

Attach both before handlers that read rewards or values on the same event (e.g.
:class:`handlers.advantage.GAEAdvantage`): Ignite runs handlers in attachment order.
Episode statistics are unaffected: they read ``("next", "episode_return")``, which the
collector sums from raw rewards.
"""

from __future__ import annotations

from typing import Any

import torch
from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle

from engine_rl.algos.normalization import Normalizer, ReturnScaler
from engine_rl.events import RLEvents
from engine_rl.keys import NestedKey, require_keys
from handlers._attach import add_handler

__all__ = ["ObservationNormalizer", "RewardClipper", "RewardNormalizer"]


class ObservationNormalizer:
    """Update ``normalizer``'s running mean/std from each collected batch's ``key`` entry.

    Args:
        normalizer: the :class:`~engine_rl.algos.normalization.Normalizer` the policy applies
            (e.g. ``policy.obs_normalizer``).
        key: the batch entry to learn the statistics from.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> norm = Normalizer((2,), epsilon=0.0)
        >>> w = torch.nn.Parameter(torch.zeros(()))
        >>> data = [TensorDict({"observation": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}, [2])]
        >>> trainer = create_trainer(data, lambda td: {"loss": w * 0.0}, torch.optim.SGD([w], lr=0.1))
        >>> _ = ObservationNormalizer(norm).attach(trainer)
        >>> _ = trainer.run(max_epochs=1)
        >>> norm.mean.tolist(), norm.var.tolist()
        ([2.0, 4.0], [1.0, 4.0])
    """

    def __init__(self, normalizer: Normalizer, *, key: NestedKey = "observation") -> None:
        if not callable(getattr(normalizer, "update", None)):
            raise TypeError(
                f"ObservationNormalizer: argument normalizer must have an update(x) method (a Normalizer), "
                f"got {type(normalizer).__name__}"
            )
        self.normalizer = normalizer
        self.key = key

    def __call__(self, engine: Engine) -> None:
        batch = engine.state.batch
        require_keys(batch, [self.key], consumer="ObservationNormalizer")
        self.normalizer.update(batch[self.key])

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> RemovableEventHandle:
        """Update on ``event`` (default: every collected batch)."""
        return add_handler(engine, self, event, every, owner="ObservationNormalizer", exclusive=self.normalizer,
                           twice="its statistics would count every batch twice")

    def state_dict(self) -> dict[str, Any]:
        """The normalizer's statistics (also in the policy's ``state_dict``)."""
        return dict(self.normalizer.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.normalizer.load_state_dict(state_dict)


class RewardNormalizer:
    """Replace each batch's rewards by rewards scaled with the discounted-return std.

    The batch must be ``[num_envs, T]`` with rows contiguous in time and continuing across
    batches (as :class:`~engine_rl.collectors.GymCollector` yields). Publishes
    ``metrics["return_std"]``, the std the rewards were divided by.

    Args:
        gamma: discount of the return (the algorithm's gamma).
        clip: clamp bound of the scaled rewards (``None``: no clamp).
        eps: added to the variance before the square root.
        ema: ``None`` (exact running statistics) or an EMA decay in (0, 1).
        key: the reward entry (overwritten).
        done_key: the entry whose True values reset the running return.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> norm = RewardNormalizer(gamma=0.5, epsilon=0.0)
        >>> batch = TensorDict({("next", "reward"): torch.tensor([[1.0, 1.0]]),
        ...                     ("next", "done"): torch.tensor([[False, True]])}, [1, 2])
        >>> norm.normalize(batch)["next", "reward"].round(decimals=3).tolist()
        [[4.0, 4.0]]
    """

    def __init__(
        self,
        *,
        gamma: float,
        clip: float | None = 10.0,
        eps: float = 1e-8,
        epsilon: float = 1e-4,
        ema: float | None = None,
        key: NestedKey = ("next", "reward"),
        done_key: NestedKey = ("next", "done"),
    ) -> None:
        self.scaler = ReturnScaler(gamma=gamma, clip=clip, eps=eps, epsilon=epsilon, ema=ema)
        self.key = key
        self.done_key = done_key

    def normalize(self, batch: Any) -> Any:
        """Scale ``batch[key]`` in place (and return ``batch``)."""
        require_keys(batch, [self.key, self.done_key], consumer="RewardNormalizer")
        if batch.batch_dims != 2:
            raise ValueError(
                "RewardNormalizer: the batch must have batch shape [num_envs, T] (rows contiguous in time), "
                f"got {tuple(batch.batch_size)}"
            )
        reward = batch[self.key]
        shape = reward.shape
        scaled = self.scaler(reward.reshape(batch.batch_size), batch[self.done_key].reshape(batch.batch_size))
        batch.set(self.key, scaled.reshape(shape))
        return batch

    def __call__(self, engine: Engine) -> None:
        self.normalize(engine.state.batch)
        engine.state.metrics["return_std"] = float(self.scaler.stats.var.sqrt())

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> RemovableEventHandle:
        """Normalize on ``event`` (default: every collected batch)."""
        return add_handler(engine, self, event, every, owner="RewardNormalizer", exclusive=self,
                           twice="every reward would be scaled twice")

    def state_dict(self) -> dict[str, Any]:
        """Return statistics and the running returns per env (tensors)."""
        return self.scaler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state_dict)


class RewardClipper:
    """Replace each batch's rewards by their sign: -1, 0 or +1 (``torch.sign``), in place.

    Args:
        key: the reward entry (overwritten).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({("next", "reward"): torch.tensor([[4.0, 0.0, -0.5]])}, [1, 3])
        >>> RewardClipper().clip(batch)["next", "reward"].tolist()
        [[1.0, 0.0, -1.0]]
    """

    def __init__(self, *, key: NestedKey = ("next", "reward")) -> None:
        self.key = key

    def clip(self, batch: Any) -> Any:
        """Replace ``batch[key]`` by its sign (and return ``batch``)."""
        require_keys(batch, [self.key], consumer="RewardClipper")
        batch.set(self.key, torch.sign(batch[self.key]))
        return batch

    def __call__(self, engine: Engine) -> None:
        self.clip(engine.state.batch)

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> RemovableEventHandle:
        """Clip on ``event`` (default: every collected batch)."""
        return add_handler(engine, self, event, every, owner="RewardClipper", exclusive=self,
                           twice="it would clip twice (harmless, but a sign of a wiring mistake)")
