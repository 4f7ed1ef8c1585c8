"""TD3 (Fujimoto et al., 2018): a deterministic actor, twin critics, delayed actor updates.

Built from the SAC parts: :class:`~engine_rl.algos.sac.QEnsemble` holds the twin critics and
:class:`handlers.TargetNetUpdater` Polyak-averages the target networks. Two TD3 ingredients
need no engine support:

- **Delayed actor updates.** :class:`TD3Loss` returns ``loss_actor`` only on every
  ``policy_delay``-th call. On the other steps the actor gets no gradient, and Adam leaves
  parameters without a gradient untouched (their step count included), so the actor's optimizer
  simply skips those steps. Attach the target updaters with ``every=policy_delay``: they then
  run on the same steps as the actor update, as in the paper and Stable-Baselines3.
- **Target policy smoothing.** The critics' target uses the target actor's action plus clipped
  Gaussian noise: ``a' = clip(mu'(s') + clip(N(0, target_noise), -noise_clip, noise_clip), -1, 1)``,
  ``y = r + gamma * (1 - terminated) * min_i Q'_i(s', a')`` (n-step rows, :class:`handlers.NStepTransitions`,
  bring their own ``discount = gamma^k``, 0 after a terminal, in place of ``gamma * (1 - terminated)``).

The critics' loss is ``sum_i mean((Q_i(s, a) - y)^2)`` and the actor's ``-mean(Q_1(s, mu(s)))``
with the critics' parameters detached (only the first critic, as in the paper). Actions are
handled in the unit box ``[-1, 1]`` and scaled to the env's bounds by :class:`TanhActor`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.algos.actors import box_bounds
from engine_rl.algos.critic_loss import TRANSITION_KEYS, q_regression, read_transition
from engine_rl.algos.networks import mlp
from engine_rl.checks import nonnegative_number, positive_int

__all__ = ["TanhActor", "TD3Loss"]


class TanhActor(nn.Module):
    """A deterministic policy ``action = bias + scale * tanh(net(observation))``.

    Called on a TensorDict it writes ``"action"`` in the env's bounds; :meth:`unit_action` gives
    the action in ``[-1, 1]`` (what the critics see); :meth:`scale` and :meth:`unscale` convert.
    Exploration noise is a separate wrapper (:class:`~engine_rl.algos.exploration.GaussianNoise`),
    so this module is also the evaluation policy.

    Args:
        net: maps observations ``[..., obs_dim]`` to ``[..., action_dim]`` (pre-tanh).
        low: lower action bounds ``[action_dim]``.
        high: upper action bounds ``[action_dim]``.

    Examples:
        >>> import gymnasium as gym
        >>> actor = TanhActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))
        >>> td = actor(TensorDict({"observation": torch.zeros(4, 3)}, [4]))
        >>> td["action"].shape, bool(td["action"].abs().max() <= 2.0)
        (torch.Size([4, 1]), True)
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, net: nn.Module, *, low: torch.Tensor | Sequence[float], high: torch.Tensor | Sequence[float]) -> None:
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        high_t = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        if low_t.shape != high_t.shape or low_t.numel() == 0 or not bool((high_t > low_t).all()):
            raise ValueError(
                f"TanhActor: need low and high of the same non-empty shape with high > low, got "
                f"low={low_t.tolist()}, high={high_t.tolist()}"
            )
        self.net = net
        self.action_dim = int(low_t.numel())
        self.register_buffer("action_scale", (high_t - low_t) / 2)
        self.register_buffer("action_bias", (high_t + low_t) / 2)

    @classmethod
    def build(
        cls, obs_dim: int, action_space: Any, *, hidden: Sequence[int] = (400, 300),
        activation: type[nn.Module] = nn.ReLU, encoder: nn.Module | None = None,
    ) -> TanhActor:
        """An MLP actor ``obs_dim -> hidden... -> action_dim`` for a Box ``action_space`` (a
        ``ValueError`` naming the space for any other), on ``encoder``'s ``obs_dim`` features if
        one is given (:func:`engine_rl.algos.encoders.make_encoder`)."""
        low, high = box_bounds(action_space, owner="TanhActor")
        net = mlp(obs_dim, low.numel(), hidden, activation=activation)
        return cls(net if encoder is None else nn.Sequential(encoder, net), low=low, high=high)

    def unit_action(self, obs: torch.Tensor) -> torch.Tensor:
        """``tanh(net(obs))`` in ``[-1, 1]``."""
        return torch.tanh(self.net(obs))

    def scale(self, unit_action: torch.Tensor) -> torch.Tensor:
        """``[-1, 1]`` -> env bounds."""
        return torch.addcmul(self.action_bias, self.action_scale, unit_action)

    def unscale(self, action: torch.Tensor) -> torch.Tensor:
        """Env bounds -> ``[-1, 1]`` (inverse of :meth:`scale`)."""
        return (action - self.action_bias) / self.action_scale

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.scale(self.unit_action(td["observation"])))
        return td


class TD3Loss(nn.Module):
    """The TD3 losses: ``loss_qvalue`` every call, ``loss_actor`` every ``policy_delay``-th call.

    Reads a replay sample (``observation``, ``action`` in env bounds, ``("next", "observation")``,
    ``("next", "reward")``, ``("next", "terminated")``, optional importance ``weight``) and
    writes ``td_error`` (``max_i |Q_i(s, a) - y|``) into it. The call count (:attr:`updates`)
    is a buffer, so it is saved in the ``state_dict`` and a resumed run delays on the same steps.
    See the module docstring for the formulas.

    Args:
        actor: the :class:`TanhActor`.
        critic: a :class:`~engine_rl.algos.sac.QEnsemble` (``critic(obs, unit_action,
            detach_params=..., first=...) -> [num_q, batch]``).
        target_actor: default: a frozen deep copy of ``actor``.
        target_critic: default: a frozen deep copy of ``critic``.
        gamma: discount factor in [0, 1].
        policy_delay: critic updates per actor update (>= 1).
        target_noise: std of the target policy smoothing noise (unit-box units, >= 0).
        noise_clip: the smoothing noise is clipped to ``[-noise_clip, noise_clip]`` (>= 0).

    Examples:
        >>> import gymnasium as gym
        >>> from engine_rl.algos.sac import QEnsemble
        >>> _ = torch.manual_seed(0)
        >>> actor = TanhActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
        >>> loss_fn = TD3Loss(actor, QEnsemble(3, 1, (16,)), gamma=0.98)
        >>> sample = TensorDict({
        ...     "observation": torch.randn(8, 3), "action": torch.rand(8, 1) * 4 - 2,
        ...     ("next", "observation"): torch.randn(8, 3), ("next", "reward"): torch.randn(8),
        ...     ("next", "terminated"): torch.zeros(8, dtype=torch.bool)}, [8])
        >>> [sorted(loss_fn(sample).keys()) for _ in range(2)]  # the actor's loss every 2nd call
        [['loss_qvalue'], ['loss_actor', 'loss_qvalue']]
    """

    in_keys = list(TRANSITION_KEYS)

    def __init__(
        self,
        actor: TanhActor,
        critic: nn.Module,
        *,
        target_actor: TanhActor | None = None,
        target_critic: nn.Module | None = None,
        gamma: float = 0.99,
        policy_delay: int = 2,
        target_noise: float = 0.2,
        noise_clip: float = 0.5,
    ) -> None:
        super().__init__()
        if not isinstance(actor, TanhActor):
            raise TypeError(f"TD3Loss: actor must be a TanhActor, got {type(actor).__name__}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"TD3Loss: gamma must be in [0, 1], got {gamma}")
        policy_delay = positive_int(policy_delay, name="policy_delay", owner="TD3Loss")
        for name, value in (("target_noise", target_noise), ("noise_clip", noise_clip)):
            nonnegative_number(value, name=name, owner="TD3Loss")
        self.actor = actor
        self.critic = critic
        self.target_actor = (copy.deepcopy(actor) if target_actor is None else target_actor).requires_grad_(False)
        self.target_critic = (copy.deepcopy(critic) if target_critic is None else target_critic).requires_grad_(False)
        self.gamma = float(gamma)
        self.policy_delay = policy_delay
        self.target_noise = float(target_noise)
        self.noise_clip = float(noise_clip)
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        obs, action, next_obs, reward, discount = read_transition(
            sample, self.actor.unscale, gamma=self.gamma, consumer="TD3Loss")
        self.updates += 1

        with torch.no_grad():
            # target policy smoothing: a' = clip(mu'(s') + clip(N(0, sigma), -c, c), -1, 1)
            next_action = self.target_actor.unit_action(next_obs)
            noise = (torch.randn_like(next_action) * self.target_noise).clamp(-self.noise_clip, self.noise_clip)
            next_q = self.target_critic(next_obs, (next_action + noise).clamp(-1.0, 1.0)).amin(0)
            # TD target: y = r + gamma * (1 - terminated) * min_i Q'_i(s', a')   (discount = gamma * (1 - terminated))
            target = reward + discount * next_q
        out = {"loss_qvalue": q_regression(self.critic, obs, action, target, sample)}

        if int(self.updates) % self.policy_delay == 0:  # delayed policy update
            # the actor ascends Q_1(s, mu(s)); the critics' parameters are held fixed
            q_pi = self.critic(obs, self.actor.unit_action(obs), detach_params=True, first=1)[0]
            out["loss_actor"] = -q_pi.mean()
        return TensorDict(out, batch_size=[])

    def extra_repr(self) -> str:
        return (
            f"gamma={self.gamma}, policy_delay={self.policy_delay}, target_noise={self.target_noise}, "
            f"noise_clip={self.noise_clip}"
        )
