"""PPO's loss for a categorical actor-critic of plain MLPs, as one autograd node.

On CartPole-sized networks (two 4-64-64 MLPs, 256-row minibatches) PPO's optim step is mostly
per-op overhead: autograd records some forty nodes per step, and each op costs microseconds of
dispatch and bookkeeping against a few microseconds of arithmetic. :func:`fused_ppo_terms`
computes the same losses and diagnostics as :class:`~engine_rl.algos.ppo.PPOLoss`'s autograd
path with the forward written out and the backward written by hand, in one autograd node.

The backward runs the ops autograd would run, in the same order (``addmm``'s weight gradient as
``grad.t().mm(input)``, ``tanh_backward``, ``_log_softmax_backward_data``...), so the gradients
are bitwise autograd's when the entropy bonus is off (the rl-zoo CartPole setting); with an
entropy bonus three gradients meet at the log-probabilities and autograd's summation order is
not reproduced, so they agree to rounding. One deliberate difference on CPU
(``sigmoid_tanh``, what :class:`~engine_rl.algos.ppo.PPOLoss` uses there): torch's CPU ``tanh``
is not vectorized (48 µs on 256x64 here, its ``sigmoid`` 8 µs), so tanh layers compute
``2 * sigmoid(2z) - 1`` instead, within 2e-7 of ``torch.tanh``, and their backward uses that
output, as ``tanh_backward`` does. ``tests/engine_rl/algos/test_ppo_fused.py`` checks all of it.

With ``write_gradients=True`` (``PPOLoss(write_gradients=True)``, what ppo-cartpole uses) the
node's backward runs in the loss call itself, outside autograd, for the sum of the ``loss_*``
entries, and the gradients go straight into ``.grad``: the same numbers without autograd's graph,
engine and gradient accumulation, which cost a PPO step about 150 µs here (``README.md``).

Measured on PPO's CartPole step (``tests/benchmarks/ppo_step.py``: both 4-64-64 networks, 256
rows, clipping and Adam included, 10-step blocks interleaved in one process, medians of 200
rounds): fused with ``torch.tanh`` 0.93-0.94 of autograd's time, fused with ``sigmoid_tanh``
0.82-0.84. In a whole run the loss forward plus backward falls by about a quarter
(``README.md``).

:func:`categorical_mlp_plan` says whether a policy qualifies: a
:class:`~engine_rl.algos.policies.CategoricalActorCritic` (with the base class's ``evaluate``)
whose actor and critic are ``nn.Sequential`` stacks of ``nn.Linear`` layers (with biases) and
``nn.Tanh``/``nn.ReLU`` activations, like :func:`~engine_rl.algos.networks.mlp`'s, with no hooks,
float32 parameters, a one-output critic and no autocast. Anything else takes autograd's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from engine_rl.algos.mlp_fused import (
    const as _const,
    global_module_hooks,
    mlp_backward,
    mlp_forward,
    mlp_params,
    plain_mlp,
    write_gradients as write_gradients_into,
)
from engine_rl.algos.policies import ActorCritic, CategoricalActorCritic

__all__ = ["MLPPlan", "categorical_mlp_plan", "fused_ppo_terms"]

_aten = torch.ops.aten


@dataclass(frozen=True)
class MLPPlan:
    """The layers of a qualifying actor-critic, as :func:`fused_ppo_terms` runs them."""

    actor: tuple[nn.Linear, ...]
    """The actor's linear layers, input to output."""
    actor_activations: tuple[str, ...]
    """``'tanh'`` or ``'relu'`` after each actor layer but the last."""
    critic: tuple[nn.Linear, ...]
    """The critic's linear layers, input to output (the last has one output)."""
    critic_activations: tuple[str, ...]
    """``'tanh'`` or ``'relu'`` after each critic layer but the last."""


def categorical_mlp_plan(
    policy: nn.Module, observation: torch.Tensor, action: torch.Tensor, per_item: Sequence[torch.Tensor] = ()
) -> MLPPlan | None:
    """The plan for :func:`fused_ppo_terms` if ``policy`` and the inputs qualify, else ``None``.

    ``observation`` must be ``[B, obs_dim]`` float32 without gradient, ``action`` and every
    tensor of ``per_item`` (log-probabilities, advantages, value targets...) of shape ``[B]``;
    the other conditions are in the module docstring. The networks are walked at every call (about
    20 µs), so hooks registered or layers replaced later are honoured.
    """
    if not isinstance(policy, CategoricalActorCritic):
        return None
    cls = type(policy)
    if (cls.evaluate is not ActorCritic.evaluate or cls._critic is not ActorCritic._critic
            or cls.normalize is not ActorCritic.normalize
            or cls._log_prob_entropy is not CategoricalActorCritic._log_prob_entropy):
        return None  # a subclass computes something else
    if (observation.ndim != 2 or observation.dtype != torch.float32 or observation.requires_grad
            or action.shape != observation.shape[:1] or torch.is_autocast_enabled(observation.device.type)
            or any(t.shape != action.shape for t in per_item)):
        return None
    if global_module_hooks():
        return None
    normalizer = policy.obs_normalizer
    if normalizer is not None and any(p.requires_grad for p in normalizer.parameters()):
        return None
    actor, critic = plain_mlp(policy.actor), plain_mlp(policy.critic)
    if actor is None or critic is None or critic[0][-1].out_features != 1:
        return None
    return MLPPlan(actor=actor[0], actor_activations=actor[1], critic=critic[0], critic_activations=critic[1])


@dataclass(frozen=True)
class _Spec:
    actor_layers: int
    actor_activations: tuple[str, ...]
    critic_activations: tuple[str, ...]
    clip_epsilon: float
    value_clip: float | None
    value_coef: float
    entropy_coef: float
    sigmoid_tanh: bool


_Saved = tuple  # what the backward needs from the forward (see _ppo_forward)


def _ppo_forward(spec: _Spec, obs: torch.Tensor, action: torch.Tensor, old_log_prob: torch.Tensor,
                 advantage: torch.Tensor, value_target: torch.Tensor, old_value: torch.Tensor | None,
                 params: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], _Saved]:
    """``(loss_objective, loss_critic, loss_entropy, approx_kl, clip_fraction, entropy)`` and the saved tensors."""
    actor_params, critic_params = params[: 2 * spec.actor_layers], params[2 * spec.actor_layers:]
    logits, actor_inputs = mlp_forward(obs, actor_params, spec.actor_activations, spec.sigmoid_tanh)
    raw_value, critic_inputs = mlp_forward(obs, critic_params, spec.critic_activations, spec.sigmoid_tanh)
    value = raw_value.squeeze(-1)

    # CategoricalActorCritic._log_prob_entropy
    log_p = logits.log_softmax(-1)
    index = action.long().unsqueeze(-1)
    log_prob = log_p.gather(-1, index).squeeze(-1)
    probs = log_p.exp()
    entropy = -(probs * log_p).sum(-1)

    # PPOLoss: the clipped surrogate
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    eps = spec.clip_epsilon
    clipped_ratio = ratio.clamp(1.0 - eps, 1.0 + eps)
    surr1, surr2 = ratio * advantage, clipped_ratio * advantage
    loss_objective = -torch.min(surr1, surr2).mean()
    # the value loss, optionally clipped around the old values
    value_in_range = None
    if old_value is not None:
        delta = value - old_value
        value_in_range = (delta >= -spec.value_clip) & (delta <= spec.value_clip)
        value = old_value + delta.clamp(-spec.value_clip, spec.value_clip)
    diff = value - value_target
    # (Python numbers as cached tensors, see _const: the same values, fewer ops)
    loss_critic = _const(spec.value_coef, diff) * diff.pow(2).mean()
    entropy_mean = entropy.mean()
    loss_entropy = _const(-spec.entropy_coef, entropy_mean) * entropy_mean
    # diagnostics, as PPOLoss computes them
    n = _const(float(ratio.numel()), ratio)
    approx_kl = (ratio - log_ratio).mean() - _const(1.0, ratio)
    clip_fraction = torch.count_nonzero(clipped_ratio != ratio) / n

    saved = (actor_inputs, critic_inputs, log_p, probs, index, ratio, surr1, surr2, advantage, diff, value_in_range)
    return (loss_objective, loss_critic, loss_entropy, approx_kl, clip_fraction, entropy_mean.detach()), saved


def _ppo_backward(spec: _Spec, params: tuple[torch.Tensor, ...], saved: _Saved, g_objective: torch.Tensor | None,
                  g_critic: torch.Tensor | None, g_entropy: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The parameters' gradients from the losses' gradients (``None``: that loss is not back-propagated)."""
    actor_params, critic_params = params[: 2 * spec.actor_layers], params[2 * spec.actor_layers:]
    (actor_inputs, critic_inputs, log_p, probs, index, ratio, surr1, surr2, advantage, diff,
     value_in_range) = saved
    n = ratio.numel()
    n_t = _const(float(n), ratio)

    grad_log_p = None
    if g_objective is not None:
        # neg and mean give g_min = -g / n per item. Autograd's minimum() gives it to the
        # smaller of surr1 and surr2 and halves on ties; clamp passes it inside the clip range
        # only. A tie with A != 0 means clamp(ratio) == ratio (inside the range): two halves,
        # g_min * A in sum. surr1 > surr2 means outside the range: nothing. surr1 < surr2:
        # g_min * A through surr1. So: g_min * A where surr1 <= surr2, else 0 (bitwise the
        # same, up to the sign of zeros).
        g_min = (-g_objective) / n_t
        g_ratio = (g_min * advantage).masked_fill_(surr1 > surr2, 0.0)
        g_log_prob = g_ratio * ratio  # exp
        grad_log_p = torch.zeros_like(log_p).scatter_add_(-1, index, g_log_prob.unsqueeze(-1))
    if g_entropy is not None and spec.entropy_coef != 0:
        # entropy = -(p * log p).sum(-1), p = exp(log p); loss_entropy = -coef * mean(entropy)
        g_terms = -((g_entropy * _const(-spec.entropy_coef, g_entropy)).expand(n) / n_t)
        g_terms = g_terms.unsqueeze(-1).expand_as(log_p)
        g_probs = g_terms * log_p
        from_product = g_terms * probs + g_probs * probs
        grad_log_p = from_product if grad_log_p is None else grad_log_p + from_product
    actor_grads: list[torch.Tensor | None] = [None] * len(actor_params)
    if grad_log_p is not None:
        grad_logits = _aten._log_softmax_backward_data(grad_log_p, log_p, -1, log_p.dtype)
        actor_grads = mlp_backward(grad_logits, actor_inputs, actor_params, spec.actor_activations)

    critic_grads: list[torch.Tensor | None] = [None] * len(critic_params)
    if g_critic is not None:
        # mul, mean, pow(2)
        g_diff = (g_critic * _const(spec.value_coef, diff)).expand(n) / n_t * (_const(2.0, diff) * diff)
        if value_in_range is not None:
            g_diff = torch.where(value_in_range, g_diff, _const(0.0, diff))
        critic_grads = mlp_backward(g_diff.unsqueeze(-1), critic_inputs, critic_params, spec.critic_activations)
    return [*actor_grads, *critic_grads]


class _CategoricalPPO(torch.autograd.Function):
    """Losses ``(objective, critic, entropy)`` and diagnostics ``(approx_kl, clip_fraction, entropy)``."""

    @staticmethod
    def forward(ctx: Any, spec: _Spec, obs: torch.Tensor, action: torch.Tensor, old_log_prob: torch.Tensor,
                advantage: torch.Tensor, value_target: torch.Tensor, old_value: torch.Tensor | None,
                *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs, saved = _ppo_forward(spec, obs, action, old_log_prob, advantage, value_target, old_value, params)
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(*outputs[3:])
        ctx.save_for_backward(*params)
        ctx.spec = spec
        ctx.saved = saved
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_objective: torch.Tensor | None, g_critic: torch.Tensor | None,
                 g_entropy: torch.Tensor | None, *_: Any) -> tuple[torch.Tensor | None, ...]:
        grads = _ppo_backward(ctx.spec, ctx.saved_tensors, ctx.saved, g_objective, g_critic, g_entropy)
        return (None,) * 7 + tuple(grads)


def fused_ppo_terms(
    plan: MLPPlan,
    observation: torch.Tensor,
    action: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value_target: torch.Tensor,
    old_value: torch.Tensor | None,
    *,
    clip_epsilon: float,
    value_clip: float | None,
    value_coef: float,
    entropy_coef: float,
    sigmoid_tanh: bool,
    write_gradients: bool = False,
) -> dict[str, torch.Tensor]:
    """PPOLoss's entries for already-normalized observations and advantages, in one autograd node.

    With ``write_gradients`` the node's backward runs at once, outside autograd, for the sum of
    the returned ``loss_*`` entries (what the trainer back-propagates): the gradients are added
    into the parameters' ``.grad`` and the entries have no autograd graph.

    Returns ``loss_objective``, ``loss_critic``, ``approx_kl``, ``clip_fraction``, ``entropy``
    and, when ``entropy_coef > 0``, ``loss_entropy``: the same keys and values as
    :class:`~engine_rl.algos.ppo.PPOLoss`'s autograd path. ``old_value`` is used only with a
    ``value_clip``. With ``sigmoid_tanh`` the tanh layers compute ``2 * sigmoid(2z) - 1``
    (within 2e-7 of ``torch.tanh``, and about a quarter of its time on CPU, where torch's
    ``tanh`` is not vectorized: 48 vs 8 µs for sigmoid on 256x64 here); otherwise ``torch.tanh``,
    and the values and gradients are bitwise autograd's (see the module docstring).
    """
    spec = _Spec(
        actor_layers=len(plan.actor), actor_activations=plan.actor_activations,
        critic_activations=plan.critic_activations, clip_epsilon=float(clip_epsilon),
        value_clip=None if value_clip is None else float(value_clip), value_coef=float(value_coef),
        entropy_coef=float(entropy_coef), sigmoid_tanh=bool(sigmoid_tanh),
    )
    params = mlp_params((*plan.actor, *plan.critic))
    old_value = old_value if value_clip is not None else None
    if write_gradients:
        with torch.no_grad():
            outputs, saved = _ppo_forward(spec, observation, action, old_log_prob, advantage, value_target,
                                          old_value, params)
            one = _const(1.0, outputs[0])  # the gradient backward() gives each summed loss
            grads = _ppo_backward(spec, params, saved, one, one, one if entropy_coef > 0 else None)
        write_gradients_into(params, grads)
    else:
        outputs = _CategoricalPPO.apply(spec, observation, action, old_log_prob, advantage, value_target, old_value,
                                        *params)
    loss_objective, loss_critic, loss_entropy, approx_kl, clip_fraction, entropy = outputs
    out = {
        "loss_objective": loss_objective,
        "loss_critic": loss_critic,
        "approx_kl": approx_kl,
        "clip_fraction": clip_fraction,
        "entropy": entropy,
    }
    if entropy_coef > 0:
        out["loss_entropy"] = loss_entropy
    return out
