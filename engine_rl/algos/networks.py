"""Small network builders shared by the algorithms."""

from __future__ import annotations

from collections.abc import Sequence

import torch  # noqa: F401  (the docstring example uses it)
from torch import nn

__all__ = ["mlp"]


def mlp(
    in_features: int,
    out_features: int,
    hidden: Sequence[int] = (64, 64),
    *,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """A multilayer perceptron ``in -> hidden... -> out`` with ``activation`` between layers.

    Examples:
        >>> net = mlp(4, 2, (8,))
        >>> net(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
    """
    if in_features <= 0 or out_features <= 0 or any(h <= 0 for h in hidden):
        raise ValueError(
            f"mlp: sizes must be positive, got in_features={in_features}, out_features={out_features}, "
            f"hidden={tuple(hidden)}"
        )
    layers: list[nn.Module] = []
    last = in_features
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    layers.append(nn.Linear(last, out_features))
    return nn.Sequential(*layers)

