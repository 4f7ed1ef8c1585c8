"""SAC (Haarnoja et al., 2018): twin Q critics, a tanh-Gaussian actor, automatic temperature.

:class:`QEnsemble` holds the critics as one stacked network (one batched matmul per layer for
all of them). :class:`SACLoss` returns three losses that the trainer sums and back-propagates
once; each is detached so that it trains only its own parameters, and the recipe gives each
parameter set its own optimizer:

- ``loss_qvalue`` trains the critics: ``0.5 * sum_i mean((Q_i(s, a) - y)^2)`` with the soft
  target ``y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``,
  ``a' ~ pi(.|s')`` and ``Q'`` the target critics (computed without gradients);
- ``loss_actor`` trains the actor: ``mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))`` with
  ``a~ ~ pi(.|s)`` reparameterized and the critics' parameters detached;
- ``loss_alpha`` trains ``log_alpha``: ``-mean(log_alpha * (log pi(a~|s) + target_entropy))``,
  so ``alpha`` grows while the policy's entropy is below ``target_entropy`` (default
  ``-action_dim``) and shrinks above it.

All three use the same ``alpha = exp(log_alpha)`` (detached), read before the step, as
Stable-Baselines3 does. Only ``terminated`` stops bootstrapping: a time-limit truncation
bootstraps from the true final observation. n-step rows (:class:`handlers.NStepTransitions`)
bring their own ``discount = gamma^k`` (0 after a terminal) in place of ``gamma * (1 - terminated)``. The target critics are a plain module that
:class:`handlers.TargetNetUpdater` Polyak-averages on ``RLEvents.OPTIM_STEP_DONE``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.critic_loss import TRANSITION_KEYS, q_regression, read_transition
from engine_rl.checks import positive_int

__all__ = ["QEnsemble", "SACLoss"]


class QEnsemble(nn.Module):
    """``num_q`` independent MLP critics ``Q_i(observation, action)``, evaluated together.

    Layer ``l`` of all critics is one weight ``[num_q, in, out]`` and one bias ``[num_q, 1, out]``,
    applied with a single batched matmul; each critic is initialized like ``nn.Linear`` (uniform
    in ``+-1/sqrt(in)``), independently of the others. The output layer (one unit per critic) is
    the product written out, ``sum(h * w) + b``.

    Args:
        obs_dim: observation size (with an ``encoder``: its ``features``).
        action_dim: action size.
        hidden: hidden layer widths of each critic.
        num_q: number of critics (2 for SAC/TD3's clipped double Q).
        activation: elementwise activation between layers.
        encoder: a module from observations (images, a Dict's TensorDict, ...) to ``[*batch, obs_dim]``
            features (:func:`engine_rl.algos.encoders.make_encoder`), shared by the critics and
            trained by their loss; ``None``: observations are ``[*batch, obs_dim]`` vectors.

    Examples:
        >>> q = QEnsemble(3, 1, (16, 16))
        >>> q(torch.zeros(5, 3), torch.zeros(5, 1)).shape
        torch.Size([2, 5])
        >>> [tuple(w.shape) for w in q.weights], tuple(q.biases[0].shape)
        ([(2, 4, 16), (2, 16, 16), (2, 16, 1)], (2, 1, 16))
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        *,
        num_q: int = 2,
        activation: Callable[[torch.Tensor], torch.Tensor] = F.relu,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden, 1]
        if obs_dim <= 0 or action_dim <= 0 or any(h <= 0 for h in hidden):
            raise ValueError(
                f"QEnsemble: sizes must be positive, got obs_dim={obs_dim}, action_dim={action_dim}, "
                f"hidden={tuple(hidden)}"
            )
        self.num_q = num_q = positive_int(num_q, name="num_q", owner="QEnsemble")
        self.activation = activation
        self.encoder = encoder
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_q, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_q, 1, fan_out).uniform_(-bound, bound)))

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, *, detach_params: bool = False, first: int | None = None
    ) -> torch.Tensor:
        """Q values ``[num_q, *batch]`` of ``obs [*batch, obs_dim]`` (or what the encoder reads) and
        ``action [*batch, action_dim]``.

        With ``detach_params=True`` the critics' parameters (the encoder's too) are treated as
        constants: gradients flow to the inputs (e.g. the actor's action) but never into the
        critics. ``first=k`` evaluates only the first ``k`` critics (``[k, *batch]``; TD3's actor
        loss uses ``Q_1``).
        """
        num_q = self.num_q if first is None else first
        if not 1 <= num_q <= self.num_q:
            raise ValueError(f"QEnsemble: first must be in [1, {self.num_q}], got {first!r}")
        if self.encoder is not None:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not detach_params):
                obs = self.encoder(obs)
        batch = obs.shape[:-1]
        x = torch.cat([obs, action], dim=-1).reshape(1, -1, obs.shape[-1] + action.shape[-1])
        x = x.expand(num_q, -1, -1)
        layers = list(zip(self.weights, self.biases))
        if num_q < self.num_q:
            layers = [(w[:num_q], b[:num_q]) for w, b in layers]
        if detach_params:
            layers = [(w.detach(), b.detach()) for w, b in layers]
        for w, b in layers[:-1]:
            x = self.activation(torch.baddbmm(b, x, w))
        w, b = layers[-1]
        x = torch.sum(x * w.transpose(1, 2), dim=-1, keepdim=True) + b  # Q_i = h_i . w_i + b_i
        return x.reshape(num_q, *batch)

    def extra_repr(self) -> str:
        sizes = [self.weights[0].shape[1], *(w.shape[2] for w in self.weights)]
        return f"num_q={self.num_q}, sizes={sizes}"


class SACLoss(nn.Module):
    """The SAC losses: ``loss_qvalue`` (critics), ``loss_actor`` (actor), ``loss_alpha`` (temperature).

    Reads a replay sample (``observation``, ``action`` in env bounds, ``("next", "observation")``,
    ``("next", "reward")``, ``("next", "terminated")``, optional importance ``weight``) and
    returns a TensorDict with the three losses plus ``alpha`` and ``entropy`` (the sample's
    ``-mean log pi``), both detached. It writes ``td_error`` (``max_i |Q_i(s, a) - y|``) into the
    sample for prioritized replay. See the module docstring for the formulas and detaching.

    Args:
        actor: the policy; its :meth:`~TanhGaussianActor.sample` gives squashed actions in
            ``[-1, 1]`` and their log-probabilities, :meth:`~TanhGaussianActor.unscale` maps
            stored actions there (the critics see actions in ``[-1, 1]``).
        critic: a :class:`QEnsemble` (or any module ``critic(obs, action, detach_params=...)
            -> [num_q, batch]``).
        target_critic: the target critics (default: a frozen deep copy of ``critic``).
        gamma: discount factor in [0, 1].
        alpha_init: initial temperature (> 0).
        learn_alpha: tune ``log_alpha`` (``loss_alpha`` is returned); else ``alpha`` stays fixed.
        target_entropy: entropy target of the temperature loss; default ``-action_dim``.

    Examples:
        >>> import gymnasium as gym
        >>> _ = torch.manual_seed(0)
        >>> actor = TanhGaussianActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
        >>> loss_fn = SACLoss(actor, QEnsemble(3, 1, (16,)), gamma=0.99)
        >>> sample = TensorDict({
        ...     "observation": torch.randn(8, 3), "action": torch.rand(8, 1) * 4 - 2,
        ...     ("next", "observation"): torch.randn(8, 3), ("next", "reward"): torch.randn(8),
        ...     ("next", "terminated"): torch.zeros(8, dtype=torch.bool)}, [8])
        >>> out = loss_fn(sample)
        >>> sorted(out.keys()), loss_fn.target_entropy, sample["td_error"].shape
        (['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue'], -1.0, torch.Size([8]))
    """

    in_keys = list(TRANSITION_KEYS)

    def __init__(
        self,
        actor: TanhGaussianActor,
        critic: nn.Module,
        target_critic: nn.Module | None = None,
        *,
        gamma: float = 0.99,
        alpha_init: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(actor, TanhGaussianActor):
            raise TypeError(f"SACLoss: actor must be a TanhGaussianActor, got {type(actor).__name__}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"SACLoss: gamma must be in [0, 1], got {gamma}")
        if not alpha_init > 0.0:
            raise ValueError(f"SACLoss: alpha_init must be > 0, got {alpha_init}")
        self.actor = actor
        self.critic = critic
        if target_critic is None:
            target_critic = copy.deepcopy(critic)
        self.target_critic = target_critic.requires_grad_(False)
        self.gamma = float(gamma)
        self.learn_alpha = learn_alpha
        self.target_entropy = float(-actor.action_dim if target_entropy is None else target_entropy)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha_init)), requires_grad=learn_alpha)

    @property
    def alpha(self) -> float:
        """The current temperature ``exp(log_alpha)``."""
        return float(self.log_alpha.detach().exp())

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        obs, action, next_obs, reward, discount = read_transition(
            sample, self.actor.unscale, gamma=self.gamma, consumer="SACLoss")
        alpha = self.log_alpha.detach().exp()

        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(next_obs)
            next_q = self.target_critic(next_obs, next_action).amin(0)
            # soft TD target: y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))
            target = reward + discount * (next_q - alpha * next_log_prob)  # discount = gamma * (1 - terminated)
        loss_qvalue = 0.5 * q_regression(self.critic, obs, action, target, sample)

        # the actor: a~ ~ pi(.|s) reparameterized, the critics' parameters held fixed
        new_action, log_prob = self.actor.sample(obs)
        q_new = self.critic(obs, new_action, detach_params=True).amin(0)
        loss_actor = (alpha * log_prob - q_new).mean()

        out = {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue}
        log_prob = log_prob.detach()
        if self.learn_alpha:
            # the temperature grows while the policy's entropy (-log pi) is below target_entropy
            out["loss_alpha"] = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
        out["alpha"] = alpha
        out["entropy"] = -log_prob.mean()
        return TensorDict(out, batch_size=[])

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, learn_alpha={self.learn_alpha}, target_entropy={self.target_entropy}"
