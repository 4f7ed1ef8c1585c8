"""What every collector of this package shares: iteration, weight updates, closing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.collectors.weights import load_policy_weights

__all__ = ["BatchCollector"]


class BatchCollector:
    """Base of :class:`~engine_rl.collectors.GymCollector` and
    :class:`~engine_rl.collectors.TorchEnvCollector`.

    A subclass provides ``env`` (with ``close()``), ``policy``, ``num_envs``,
    ``frames_per_batch`` and ``collect()`` (one ``[num_envs, T]`` batch); this class makes it an
    endless iterable and a context manager, and copies learner weights into its policy.
    """

    frames_per_batch: int
    env: Any
    policy: Any
    num_envs: int

    def collect(self) -> TensorDictBase:  # pragma: no cover - every subclass defines it
        raise TypeError(f"{type(self).__name__} must define collect()")

    @property
    def steps_per_batch(self) -> int:
        """``T``: frames per env row of a batch."""
        return self.frames_per_batch // self.num_envs

    def __iter__(self) -> Iterator[TensorDictBase]:
        while True:
            yield self.collect()

    def update_policy_weights_(
        self, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module | None = None
    ) -> None:
        """Copy weights into :attr:`policy` in place (across devices).

        Args:
            weights: ``TensorDict.from_module(learner_policy)``, a ``state_dict`` or an
                ``nn.Module`` with the policy's structure. ``None`` does nothing: use it when the
                collector's policy is the learner's module itself (same device), which already
                holds the newest weights.
        """
        load_policy_weights(self.policy, weights, owner=f"{type(self).__name__}.update_policy_weights_")

    def shutdown(self) -> None:
        """Close the env."""
        self.env.close()

    def __enter__(self) -> BatchCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
