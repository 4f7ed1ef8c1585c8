"""The parts SAC's and TD3's losses share: reading a replay transition and regressing the critics.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from engine_rl.algos.sac import QEnsemble
    >>> sample = TensorDict({
    ...     "observation": torch.zeros(4, 3), "action": torch.zeros(4, 1),
    ...     ("next", "observation"): torch.zeros(4, 3), ("next", "reward"): torch.ones(4),
    ...     ("next", "terminated"): torch.tensor([False, False, True, True])}, [4])
    >>> obs, action, next_obs, reward, discount = read_transition(sample, lambda a: a, gamma=0.5, consumer="demo")
    >>> reward.shape, discount.tolist()
    (torch.Size([4]), [0.5, 0.5, 0.0, 0.0])
    >>> sample["next", "discount"] = torch.tensor([0.125, 0.0, 0.25, 0.0])  # n-step rows bring their own
    >>> read_transition(sample, lambda a: a, gamma=0.5, consumer="demo")[4].tolist()
    [0.125, 0.0, 0.25, 0.0]
    >>> loss = q_regression(QEnsemble(3, 1, (8,)), obs, action, torch.zeros(4), sample)
    >>> loss.shape, sample["td_error"].shape
    (torch.Size([]), torch.Size([4]))
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.keys import require_keys

__all__ = ["TRANSITION_KEYS", "q_regression", "read_transition"]

TRANSITION_KEYS = ["observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated")]
"""The replay sample entries :func:`read_transition` reads."""


def read_transition(
    sample: TensorDictBase, unscale: Callable[[torch.Tensor], torch.Tensor], *, gamma: float, consumer: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(obs, action, next_obs, reward, discount)`` of a replay sample.

    ``action`` is ``unscale(sample["action"])`` (env bounds to the critics' ``[-1, 1]``);
    ``reward`` and ``discount``, the factor of the bootstrap value, are shaped like the batch:
    ``discount`` is the sample's ``("next", "discount")`` where it has one (n-step rows,
    :class:`handlers.NStepTransitions`: ``gamma^k``, 0 after a terminal), else
    ``gamma * (1 - terminated)`` in the reward's dtype. A missing key raises a
    ``KeyError`` naming it, the sample's keys and ``consumer``.
    """
    try:
        obs = sample["observation"]
        action = unscale(sample["action"])
        next_obs = sample["next", "observation"]
        batch = action.shape[:-1]  # (an observation may be an image or a Dict's TensorDict)
        reward = sample["next", "reward"].reshape(batch)
        discount = sample.get(("next", "discount"), None)
        if discount is None:
            discount = gamma * (sample["next", "terminated"].reshape(batch) == 0).to(reward.dtype)
    except KeyError:
        require_keys(sample, TRANSITION_KEYS, consumer=consumer)  # raises, naming the missing keys
        raise
    return obs, action, next_obs, reward, discount.reshape(batch)


def q_regression(
    critic: nn.Module, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor, sample: TensorDictBase
) -> torch.Tensor:
    """``sum_i mean(w * (Q_i(s, a) - y)^2)`` over the critics, ``w`` the sample's importance
    ``weight`` (1 without one); writes ``td_error = max_i |Q_i(s, a) - y|`` into ``sample``."""
    error = critic(obs, action) - target  # [num_q, batch]
    sq = error.square()
    weight = sample.get("weight", None)
    if weight is not None:
        sq = sq * weight.reshape(target.shape)
    sample.set("td_error", error.detach().abs().amax(0))
    return sq.flatten(1).mean(1).sum()
