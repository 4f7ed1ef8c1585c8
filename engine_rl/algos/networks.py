"""Small network builders shared by the algorithms: the MLP, and the dueling Q head on it."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["DuelingHead", "dueling_mlp", "mlp"]


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
    layers, last = _hidden_layers(in_features, hidden, activation)
    return nn.Sequential(*layers, nn.Linear(last, out_features))


def _hidden_layers(in_features: int, hidden: Sequence[int], activation: type[nn.Module]) -> tuple[list[nn.Module], int]:
    """The hidden ``Linear, activation`` pairs of an MLP, and the width of the last."""
    layers: list[nn.Module] = []
    last = in_features
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    return layers, last



class DuelingHead(nn.Module):
    """Wang et al. (2016)'s dueling head: a value stream and an advantage stream on the same
    features, combined as ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``.

    Each stream is one linear layer on ``in_features``. With ``outputs_per_action = n > 1`` (the
    quantiles of a distributional loss) the value stream gives ``n`` numbers and the advantage
    stream ``n`` per action, combined per output index ``j``: ``Z_j(s, a) = V_j(s) + A_j(s, a) -
    mean_a' A_j(s, a')``. The output is flat, ``[..., num_actions * n]``, action-major (read it as
    ``[..., num_actions, n]``), like a plain linear layer of that width, so losses and policies
    take it unchanged.

    Args:
        in_features: width of the features (an MLP's last hidden layer, the Nature CNN's 512).
        num_actions: number of discrete actions.
        outputs_per_action: numbers per action (1 for Q values).

    Examples:
        >>> head = DuelingHead(8, 3)
        >>> q = head(torch.randn(5, 8))
        >>> q.shape, head.out_features
        (torch.Size([5, 3]), 3)
        >>> DuelingHead(8, 3, outputs_per_action=4)(torch.randn(5, 8)).shape
        torch.Size([5, 12])
    """

    def __init__(self, in_features: int, num_actions: int, *, outputs_per_action: int = 1) -> None:
        super().__init__()
        if in_features <= 0 or num_actions <= 0 or outputs_per_action <= 0:
            raise ValueError(
                f"DuelingHead: sizes must be positive, got in_features={in_features}, num_actions={num_actions}, "
                f"outputs_per_action={outputs_per_action}"
            )
        self.num_actions = num_actions
        self.outputs_per_action = outputs_per_action
        self.out_features = num_actions * outputs_per_action
        self.value = nn.Linear(in_features, outputs_per_action)
        self.advantage = nn.Linear(in_features, self.out_features)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        batch = features.shape[:-1]
        value = self.value(features).unsqueeze(-2)  # [..., 1, n]
        advantage = self.advantage(features).reshape(*batch, self.num_actions, self.outputs_per_action)
        # Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')
        q = value + advantage - advantage.mean(dim=-2, keepdim=True)
        return q.reshape(*batch, self.out_features)


def dueling_mlp(
    in_features: int,
    num_actions: int,
    hidden: Sequence[int] = (64, 64),
    *,
    outputs_per_action: int = 1,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """:func:`mlp`'s hidden layers, then a :class:`DuelingHead` in place of its last linear layer.

    The hidden layers are shared by both streams; with ``hidden=()`` the head sits on the input
    features themselves (the Nature CNN's, for pixels).

    Examples:
        >>> net = dueling_mlp(4, 2, (8,))
        >>> net(torch.zeros(3, 4)).shape, type(net[-1]).__name__
        (torch.Size([3, 2]), 'DuelingHead')
        >>> len(dueling_mlp(4, 2, ()))
        1
    """
    if in_features <= 0 or any(h <= 0 for h in hidden):
        raise ValueError(f"dueling_mlp: sizes must be positive, got in_features={in_features}, hidden={tuple(hidden)}")
    layers, last = _hidden_layers(in_features, hidden, activation)
    return nn.Sequential(*layers, DuelingHead(last, num_actions, outputs_per_action=outputs_per_action))
