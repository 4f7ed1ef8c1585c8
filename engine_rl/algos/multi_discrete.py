"""MultiDiscrete actions: one categorical distribution per action dimension, acting together.

A ``MultiDiscrete(nvec)`` action is ``k = len(nvec)`` independent choices, choice ``i`` among
``nvec[i]`` options. :class:`MultiDiscreteLogits` lays the actor's ``sum(nvec)`` outputs out as
logits ``[..., k, max(nvec)]`` (``-inf`` past each dimension's options), so sampling, the mode,
log-probabilities and entropies are batched over the dimensions; the joint log-probability and
entropy are the sums over them (the dimensions are independent given the observation).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from engine_rl.algos.policies import ActorCritic

__all__ = ["MultiCategoricalActorCritic", "MultiDiscreteLogits"]


class MultiDiscreteLogits(nn.Module):
    """``net(obs)`` (``sum(nvec)`` outputs) as logits ``[..., len(nvec), max(nvec)]``, ``-inf`` padded.

    Examples:
        >>> head = MultiDiscreteLogits(nn.Identity(), (2, 3))
        >>> head(torch.arange(5.0))
        tensor([[0., 1., -inf],
                [2., 3., 4.]])
    """

    def __init__(self, net: nn.Module, nvec: Sequence[int]) -> None:
        super().__init__()
        self.net = net
        self.nvec = tuple(int(n) for n in nvec)
        if not self.nvec or min(self.nvec) < 1:
            raise ValueError(f"MultiDiscreteLogits: nvec must be positive ints, got {tuple(nvec)}")
        self.width = max(self.nvec)
        slots = [i * self.width + j for i, n in enumerate(self.nvec) for j in range(n)]
        self.register_buffer("slots", torch.tensor(slots), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat = self.net(obs)
        out = flat.new_full((*flat.shape[:-1], len(self.nvec) * self.width), float("-inf"))
        out[..., self.slots] = flat
        return out.unflatten(-1, (len(self.nvec), self.width))


class MultiCategoricalActorCritic(ActorCritic):
    """Actor-critic over a ``MultiDiscrete`` action space; ``actor`` is a :class:`MultiDiscreteLogits`.

    Writes ``"action"`` (int64 ``[B, k]``) and ``"log_prob"`` (the sum over the ``k`` choices, ``[B]``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> policy = MultiCategoricalActorCritic(MultiDiscreteLogits(mlp(4, 5, (8,)), (2, 3)), mlp(4, 1, (8,)), seed=0)
        >>> td = policy(TensorDict({"observation": torch.zeros(6, 4)}, [6]))
        >>> td["action"].shape, td["action"].dtype, td["log_prob"].shape
        (torch.Size([6, 2]), torch.int64, torch.Size([6]))
        >>> bool((td["action"][:, 0] < 2).all() and (td["action"][:, 1] < 3).all())
        True
    """

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = logits.log_softmax(-1)
        idx = self._draw(log_p.exp())  # one draw per dimension; padded options have probability 0
        return idx.squeeze(-1), log_p.gather(-1, idx).squeeze(-1).sum(-1)

    def _mode(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)

    def _log_prob_entropy(self, logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = logits.log_softmax(-1)
        log_prob = log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1).sum(-1)
        finite = log_p.masked_fill(~torch.isfinite(log_p), 0.0)  # padded options: p = 0, no entropy
        entropy = -(finite.exp() * finite).sum(-1).sum(-1)
        return log_prob, entropy
