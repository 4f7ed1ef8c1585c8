"""Stochastic actor-critic policies for on-policy algorithms (PPO): categorical and Gaussian.

A policy reads ``"observation"`` from a TensorDict and writes ``"action"`` and ``"log_prob"``: it
plugs into :class:`~engine_rl.collectors.GymCollector` as is. Values come from
:meth:`ActorCritic.value` (what :class:`handlers.advantage.GAEAdvantage` calls once per batch), and
the loss calls :meth:`ActorCritic.evaluate` (log-probabilities, entropies and values of given
actions, with gradients).

:meth:`ActorCritic.greedy` returns the deterministic policy for evaluation: a separate module
that shares the networks (and the observation normalizer) but nothing mutable — it has its own
flags and draws no random numbers, so evaluating never changes what training does next.

An optional observation :class:`~engine_rl.algos.normalization.Normalizer` sits inside the policy, so
collection, training and evaluation apply the same transform and checkpoints hold it.

MultiDiscrete actions: :mod:`engine_rl.algos.multi_discrete`; the policy for an env's spaces:
:func:`engine_rl.algos.policy_factory.make_actor_critic`.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.algos.networks import mlp  # noqa: F401  (the docstring examples use it)

__all__ = ["ActorCritic", "CategoricalActorCritic", "GaussianActor", "GaussianActorCritic", "orthogonal_init_"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def orthogonal_init_(module: nn.Module, *, gain: float = math.sqrt(2), last_gain: float | None = None) -> nn.Module:
    """Orthogonal weights and zero biases for every ``nn.Linear`` and ``nn.Conv2d`` in ``module`` (in place).

    The usual PPO initialisation: hidden layers with ``gain`` (sqrt 2), the last layer with
    ``last_gain`` (0.01 for a policy head, 1 for a value head). Returns ``module``.

    Examples:
        >>> net = orthogonal_init_(mlp(4, 2, (8,)), last_gain=0.01)
        >>> float(net[-1].weight.abs().max()) < 0.02, float(net[0].bias.abs().sum())
        (True, 0.0)
    """
    linears = [m for m in module.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    for i, layer in enumerate(linears):
        g = last_gain if (last_gain is not None and i == len(linears) - 1) else gain
        nn.init.orthogonal_(layer.weight, gain=g)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return module


class ActorCritic(nn.Module, metaclass=abc.ABCMeta):
    """Base of the actor-critic policies: acting, evaluating actions, values.

    Subclasses define the distribution through :meth:`_sample`, :meth:`_mode` and
    :meth:`_log_prob_entropy` over what ``actor(observation)`` returns.

    Args:
        actor: maps (normalized) observations to distribution parameters.
        critic: maps (normalized) observations to values ``[..., 1]`` (or ``[...]``); ``None``
            for an actor-only policy.
        obs_normalizer: applied to ``"observation"`` before both networks (``None``: identity).
        encoder: a trunk shared by the actor and the critic, between the normalizer and them
            (e.g. :class:`~engine_rl.algos.encoders.NatureCNN` for pixels; ``None``: none).
        deterministic: act with the distribution's mode (argmax / mean) instead of sampling.
        seed: seed of the policy's own CPU generator for sampling (``None``: drawn from torch's
            global generator). Saved in ``state_dict`` (extra state), so a resumed run samples
            the same actions.
    """

    in_keys = ["observation"]

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module | None = None,
        *,
        obs_normalizer: nn.Module | None = None,
        encoder: nn.Module | None = None,
        deterministic: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.obs_normalizer = obs_normalizer
        self.encoder = encoder
        self.deterministic = deterministic
        if seed is None:
            seed = int(torch.randint(2**62, ()).item())
        self._generator = torch.Generator().manual_seed(seed)

    @property
    def out_keys(self) -> list[str]:
        return ["action"] if self.deterministic else ["action", "log_prob"]

    # -- distribution (subclasses) --------------------------------------------------------
    @abc.abstractmethod
    def _sample(self, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Implemented by each distribution family."""

    @abc.abstractmethod
    def _mode(self, params: Any) -> torch.Tensor:
        """Implemented by each distribution family."""

    @abc.abstractmethod
    def _log_prob_entropy(self, params: Any, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Implemented by each distribution family."""

    # -- public ---------------------------------------------------------------------------
    def normalize(self, observation: torch.Tensor) -> torch.Tensor:
        """The observation after the normalizer."""
        return observation if self.obs_normalizer is None else self.obs_normalizer(observation)

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The observation as the actor and the critic see it: normalized, then encoded."""
        obs = self.normalize(observation)
        return obs if self.encoder is None else self.encoder(obs)

    def _critic(self, obs: torch.Tensor) -> torch.Tensor:
        if self.critic is None:
            raise RuntimeError(f"{type(self).__name__}: this policy has no critic")
        value = self.critic(obs)
        return value.squeeze(-1) if value.ndim == obs.ndim else value

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """Act: write ``"action"`` (and ``"log_prob"`` unless deterministic) for
        ``td["observation"]``; returns ``td``. The critic does not run."""
        action, log_prob = self.act(self.features(td["observation"]))
        td.set("action", action)
        if log_prob is not None:
            td.set("log_prob", log_prob)
        return td

    def act(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(action, log_prob)`` from what the actor reads (:meth:`features`); ``log_prob`` is
        ``None`` for a deterministic policy, which acts with the distribution's mode."""
        params = self.actor(features)
        if self.deterministic:
            return self._mode(params), None
        return self._sample(params)

    def evaluate(
        self, observation: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(log_prob, entropy, value)`` of ``action`` in ``observation`` (with gradients).

        ``value`` is ``None`` for an actor-only policy.
        """
        obs = self.features(observation)
        log_prob, entropy = self._log_prob_entropy(self.actor(obs), action)
        return log_prob, entropy, (self._critic(obs) if self.critic is not None else None)

    def value(self, observation: torch.Tensor) -> torch.Tensor:
        """``V(observation)``, one value per observation (shape: the batch dimensions)."""
        return self._critic(self.features(observation))

    def batch_values(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(V(s), V(s'))`` of a collected ``[num_envs, T]`` batch: its ``"observation"`` and
        ``("next", "observation")``, in one forward (what :class:`handlers.advantage.GAEAdvantage` calls)."""
        obs, next_obs = batch["observation"], batch["next", "observation"]
        n, t = batch.batch_size
        values = self.value(torch.cat([obs, next_obs])).reshape(2 * n, t)
        return values[:n], values[n:]

    def greedy(self) -> ActorCritic:
        """The deterministic policy: shares the networks and normalizer, not the flags or RNG."""
        return type(self)(
            self.actor, self.critic, obs_normalizer=self.obs_normalizer, encoder=self.encoder, deterministic=True, seed=0
        )

    def get_extra_state(self) -> dict[str, Any]:
        """The sampling generator's state (a uint8 tensor)."""
        return {"rng_state": self._generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["rng_state"])

    def _noise(self, fn: Any, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        noise = fn(shape, generator=self._generator)
        return noise if like.device.type == "cpu" else noise.to(like.device)

    def _draw(self, probs: torch.Tensor) -> torch.Tensor:
        """One category per row of ``probs [..., k]``: indices ``[..., 1]`` drawn by ``torch.multinomial``
        from the policy's generator (a CPU one: on a GPU the probabilities come to the CPU for the draw)."""
        flat = probs.reshape(-1, probs.shape[-1]).to(self._generator.device)
        idx = torch.multinomial(flat, 1, generator=self._generator)
        return idx.to(probs.device).reshape(*probs.shape[:-1], 1)

    def extra_repr(self) -> str:
        return f"deterministic={self.deterministic}"


class CategoricalActorCritic(ActorCritic):
    """Actor-critic over a ``Discrete(n)`` action space: ``actor(obs)`` returns ``n`` logits.

    Writes ``"action"`` (int64, shape ``[B]``) and ``"log_prob"`` (float, ``[B]``).

    Examples:
        >>> from tensordict import TensorDict
        >>> policy = CategoricalActorCritic(mlp(4, 2, (8,)), mlp(4, 1, (8,)), seed=0)
        >>> td = policy(TensorDict({"observation": torch.zeros(3, 4)}, [3]))
        >>> sorted(td.keys()), td["action"].dtype, td["log_prob"].shape
        (['action', 'log_prob', 'observation'], torch.int64, torch.Size([3]))
        >>> greedy = policy.greedy()
        >>> sorted(greedy(TensorDict({"observation": torch.zeros(3, 4)}, [3])).keys())
        ['action', 'observation']
    """

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = logits.log_softmax(-1)
        idx = self._draw(log_p.exp())
        return idx.squeeze(-1), log_p.gather(-1, idx).squeeze(-1)

    def _mode(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)

    def _log_prob_entropy(self, logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = logits.log_softmax(-1)
        log_prob = log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return log_prob, entropy


class GaussianActor(nn.Module):
    """Mean network plus a state-independent log standard deviation (a parameter per action dim).

    ``forward(obs)`` returns ``(mean [..., k], log_std [k])``.

    Examples:
        >>> actor = GaussianActor(mlp(3, 2, (8,)), action_dim=2, log_std_init=-1.0)
        >>> mean, log_std = actor(torch.zeros(5, 3))
        >>> mean.shape, log_std.tolist()
        (torch.Size([5, 2]), [-1.0, -1.0])
    """

    def __init__(self, mean_net: nn.Module, *, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.mean_net = mean_net
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean_net(obs), self.log_std


class GaussianActorCritic(ActorCritic):
    """Actor-critic over a 1-D ``Box`` action space with a diagonal Gaussian (no tanh squashing).

    ``actor(obs)`` returns ``(mean, log_std)`` (see :class:`GaussianActor`). Actions are not
    clipped here: clip them in the env (``gymnasium.wrappers.vector.ClipAction``), so the stored
    action and its ``log_prob`` match what was sampled.

    Examples:
        >>> from tensordict import TensorDict
        >>> policy = GaussianActorCritic(GaussianActor(mlp(3, 1, (8,)), action_dim=1), mlp(3, 1, (8,)), seed=0)
        >>> td = policy(TensorDict({"observation": torch.zeros(4, 3)}, [4]))
        >>> td["action"].shape, td["log_prob"].shape, policy.value(td["observation"]).shape
        (torch.Size([4, 1]), torch.Size([4]), torch.Size([4]))
    """

    def _sample(self, params: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = params
        noise = self._noise(torch.randn, mean.shape, mean)
        action = mean + log_std.exp() * noise
        # log N(a; mean, std) with (a - mean) / std = noise
        log_prob = (-0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        return action, log_prob

    def _mode(self, params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return params[0]

    def _log_prob_entropy(
        self, params: tuple[torch.Tensor, torch.Tensor], action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = params
        z = (action - mean) * (-log_std).exp()
        log_prob = (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1).expand(log_prob.shape)
        return log_prob, entropy
