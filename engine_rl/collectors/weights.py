"""Copy learner weights into a collector's policy: shared by every collector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.keys import format_key

__all__ = ["load_policy_weights"]


def load_policy_weights(
    policy: Any, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module | None, *, owner: str
) -> None:
    """Copy ``weights`` into ``policy`` in place (across devices); ``None`` does nothing.

    Args:
        policy: an ``nn.Module``.
        weights: ``TensorDict.from_module(module)``, a ``state_dict``, or an ``nn.Module`` with
            the policy's structure.
        owner: the component named in error messages.

    Examples:
        >>> learner, actor = nn.Linear(2, 1), nn.Linear(2, 1)
        >>> load_policy_weights(actor, learner, owner="demo")
        >>> torch.equal(actor.weight, learner.weight)
        True
    """
    if weights is None:
        return
    if not isinstance(policy, nn.Module):
        raise TypeError(f"{owner}: the policy must be an nn.Module to receive weights, got {type(policy).__name__}")
    if isinstance(weights, nn.Module):
        weights = TensorDict.from_module(weights)
    with torch.no_grad():
        if isinstance(weights, TensorDictBase):
            dest = TensorDict.from_module(policy)
            got = {format_key(k) for k in weights.keys(include_nested=True, leaves_only=True)}
            want = {format_key(k) for k in dest.keys(include_nested=True, leaves_only=True)}
            if got != want:
                raise KeyError(
                    f"{owner}: the weights do not match the policy: missing {sorted(want - got)}, "
                    f"unexpected {sorted(got - want)}"
                )
            dest.update_(weights)
        elif isinstance(weights, Mapping):
            policy.load_state_dict(weights)
        else:
            raise TypeError(
                f"{owner}: weights must be a TensorDict, a state_dict, an nn.Module or None, "
                f"got {type(weights).__name__}"
            )
