"""What a collector steps with: the :data:`Policy` protocol and :func:`policy_device`."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["Policy", "policy_device"]

#: A policy reads ``"observation"`` from a TensorDict of batch ``[num_envs]`` and writes
#: ``"action"`` (and optionally more entries) into it, returning it (or ``None``).
Policy = Callable[[TensorDictBase], TensorDictBase | None]


def policy_device(policy: Policy, device: torch.device | str | None = None) -> torch.device:
    """The device a policy's inputs go to: ``device`` if given, else its first parameter's.

    Examples:
        >>> policy_device(nn.Linear(2, 1)), policy_device(lambda td: td, "cpu")
        (device(type='cpu'), device(type='cpu'))
    """
    if device is not None:
        return torch.device(device)
    if isinstance(policy, nn.Module):
        for tensor in itertools.chain(policy.parameters(), policy.buffers()):
            return tensor.device
    return torch.device("cpu")
