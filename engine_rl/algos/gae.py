"""Generalized advantage estimation, GAE(lambda) (Schulman et al., 2016).

Inputs are ``[num_envs, T]`` tensors whose rows are contiguous in time (as in a
:class:`~engine_rl.collectors.GymCollector` batch). Vectorized over envs; a Python loop over ``T``
only. Two flags per step, because they mean different things:

- ``terminated``: the episode really ended; the state after it is worth 0 (no bootstrap).
- ``done`` (= terminated or truncated): the *next row* starts a new episode, so the recursion
  must not carry advantages across it. On a truncation (time limit) the step still bootstraps
  from ``next_value``, the value of the true final observation.

Per step::

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    R_t     = A_t + V(s_t)          # the value target
"""

from __future__ import annotations

import torch

__all__ = ["gae"]


def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    *,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets of ``[num_envs, T]`` trajectories (time along dim 1).

    Args:
        reward: ``r_t``, float ``[N, T]``.
        value: ``V(s_t)``, float ``[N, T]``.
        next_value: ``V(s'_t)``, the value of the observation *after* step ``t`` (for a
            truncated step, of the true final observation), float ``[N, T]``.
        terminated: bool ``[N, T]``: no bootstrap from ``s'_t``.
        done: bool ``[N, T]``: terminated or truncated; the recursion restarts after it.
        gamma: discount factor in [0, 1].
        lmbda: GAE lambda in [0, 1] (0: one-step TD error; 1: Monte-Carlo return minus V).

    Returns:
        ``(advantage, value_target)``, both float ``[N, T]``, without gradient.

    Examples:
        >>> r = torch.tensor([[1.0, 1.0, 1.0]])
        >>> v = torch.zeros(1, 3)
        >>> term = torch.tensor([[False, False, True]])
        >>> adv, target = gae(r, v, v, term, term, gamma=0.5, lmbda=1.0)
        >>> adv
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gae: gamma must be in [0, 1], got {gamma!r}")
    if not 0.0 <= lmbda <= 1.0:
        raise ValueError(f"gae: lmbda must be in [0, 1], got {lmbda!r}")
    shape = reward.shape
    if reward.ndim != 2:
        raise ValueError(f"gae: reward must have shape [num_envs, T], got {tuple(shape)}")
    for name, t in (("value", value), ("next_value", next_value), ("terminated", terminated), ("done", done)):
        if t.shape != shape:
            raise ValueError(f"gae: {name} must have the reward's shape {tuple(shape)}, got {tuple(t.shape)}")
    with torch.no_grad():
        reward = reward.float()
        value = value.float()
        not_terminated = (~terminated.bool()).float()
        # one-step TD errors, all at once
        delta = reward + gamma * next_value.float() * not_terminated - value
        # the recursion's decay, zero where the next row belongs to another episode
        decay = (gamma * lmbda) * (~done.bool()).float()
        # time-major copies make each step's row contiguous
        delta_t, decay_t = delta.t().contiguous(), decay.t().contiguous()
        adv_t = torch.empty_like(delta_t)
        last = torch.zeros_like(delta_t[0])
        for t in range(shape[1] - 1, -1, -1):
            last = torch.addcmul(delta_t[t], decay_t[t], last, out=adv_t[t])
        advantage = adv_t.t().contiguous()
        return advantage, advantage + value
