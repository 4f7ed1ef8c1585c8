"""DQN: a greedy Q-value policy and the (double) DQN loss.

The loss reads a replay sample and writes ``td_error`` into it, so a prioritized buffer's
:class:`handlers.PriorityUpdater` picks it up with no coupling to the loss. The target network
is a plain module updated by :class:`handlers.TargetNetUpdater`.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.checks import fraction
from engine_rl.keys import refuse_recurrent, require_keys

__all__ = ["QValuePolicy", "DQNLoss", "TRANSITION_KEYS", "read_transition"]

#: The keys a DQN-family loss reads from a replay sample.
TRANSITION_KEYS = ["observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated")]


def read_transition(
    sample: TensorDictBase, *, gamma: float, consumer: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(obs, action, next_obs, reward, discount)`` of a replay sample of discrete actions:
    ``action`` as ``long`` and ``reward`` as ``float``, both flat ``[B]``; ``discount``, the factor
    of the bootstrap value, flat ``[B]``: the sample's ``("next", "discount")`` where it has one
    (n-step rows: ``gamma^k``, 0 after a terminal), else ``gamma * (1 - terminated)``. A missing
    key raises a ``KeyError`` naming it, the sample's keys and ``consumer``."""
    try:
        obs = sample["observation"]
        action = sample["action"]
        next_obs = sample["next", "observation"]
        reward = sample["next", "reward"]
        terminated = sample["next", "terminated"]
    except KeyError:
        require_keys(sample, TRANSITION_KEYS, consumer=consumer)  # raises, naming the missing keys
        raise
    discount = sample.get(("next", "discount"), None)  # n-step rows: gamma^k, 0 after a terminal
    if discount is None:
        discount = gamma * (terminated.reshape(-1) == 0).float()  # bool or 0/1 flags
    return obs, action.long().reshape(-1), next_obs, reward.float().reshape(-1), discount.reshape(-1)


class QValuePolicy(nn.Module):
    """Greedy policy over a Q network: writes ``action = argmax_a Q(observation, a)``.

    Args:
        qnet: maps observations ``[..., obs_dim]`` to Q values ``[..., num_actions]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> policy = QValuePolicy(mlp(4, 2, (8,)))
        >>> td = policy(TensorDict({"observation": torch.zeros(3, 4)}, [3]))
        >>> td["action"].shape, td["action"].dtype
        (torch.Size([3]), torch.int64)
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, qnet: nn.Module) -> None:
        super().__init__()
        self.qnet = qnet

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.qnet(td["observation"]).argmax(dim=-1))
        return td


class DQNLoss(nn.Module):
    """(Double) DQN loss with a target network; writes ``td_error`` into the sample.

    ``loss = mean(w * huber(Q(s, a) - y))`` with the TD target
    ``y = r + gamma * (1 - terminated) * Q_target(s', a*)``, where ``a* = argmax_a Q(s', a)``
    with ``double=True`` (van Hasselt et al., 2016) and ``argmax_a Q_target(s', a)`` otherwise
    (Mnih et al., 2015). Only ``terminated`` stops bootstrapping: a time-limit truncation still
    bootstraps from the true final observation that the collector stores in
    ``("next", "observation")``. Importance weights ``w`` (``"weight"``, from prioritized
    replay) scale each item's loss; without them ``w = 1``. An n-step sample
    (:class:`handlers.NStepTransitions`) carries the discount of its bootstrap value in
    ``("next", "discount")`` (``gamma^k``, 0 after a terminal): then ``y = r + discount *
    Q_target(s', a*)`` with ``r`` the window's discounted reward sum.

    Args:
        qnet: the online Q network, observations ``[B, ...]`` to Q values ``[B, num_actions]``.
        target_qnet: the target network (default: a frozen deep copy of ``qnet``).
        gamma: discount factor in [0, 1].
        double: double DQN targets.
        loss: ``"huber"`` (smooth L1, as in the DQN paper) or ``"mse"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> loss_fn = DQNLoss(mlp(4, 2, (8,)), gamma=0.9)
        >>> sample = TensorDict({
        ...     "observation": torch.zeros(5, 4), "action": torch.zeros(5, dtype=torch.long),
        ...     ("next", "observation"): torch.zeros(5, 4), ("next", "reward"): torch.ones(5),
        ...     ("next", "terminated"): torch.zeros(5, dtype=torch.bool)}, [5])
        >>> out = loss_fn(sample)
        >>> sorted(out.keys()), sample["td_error"].shape
        (['loss'], torch.Size([5]))
    """

    in_keys = list(TRANSITION_KEYS)

    def __init__(
        self,
        qnet: nn.Module,
        target_qnet: nn.Module | None = None,
        *,
        gamma: float = 0.99,
        double: bool = True,
        loss: str = "huber",
    ) -> None:
        super().__init__()
        refuse_recurrent(qnet, owner="DQNLoss", use="its Q network sees one observation (recurrent policies are PPO's: PPOLoss)")
        fraction(gamma, name="gamma", owner="DQNLoss")
        if loss not in ("huber", "mse"):
            raise ValueError(f"DQNLoss: loss must be 'huber' or 'mse', got {loss!r}")
        self.qnet = qnet
        if target_qnet is None:
            target_qnet = copy.deepcopy(qnet)
        self.target_qnet = target_qnet.requires_grad_(False)
        self.gamma = float(gamma)
        self.double = double
        self.loss_kind = loss

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        obs, action, next_obs, reward, discount = read_transition(sample, gamma=self.gamma, consumer="DQNLoss")
        action = action.reshape(-1, 1)

        q_taken = self.qnet(obs).gather(-1, action).squeeze(-1)
        with torch.no_grad():
            q_next_target = self.target_qnet(next_obs)
            if self.double:  # the online network picks a*, the target network values it
                next_action = self.qnet(next_obs).argmax(dim=-1, keepdim=True)
            else:
                next_action = q_next_target.argmax(dim=-1, keepdim=True)
            next_value = q_next_target.gather(-1, next_action).squeeze(-1)
            # TD target: y = r + gamma * (1 - terminated) * Q_target(s', a*)   (discount = gamma * (1 - terminated))
            td_target = reward + discount * next_value

        td_error = q_taken - td_target
        sample.set("td_error", td_error.detach())
        if self.loss_kind == "huber":
            per_item = F.smooth_l1_loss(q_taken, td_target, reduction="none")
        else:
            per_item = td_error.pow(2)
        weight = sample.get("weight", None)
        if weight is not None:
            per_item = per_item * weight.reshape(per_item.shape)
        return TensorDict({"loss": per_item.mean()}, batch_size=[])
