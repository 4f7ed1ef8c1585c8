"""PPO's loss: clipped surrogate, (optionally clipped) value loss, entropy bonus.

Reads a minibatch holding ``"observation"``, ``"action"``, ``"log_prob"`` (of the acting
policy), ``"advantage"`` and ``"value_target"`` (from :func:`engine_rl.algos.gae.gae`, computed
once per batch by :class:`handlers.advantage.GAEAdvantage`), to clip the value loss
``"state_value"``, and what a recurrent policy's ``evaluate`` reads besides (its ``memory_keys``:
``"recurrent_state"`` and ``"is_init"`` of whole ``[rows, T]`` sequences, :mod:`engine_rl.algos.recurrent`). Returns a TensorDict whose ``loss_*`` entries the trainer sums and
optimizes, plus diagnostics under other keys: ``approx_kl``, ``clip_fraction``, ``entropy``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.algos.policies import ActorCritic
from engine_rl.checks import nonnegative_number, positive_number
from engine_rl.keys import require_keys

__all__ = ["PPOLoss"]


class PPOLoss(nn.Module):
    """Clipped-surrogate PPO loss (Schulman et al., 2017) over an :class:`ActorCritic`.

    With ``ratio = exp(log_prob - old_log_prob)`` and advantages ``A`` (normalized per
    minibatch if ``normalize_advantage``)::

        loss_objective = -mean(min(ratio * A, clamp(ratio, 1 - eps, 1 + eps) * A))
        loss_critic    = value_coef * mean((V - value_target) ** 2)
                         (with value_clip c: V is old_V + clamp(V - old_V, -c, c))
        loss_entropy   = -entropy_coef * mean(entropy)      (only if entropy_coef > 0)

    ``clip_epsilon`` and the coefficients are plain attributes, so a schedule handler can change
    them during training (e.g. :class:`handlers.schedule.FrameSchedule` for rl-zoo's linear clip).
    Diagnostics (no gradient): ``approx_kl = mean((ratio - 1) - log ratio)`` (Schulman's
    estimator), ``clip_fraction = mean(|ratio - 1| > eps)``, ``entropy``.

    Args:
        policy: the actor-critic being trained (its :meth:`~ActorCritic.evaluate` is called).
        clip_epsilon: the surrogate's clip range (> 0).
        value_clip: clip range of the value prediction around ``"state_value"`` (``None``: no clip).
        value_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        normalize_advantage: standardize the advantages of each minibatch.

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> from engine_rl.algos.policies import CategoricalActorCritic
        >>> policy = CategoricalActorCritic(mlp(4, 2, (8,)), mlp(4, 1, (8,)), seed=0)
        >>> batch = policy(TensorDict({"observation": torch.randn(6, 4)}, [6]))
        >>> batch["advantage"] = torch.randn(6)
        >>> batch["value_target"] = torch.randn(6)
        >>> out = PPOLoss(policy)(batch)
        >>> sorted(out.keys())
        ['approx_kl', 'clip_fraction', 'entropy', 'loss_critic', 'loss_objective']
        >>> out["approx_kl"].abs().item() < 1e-6  # same policy: ratio 1
        True
    """

    def __init__(
        self,
        policy: ActorCritic,
        *,
        clip_epsilon: float = 0.2,
        value_clip: float | None = None,
        value_coef: float = 0.5,
        entropy_coef: float = 0.0,
        normalize_advantage: bool = True,
    ) -> None:
        super().__init__()
        if not callable(getattr(policy, "evaluate", None)):
            raise TypeError(
                f"PPOLoss: argument policy must have an evaluate(observation, action) method "
                f"(an ActorCritic), got {type(policy).__name__}"
            )
        if getattr(policy, "critic", True) is None:
            raise ValueError("PPOLoss: the policy has no critic; PPO needs one for its value loss")
        clip_epsilon = positive_number(clip_epsilon, name="argument clip_epsilon", owner="PPOLoss")
        if value_clip is not None and nonnegative_number(value_clip, name="argument value_clip", owner="PPOLoss") == 0:
            raise ValueError(f"PPOLoss: argument value_clip must be positive or None, got {value_clip!r}")
        self.policy = policy
        self.clip_epsilon = clip_epsilon
        self.value_clip = value_clip
        self.value_coef = nonnegative_number(value_coef, name="argument value_coef", owner="PPOLoss")
        self.entropy_coef = nonnegative_number(entropy_coef, name="argument entropy_coef", owner="PPOLoss")
        self.normalize_advantage = normalize_advantage
        #: What the policy's ``evaluate`` reads besides observations and actions (a recurrent one's state and episode starts).
        self.memory_keys: tuple[str, ...] = tuple(getattr(policy, "memory_keys", ()))

    @property
    def in_keys(self) -> list[str]:
        keys = ["observation", "action", "log_prob", "advantage", "value_target", *self.memory_keys]
        return keys + (["state_value"] if self.value_clip is not None else [])

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        try:
            obs = sample["observation"]
            action = sample["action"]
            old_log_prob = sample["log_prob"]
            advantage = sample["advantage"]
            value_target = sample["value_target"]
            old_value = sample["state_value"] if self.value_clip is not None else None
            memory = {key: sample[key] for key in self.memory_keys}
        except KeyError:
            require_keys(sample, self.in_keys, consumer="PPOLoss")  # raises, naming the missing keys
            raise
        if self.normalize_advantage and advantage.numel() > 1:
            std, mean = torch.std_mean(advantage)
            advantage = (advantage - mean) / (std + 1e-8)

        log_prob, entropy, value = self.policy.evaluate(obs, action, **memory)

        log_ratio = log_prob - old_log_prob
        ratio = log_ratio.exp()
        eps = self.clip_epsilon
        clipped_ratio = ratio.clamp(1.0 - eps, 1.0 + eps)
        # clipped surrogate: the pessimistic (min) of the unclipped and clipped objectives
        loss_objective = -torch.min(ratio * advantage, clipped_ratio * advantage).mean()

        if old_value is not None:
            value = old_value + (value - old_value).clamp(-self.value_clip, self.value_clip)
        loss_critic = self.value_coef * (value - value_target).pow(2).mean()

        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > eps).float().mean()
            entropy_mean = entropy.mean()
        out = {
            "loss_objective": loss_objective,
            "loss_critic": loss_critic,
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
            "entropy": entropy_mean,
        }
        if self.entropy_coef > 0:
            out["loss_entropy"] = -self.entropy_coef * entropy.mean()
        return TensorDict(out, batch_size=[])
