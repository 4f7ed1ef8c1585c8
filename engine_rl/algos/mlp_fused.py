"""Plain MLPs with the forward written out and the backward written by hand.

The fused losses (:mod:`engine_rl.algos.ppo_fused`, :mod:`engine_rl.algos.dqn_fused`) run
networks built by :func:`~engine_rl.algos.networks.mlp` (``nn.Sequential`` of ``nn.Linear``
with biases and ``nn.Tanh``/``nn.ReLU`` between them) as the ops autograd would run, in
autograd's order, so their values and gradients are bitwise autograd's:

- :func:`plain_mlp` recognises such a network (no hooks, float32) and lists its layers;
- :func:`mlp_forward` is ``F.linear`` (``addmm`` for 2-D input) and the activation per layer,
  keeping the input of every layer for the backward;
- :func:`mlp_backward` is ``AddmmBackward``'s ``grad.t().mm(input)`` for weights, ``sum(0)`` for
  biases, ``grad.mm(weight)`` and ``tanh_backward``/``threshold_backward`` for the layers below;
- :func:`write_gradients` adds gradients into ``.grad`` as ``backward()`` would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module_globals

from engine_rl.precision import OutputLinear

__all__ = [
    "const",
    "global_module_hooks",
    "mlp_backward",
    "mlp_forward",
    "mlp_params",
    "no_module_hooks",
    "plain_mlp",
    "write_gradients",
]

_LINEARS = (nn.Linear, OutputLinear)
_ACTIVATIONS = {nn.Tanh: "tanh", nn.ReLU: "relu"}
_aten = torch.ops.aten


def no_module_hooks(module: nn.Module) -> bool:
    """Whether ``module`` itself has no forward, forward-pre, backward or backward-pre hook."""
    return not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or getattr(module, "_backward_pre_hooks", None))


def global_module_hooks() -> bool:
    """Whether any global module hook is registered (``nn.modules.module.register_module_*_hook``)."""
    return bool(_module_globals._global_forward_hooks or _module_globals._global_forward_pre_hooks
                or _module_globals._global_backward_hooks
                or getattr(_module_globals, "_global_backward_pre_hooks", None))


def plain_mlp(net: nn.Module | None) -> tuple[tuple[nn.Linear, ...], tuple[str, ...]] | None:
    """``(linears, activations)`` of an ``nn.Sequential`` of Linear, act, ..., Linear; else None.

    Every Linear must have a bias and float32 weights; activations are ``'tanh'`` or ``'relu'``;
    neither the Sequential nor a layer may have hooks.

    Examples:
        >>> linears, activations = plain_mlp(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
        >>> [layer.out_features for layer in linears], activations
        ([8, 2], ('relu',))
        >>> plain_mlp(nn.Sequential(nn.Linear(4, 8), nn.Sigmoid(), nn.Linear(8, 2))) is None
        True
    """
    if type(net) is not nn.Sequential or not no_module_hooks(net):
        return None
    modules = tuple(net._modules.values())
    if len(modules) % 2 != 1:
        return None
    linears, activations = [], []
    for i, module in enumerate(modules):
        if not no_module_hooks(module):
            return None
        if i % 2 == 0:
            if type(module) not in _LINEARS:
                return None
            params = module._parameters  # (a dict read: Module.__getattr__ is the slow path)
            if params["bias"] is None or params["weight"].dtype != torch.float32:
                return None
            linears.append(module)
        else:
            kind = _ACTIVATIONS.get(type(module))
            if kind is None:
                return None
            activations.append(kind)
    return tuple(linears), tuple(activations)


def mlp_params(linears: Sequence[nn.Linear]) -> tuple[torch.Tensor, ...]:
    """``(W1, b1, W2, b2, ...)`` of :func:`plain_mlp`'s layers."""
    return tuple(t for layer in linears for t in (layer._parameters["weight"], layer._parameters["bias"]))


_constants: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}


def const(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a cached 0-dim tensor of ``like``'s dtype and device (never written).

    An op with a Python number wraps it in a tensor and casts that each call (``aten::to``,
    ``copy_``): ``x.mul_(2.0)`` takes 5.5 µs here, ``x.mul_(two)`` 1.7 µs, with the same result.
    """
    key = (value, like.dtype, like.device)
    tensor = _constants.get(key)
    if tensor is None:
        if len(_constants) > 256:  # scheduled coefficients bring new values: keep it bounded
            _constants.clear()
        tensor = _constants[key] = torch.tensor(value, dtype=like.dtype, device=like.device)
    return tensor


def mlp_forward(x: torch.Tensor, params: Sequence[torch.Tensor], activations: Sequence[str],
                sigmoid_tanh: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and the input of every layer (``x`` and each activation's output).

    ``params`` is ``[W1, b1, W2, b2, ...]``. With ``sigmoid_tanh`` tanh layers compute
    ``2 * sigmoid(2z) - 1`` (within 2e-7 of ``torch.tanh``; see :mod:`engine_rl.algos.ppo_fused`).
    """
    inputs = [x]
    h = x
    for i in range(len(params) // 2):
        weight, bias = params[2 * i], params[2 * i + 1]
        if i == len(activations):
            return F.linear(h, weight, bias), inputs  # addmm(bias, h, weight.t()) for 2-D input, in one call
        if activations[i] == "relu":
            h = torch.relu(F.linear(h, weight, bias))
        elif sigmoid_tanh:  # tanh(z) = 2 * sigmoid(2z) - 1, with 2z from the product itself
            z2 = torch.addmm(bias, h, weight.t(), beta=2.0, alpha=2.0)
            h = torch.sigmoid(z2).mul_(const(2.0, z2)).sub_(const(1.0, z2))
        else:
            h = torch.tanh(F.linear(h, weight, bias))
        inputs.append(h)
    raise AssertionError("unreachable: an MLP ends with a linear layer")


def mlp_backward(grad: torch.Tensor, inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
                 activations: Sequence[str]) -> list[torch.Tensor]:
    """Gradients ``[W1, b1, W2, b2, ...]`` from the gradient of the output, as AddmmBackward runs them.

    ``inputs`` are :func:`mlp_forward`'s; the input of the first layer gets no gradient.
    """
    grads: list[torch.Tensor] = []
    for i in reversed(range(len(params) // 2)):
        grads.append(grad.sum(0))  # bias
        grads.append(grad.t().mm(inputs[i]))  # weight
        if i > 0:
            upstream = grad.mm(params[2 * i])
            grad = (_aten.tanh_backward(upstream, inputs[i]) if activations[i - 1] == "tanh"
                    else _aten.threshold_backward(upstream, inputs[i], 0))
    grads.reverse()
    return grads


def write_gradients(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> None:
    """Add ``grads`` into ``params``' ``.grad`` as ``backward()`` would (set where it is None;
    a ``None`` gradient leaves its parameter alone).

    Examples:
        >>> w = torch.zeros(2, requires_grad=True)
        >>> write_gradients([w], [torch.ones(2)])
        >>> write_gradients([w], [torch.ones(2)])
        >>> w.grad
        tensor([2., 2.])
    """
    for param, grad in zip(params, grads):
        if grad is None:
            continue
        if param.grad is None:
            param.grad = grad
        else:
            param.grad.add_(grad)
