"""DQN's loss for a plain MLP Q network, its backward written by hand and run outside autograd.

On dqn-cartpole's Q network (4-256-256-2, 64-row samples) an optim step is four 64x256x256
products (~95 µs each here) plus some forty small ops; autograd's share of it (recording the
graph, running the engine, accumulating gradients) is about a tenth of the step in a run and a
fifth in a micro-benchmark that repeats the step alone. With
``DQNLoss(write_gradients=True)`` the loss runs its Q network with :func:`mlp_forward` (the ops
``nn.Linear``/``nn.ReLU`` run) under ``no_grad`` and computes the gradients itself with
:func:`dqn_gradients` (the ops autograd's backward runs, in its order), writing them into the
parameters' ``.grad`` during the call; the trainer sees ``wrote_gradients`` and does not call
``backward()`` (:func:`engine_rl.create_trainer`). Values, ``td_error`` and gradients are
bitwise autograd's (``tests/engine_rl/algos/test_dqn_fused.py``): huber and squared losses,
importance weights, double and plain targets.

Measured in place by ``tests/benchmarks/dqn_step.py`` (one run of the recipe, switching between
the two paths every two batches): 0.885 of autograd's time per optim step (``README.md``).

:func:`q_mlp_plan` says whether a Q network and a sample qualify: the network is an
``nn.Sequential`` of ``nn.Linear`` (with biases) and ``nn.ReLU``/``nn.Tanh`` layers, as
:func:`~engine_rl.algos.networks.mlp` builds it, with float32 parameters that require gradients,
no module hooks (local or global), 2-D float32 observations without gradient, ``[B]`` actions,
grad mode on and no autocast. Anything else takes autograd's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine_rl.algos.mlp_fused import global_module_hooks, mlp_backward, mlp_params, plain_mlp

__all__ = ["QPlan", "q_mlp_plan", "dqn_gradients"]

_aten = torch.ops.aten


@dataclass(frozen=True)
class QPlan:
    """The layers of a qualifying Q network, as :func:`dqn_gradients` runs them."""

    params: tuple[torch.Tensor, ...]
    """``(W1, b1, W2, b2, ...)``, input layer first."""
    activations: tuple[str, ...]
    """``'relu'`` or ``'tanh'`` after each layer but the last."""


def q_mlp_plan(qnet: nn.Module, observation: torch.Tensor, action: torch.Tensor) -> QPlan | None:
    """The plan for :func:`dqn_gradients` if ``qnet`` and the inputs qualify, else ``None``.

    The conditions are in the module docstring. The network is walked at every call (a few µs),
    so hooks registered or layers replaced later are honoured.

    Examples:
        >>> from engine_rl.algos.networks import mlp
        >>> plan = q_mlp_plan(mlp(4, 2, (8,)), torch.zeros(5, 4), torch.zeros(5, dtype=torch.long))
        >>> [tuple(p.shape) for p in plan.params], plan.activations
        ([(8, 4), (8,), (2, 8), (2,)], ('relu',))
        >>> with torch.no_grad():
        ...     q_mlp_plan(mlp(4, 2, (8,)), torch.zeros(5, 4), torch.zeros(5, dtype=torch.long))
    """
    if (not torch.is_grad_enabled() or observation.ndim != 2 or observation.dtype != torch.float32
            or observation.requires_grad or action.shape != observation.shape[:1]
            or torch.is_autocast_enabled(observation.device.type) or global_module_hooks()):
        return None
    layers = plain_mlp(qnet)
    if layers is None:
        return None
    linears, activations = layers
    params = mlp_params(linears)
    if not all(p.requires_grad for p in params):
        return None
    return QPlan(params=params, activations=activations)


_mean_grads: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _mean_grad(n: int, like: torch.Tensor) -> torch.Tensor:
    """``mean()``'s backward for a unit gradient: ``1 / n`` for each of ``n`` items (cached, never written)."""
    key = (n, like.dtype, like.device)
    grad = _mean_grads.get(key)
    if grad is None:
        if len(_mean_grads) > 64:
            _mean_grads.clear()
        # MeanBackward: the output's gradient expanded, divided by the number of items
        grad = _mean_grads[key] = torch.ones((), dtype=like.dtype, device=like.device).expand(n) / n
    return grad


def dqn_gradients(
    plan: QPlan,
    inputs: list[torch.Tensor],
    q_values: torch.Tensor,
    index: torch.Tensor,
    q_taken: torch.Tensor,
    td_target: torch.Tensor,
    *,
    weight: torch.Tensor | None,
    loss: str,
) -> list[torch.Tensor]:
    """Gradients of ``DQNLoss``'s loss for ``plan.params``, as autograd's backward computes them.

    Args:
        plan: the Q network's layers (:func:`q_mlp_plan`).
        inputs: the input of every layer, from :func:`~engine_rl.algos.mlp_fused.mlp_forward`.
        q_values: the network's output ``[B, num_actions]``.
        index: the actions taken, ``[B, 1]`` int64 (what ``gather`` read).
        q_taken: ``q_values`` at the actions, ``[B]``.
        td_target: the TD targets, ``[B]``.
        weight: importance weights ``[B]`` (or ``None``), multiplying each item's loss.
        loss: ``"huber"`` (smooth L1, beta 1) or ``"mse"`` (the squared TD error).

    Returns:
        ``[W1, b1, W2, b2, ...]``, the loss being the mean over the batch.
    """
    grad = _mean_grad(q_taken.numel(), q_taken)
    if weight is not None:
        grad = grad * weight.reshape(grad.shape)  # MulBackward
    if loss == "huber":
        grad = _aten.smooth_l1_loss_backward(grad, q_taken, td_target, 0, 1.0)  # reduction none, beta 1
    else:  # (q_taken - td_target).pow(2): PowBackward, then SubBackward passes it to q_taken
        grad = grad * ((q_taken - td_target) * 2.0)
    # SqueezeBackward, then GatherBackward: zeros with the gradient added at the actions taken
    grad_q = torch.zeros_like(q_values).scatter_add_(-1, index, grad.unsqueeze(-1))
    return mlp_backward(grad_q, inputs, plan.params, plan.activations)
