"""Continuous-action policies: a tanh-squashed Gaussian actor and its deterministic (mean) twin for
evaluation (the random warm-up that explores before them: :mod:`engine_rl.algos.exploration`).

Action spaces. The actor works in the unit box ``[-1, 1]^d`` and writes ``"action"`` scaled to
the env's bounds, ``action = bias + scale * tanh(u)`` with ``scale = (high - low) / 2`` and
``bias = (high + low) / 2``; :meth:`TanhGaussianActor.unscale` maps a stored action back. Its
log-probabilities are densities of the squashed action in ``[-1, 1]^d`` (the constant Jacobian
of the affine rescaling is left out, as in Stable-Baselines3), so a target entropy of
``-action_dim`` means the same on every env.

Squashing correction. With ``u ~ N(mean, std)`` and ``a = tanh(u)``,
``log p(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2)``, and
``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2 u))`` is used because it stays finite
where ``tanh(u)`` rounds to +-1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from torch import nn

from engine_rl.algos.networks import mlp

__all__ = ["DeterministicActor", "TanhGaussianActor", "box_bounds"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def box_bounds(action_space: Any, *, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` float32 tensors of a bounded ``gymnasium.spaces.Box`` action space.

    Raises a ``ValueError`` naming ``owner`` for a discrete space or unbounded dimensions.

    Examples:
        >>> box_bounds(gym.spaces.Box(-2.0, 2.0, (1,)), owner="demo")
        (tensor([-2.]), tensor([2.]))
        >>> box_bounds(gym.spaces.Discrete(2), owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo needs a continuous (Box) action space; got Discrete(2) (use a discrete-action algorithm such as DQN)
    """
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"{owner} needs a continuous (Box) action space; got {action_space} "
            "(use a discrete-action algorithm such as DQN)"
        )
    low = np.asarray(action_space.low, dtype=np.float64)
    high = np.asarray(action_space.high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"{owner} needs finite action bounds; got low={low.tolist()}, high={high.tolist()}")
    if (high <= low).any():
        raise ValueError(
            f"{owner} needs high > low in every action dimension; got low={low.tolist()}, high={high.tolist()}"
        )
    return torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)


class TanhGaussianActor(nn.Module):
    """SAC's stochastic policy: a Gaussian over ``u`` squashed by ``tanh`` and scaled to the bounds.

    ``net`` maps observations ``[..., obs_dim]`` to ``[..., 2 * action_dim]``: the mean and the
    log standard deviation of ``u`` (the latter clamped to ``[log_std_min, log_std_max]``).
    Called on a TensorDict it samples and writes ``"action"`` (env scale; and ``"log_prob"``
    with ``return_log_prob=True``). :meth:`sample` is what a loss calls: a reparameterized
    draw in ``[-1, 1]`` and its log-probability. :meth:`deterministic` returns the evaluation
    policy (the mean action). Sampling uses torch's global generator.

    Args:
        net: the network producing ``[mean, log_std]`` (see :meth:`build` for the usual MLP).
        low: lower action bounds, shape ``[action_dim]``.
        high: upper action bounds, shape ``[action_dim]``.
        log_std_min: lower clamp of the log std (Stable-Baselines3: -20).
        log_std_max: upper clamp of the log std (Stable-Baselines3: 2).
        return_log_prob: also write ``"log_prob"`` when called on a TensorDict.

    Examples:
        >>> from tensordict import TensorDict
        >>> _ = torch.manual_seed(0)
        >>> actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
        >>> td = actor(TensorDict({"observation": torch.randn(5, 3)}, [5]))
        >>> td["action"].shape, bool(td["action"].abs().max() <= 2.0)
        (torch.Size([5, 1]), True)
        >>> unit, log_prob = actor.sample(torch.randn(5, 3))
        >>> unit.shape, log_prob.shape
        (torch.Size([5, 1]), torch.Size([5]))
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(
        self,
        net: nn.Module,
        *,
        low: torch.Tensor | Sequence[float],
        high: torch.Tensor | Sequence[float],
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
        return_log_prob: bool = False,
    ) -> None:
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        high_t = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        if low_t.shape != high_t.shape or low_t.numel() == 0:
            raise ValueError(
                f"TanhGaussianActor: low and high must have the same non-empty shape, got "
                f"{tuple(low_t.shape)} and {tuple(high_t.shape)}"
            )
        if not bool((high_t > low_t).all()) or not bool(torch.isfinite(low_t).all() and torch.isfinite(high_t).all()):
            raise ValueError(
                "TanhGaussianActor: need finite bounds with high > low, got "
                f"low={low_t.tolist()}, high={high_t.tolist()}"
            )
        if not log_std_min < log_std_max:
            raise ValueError(
                f"TanhGaussianActor: need log_std_min < log_std_max, got {log_std_min} and {log_std_max}"
            )
        self.net = net
        self.action_dim = int(low_t.numel())
        self.register_buffer("action_scale", (high_t - low_t) / 2)
        self.register_buffer("action_bias", (high_t + low_t) / 2)
        self.log_std_min = float(log_std_min)
        self.log_std_max = float(log_std_max)
        self.return_log_prob = return_log_prob
        if return_log_prob:
            self.out_keys = ["action", "log_prob"]

    @classmethod
    def build(
        cls,
        obs_dim: int,
        action_space: Any,
        *,
        hidden: Sequence[int] = (256, 256),
        activation: type[nn.Module] = nn.ReLU,
        encoder: nn.Module | None = None,
        **kwargs: Any,
    ) -> TanhGaussianActor:
        """An MLP actor ``obs_dim -> hidden... -> 2 * action_dim`` for a Box ``action_space``
        (a ``ValueError`` for any other space), on ``encoder``'s ``obs_dim`` features if one is
        given (:func:`engine_rl.algos.encoders.make_encoder`); ``kwargs`` go to the constructor."""
        low, high = box_bounds(action_space, owner="TanhGaussianActor")
        net = mlp(obs_dim, 2 * low.numel(), hidden, activation=activation)
        return cls(net if encoder is None else nn.Sequential(encoder, net), low=low, high=high, **kwargs)

    # -- maths ----------------------------------------------------------------------------
    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the pre-squash Gaussian, each ``[..., action_dim]``."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized draw ``a = tanh(mean + std * eps)`` in ``[-1, 1]`` and ``log p(a)``.

        Args:
            obs: observations ``[..., obs_dim]``; ``eps`` comes from torch's global generator.

        Returns:
            ``(a [..., action_dim], log_prob [...])``; gradients flow to the actor through both.
        """
        mean, log_std = self.distribution(obs)
        eps = torch.randn_like(mean)
        u = mean + log_std.exp() * eps
        log_gauss = -0.5 * eps.square() - log_std - _HALF_LOG_2PI  # log N(u; mean, std), per dimension
        log_dtanh = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2), stable
        return torch.tanh(u), (log_gauss - log_dtanh).sum(-1)

    def log_prob(self, obs: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """``log p(a | obs)`` of squashed actions ``a`` in ``(-1, 1)`` (clamped just inside)."""
        mean, log_std = self.distribution(obs)
        a = unit_action.clamp(-1.0 + 1e-6, 1.0 - 1e-6)
        u = torch.atanh(a)
        z = (u - mean) * torch.exp(-log_std)
        return (-0.5 * z.square() - log_std - _HALF_LOG_2PI - torch.log1p(-a.square())).sum(-1)

    def mean_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean)`` in ``[-1, 1]``."""
        return torch.tanh(self.distribution(obs)[0])

    def scale(self, unit_action: torch.Tensor) -> torch.Tensor:
        """``[-1, 1]`` -> env bounds."""
        return torch.addcmul(self.action_bias, self.action_scale, unit_action)

    def unscale(self, action: torch.Tensor) -> torch.Tensor:
        """Env bounds -> ``[-1, 1]`` (inverse of :meth:`scale`)."""
        return (action - self.action_bias) / self.action_scale

    # -- policy ---------------------------------------------------------------------------
    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """Sample an action for ``td["observation"]``; write ``"action"`` (and ``"log_prob"``)."""
        obs = td["observation"]
        if self.return_log_prob:
            unit, log_prob = self.sample(obs)
            td.set("log_prob", log_prob)
        else:  # acting only: skip the log-probability
            mean, log_std = self.distribution(obs)
            unit = torch.tanh(torch.addcmul(mean, log_std.exp(), torch.randn_like(mean)))
        td.set("action", self.scale(unit))
        return td

    def deterministic(self) -> DeterministicActor:
        """The evaluation policy: a separate module acting with the mean action (same weights)."""
        return DeterministicActor(self)

    def extra_repr(self) -> str:
        return (
            f"action_dim={self.action_dim}, log_std=[{self.log_std_min}, {self.log_std_max}], "
            f"return_log_prob={self.return_log_prob}"
        )


class DeterministicActor(nn.Module):
    """Evaluation policy of a :class:`TanhGaussianActor`: ``action = scale(tanh(mean))``.

    It holds the actor (so it always acts with the current weights and its ``state_dict`` is the
    actor's, under ``actor.``) but no flag of it: switching to the mean action never changes how
    the training policy acts.

    Examples:
        >>> from tensordict import TensorDict
        >>> actor = TanhGaussianActor.build(3, gym.spaces.Box(-1.0, 1.0, (2,)), hidden=(8,))
        >>> policy = actor.deterministic()
        >>> obs = TensorDict({"observation": torch.ones(4, 3)}, [4])
        >>> torch.equal(policy(obs.clone())["action"], policy(obs.clone())["action"])
        True
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, actor: TanhGaussianActor) -> None:
        super().__init__()
        if not isinstance(actor, TanhGaussianActor):
            raise TypeError(f"DeterministicActor: actor must be a TanhGaussianActor, got {type(actor).__name__}")
        self.actor = actor

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.actor.scale(self.actor.mean_action(td["observation"])))
        return td
