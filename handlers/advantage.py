"""GAE advantages, computed once per collected batch (not per minibatch).

:class:`GAEAdvantage` runs on ``RLEvents.BATCH_COLLECTED``: one critic forward over the batch's
observations and next observations, then :func:`engine_rl.algos.gae.gae`; it writes
``"state_value"``, ``"advantage"`` and ``"value_target"`` into ``state.batch``. Attach it after
any handler that changes rewards or observation statistics on the same event
(:class:`handlers.normalization.RewardNormalizer`, :class:`handlers.normalization.ObservationNormalizer`):
Ignite runs handlers in the order they were attached.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle
from tensordict import TensorDictBase

from engine_rl.algos.gae import gae
from engine_rl.checks import fail, is_number
from engine_rl.events import RLEvents
from engine_rl.keys import require_keys
from handlers._attach import add_handler

__all__ = ["GAEAdvantage"]

_NEXT_OBS = ("next", "observation")
_REWARD = ("next", "reward")
_TERMINATED = ("next", "terminated")
_DONE = ("next", "done")


class GAEAdvantage:
    """Write GAE(lambda) advantages and value targets into each collected batch.

    The values come from the current critic (and observation normalizer, through ``value_fn``), not
    from the collection: one forward over the batch's observations and next observations (so ``V``
    of the true final observation of truncated episodes), and the policy runs no critic while it
    collects. The batch must be ``[num_envs, T]``
    with rows contiguous in time (as :class:`~engine_rl.collectors.GymCollector` yields): the next
    observation of a step that did not end an episode is the next step's observation.

    Args:
        value_fn: observations ``[..., obs_dim]`` -> values ``[...]`` (e.g. ``policy.value``).
        batch_values: instead of ``value_fn``, the batch -> ``(V(s), V(s'))``, each ``[num_envs, T]``
            (``policy.batch_values``: what a recurrent policy needs, whose values depend on the
            stored state as well; the feed-forward policies have it too).
        gamma: discount factor.
        lmbda: GAE lambda.
        normalize_advantage: standardize the advantages over the whole batch (PPOLoss can do
            it per minibatch instead).

    Examples:
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({
        ...     "observation": torch.zeros(1, 3, 2), ("next", "observation"): torch.zeros(1, 3, 2),
        ...     ("next", "reward"): torch.ones(1, 3),
        ...     ("next", "terminated"): torch.tensor([[False, False, True]]),
        ...     ("next", "done"): torch.tensor([[False, False, True]])}, [1, 3])
        >>> handler = GAEAdvantage(lambda obs: obs.sum(-1), gamma=0.5, lmbda=1.0)
        >>> handler.compute(batch)["advantage"]
        tensor([[1.7500, 1.5000, 1.0000]])
    """

    in_keys = ["observation", _NEXT_OBS, _REWARD, _TERMINATED, _DONE]

    def __init__(
        self,
        value_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        *,
        batch_values: Callable[[TensorDictBase], tuple[torch.Tensor, torch.Tensor]] | None = None,
        gamma: float,
        lmbda: float,
        normalize_advantage: bool = False,
    ) -> None:
        if (value_fn is None) == (batch_values is None):
            raise TypeError("GAEAdvantage: give exactly one of value_fn (observations -> values) and batch_values")
        given, name = (value_fn, "value_fn") if value_fn is not None else (batch_values, "batch_values")
        if not callable(given):
            raise TypeError(f"GAEAdvantage: argument {name} must be callable, got {type(given).__name__}")
        for name, value in (("gamma", gamma), ("lmbda", lmbda)):
            if not (is_number(value) and 0.0 <= value <= 1.0):
                fail(value, "in [0, 1]", name=f"argument {name}", owner="GAEAdvantage")
        self.value_fn = value_fn
        self.batch_values = batch_values
        self.gamma = float(gamma)
        self.lmbda = float(lmbda)
        self.normalize_advantage = normalize_advantage

    @torch.no_grad()
    def compute(self, batch: TensorDictBase) -> TensorDictBase:
        """Write ``"state_value"``, ``"advantage"``, ``"value_target"`` into ``batch``; return it."""
        if batch.batch_dims != 2:
            raise ValueError(
                "GAEAdvantage: the batch must have batch shape [num_envs, T] (rows contiguous in time), "
                f"got {tuple(batch.batch_size)}"
            )
        require_keys(batch, self.in_keys, consumer="GAEAdvantage")
        n, t = batch.batch_size
        if self.batch_values is not None:
            value, next_value = self.batch_values(batch)
        else:
            obs, next_obs = batch["observation"], batch[_NEXT_OBS]
            values = self.value_fn(torch.cat([obs, next_obs])).reshape(2 * n, t)  # one forward for V(s) and V(s')
            value, next_value = values[:n], values[n:]
        advantage, target = gae(
            batch[_REWARD].reshape(n, t), value, next_value, batch[_TERMINATED].reshape(n, t),
            batch[_DONE].reshape(n, t), gamma=self.gamma, lmbda=self.lmbda,
        )
        if self.normalize_advantage and advantage.numel() > 1:
            std, mean = torch.std_mean(advantage)
            advantage = (advantage - mean) / (std + 1e-8)
        batch.set("state_value", value)
        batch.set("advantage", advantage)
        batch.set("value_target", target)
        return batch

    def __call__(self, engine: Engine) -> None:
        self.compute(engine.state.batch)

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> RemovableEventHandle:
        """Compute on ``event`` (default: every collected batch)."""
        return add_handler(engine, self, event, every, owner="GAEAdvantage")
