"""Policy weights that one process publishes and another loads: a shared-memory copy with a version.

:class:`SharedWeights` is how the learner's weights reach an
:class:`~engine_rl.collectors.AsyncCollector`'s worker. Protocol (one publisher, one loader):
two shared int64 counters, the published sequence number (twice the version; odd while a copy
is in progress, a seqlock) and the one the loader last loaded. Neither side waits for the other:
the loader retries a copy that a publish overlapped, and skips the copy when nothing new was
published.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.keys import format_key

__all__ = ["SharedWeights"]

_SEQ, _SEEN = 0, 1  # slots of the shared counters


class SharedWeights:
    """A shared-memory copy of ``policy``'s parameters and buffers, with a version.

    Picklable through ``torch.multiprocessing`` (the tensors travel by shared-memory handle):
    build it in the publishing process, pass it to the loading one.

    Args:
        policy: the module whose weights are shared (its structure fixes the keys).
        owner: how error messages name the publisher.

    Examples:
        >>> actor, learner = nn.Linear(2, 1), nn.Linear(2, 1)
        >>> shared = SharedWeights(actor)
        >>> shared.publish(learner)
        >>> shared.version, shared.loaded_version
        (1, 0)
        >>> shared.load_into(TensorDict.from_module(actor))  # in the other process, usually
        True
        >>> torch.equal(actor.weight, learner.weight), shared.loaded_version
        (True, 1)
    """

    def __init__(self, policy: nn.Module, *, owner: str = "SharedWeights") -> None:
        with torch.no_grad():
            self.tensors = TensorDict.from_module(policy).data.clone().share_memory_()
        self.counters = torch.zeros(2, dtype=torch.int64).share_memory_()
        self.owner = owner
        self._keys = {format_key(k) for k in self.tensors.keys(include_nested=True, leaves_only=True)}

    @property
    def version(self) -> int:
        """Weight updates published so far."""
        return int(self.counters[_SEQ]) // 2

    @property
    def loaded_version(self) -> int:
        """The newest of them the loader has loaded."""
        return int(self.counters[_SEEN]) // 2

    def set_version(self, version: int) -> None:
        """Count ``version`` updates as published and loaded (a collector resumed from a checkpoint)."""
        self.counters[_SEQ] = self.counters[_SEEN] = 2 * int(version)

    def publish(self, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module) -> None:
        """Copy ``weights`` in and bump the version.

        Args:
            weights: ``TensorDict.from_module(module)``, a ``state_dict`` (its tensor entries) or
                an ``nn.Module``, with the structure of the ``policy`` given at construction.
        """
        if isinstance(weights, nn.Module):
            weights = TensorDict.from_module(weights)
        elif isinstance(weights, Mapping) and not isinstance(weights, TensorDictBase):
            weights = TensorDict(
                {tuple(k.split(".")): v for k, v in weights.items() if isinstance(v, torch.Tensor)}, batch_size=[]
            )
        if not isinstance(weights, TensorDictBase):
            raise TypeError(
                f"{self.owner}: weights must be a TensorDict, a state_dict, an nn.Module or None, "
                f"got {type(weights).__name__}"
            )
        got = {format_key(k) for k in weights.keys(include_nested=True, leaves_only=True)}
        if got != self._keys:
            raise KeyError(
                f"{self.owner}: the weights do not match the policy: missing {sorted(self._keys - got)}, "
                f"unexpected {sorted(got - self._keys)}"
            )
        counters = self.counters.numpy()
        counters[_SEQ] += 1  # odd: the loader waits for the copy to finish
        try:
            with torch.no_grad():
                self.tensors.update_(weights)
        finally:
            counters[_SEQ] += 1

    def load_into(self, params: TensorDictBase) -> bool:
        """Copy the newest complete weights into ``params`` (``TensorDict.from_module(policy)`` of
        the loader's policy) if they are newer than the last loaded; True if it copied."""
        counters = self.counters.numpy()
        while True:
            seq = int(counters[_SEQ])
            if seq == int(counters[_SEEN]):
                return False
            if seq & 1:  # the publisher is copying right now (microseconds)
                time.sleep(0)
                continue
            with torch.no_grad():
                params.update_(self.tensors)
            if int(counters[_SEQ]) == seq:  # no publish overlapped the copy
                counters[_SEEN] = seq
                return True
