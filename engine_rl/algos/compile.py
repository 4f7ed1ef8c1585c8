"""``torch.compile`` for a loss, as an option: :func:`compile_loss` and :class:`CompiledLoss`.

Every recipe has a ``compile`` field (``--set compile=true``) that hands its loss module to
:func:`compile_loss` before building the trainer. On a GPU the loss is compiled with
``mode="reduce-overhead"`` (CUDA graphs, where compiled RL updates get their large gains); on a
CPU with torch's default mode. The backward runs through the compiled graph as usual; the
optimizer step stays ``torch.optim``'s (fused where available, :func:`engine_rl.algos.optimizers.adam`).

A compiled loss computes the same maths in fused kernels: values agree with eager to float
rounding, and random draws inside the loss (SAC's actions, TD3's smoothing noise) come from
inductor's generator, so a compiled run and an eager run of the same seed part ways (each is
reproducible). A Python number the loss branches on or reads as a constant (PPO's scheduled
``clip_epsilon``, TD3's update count) costs a recompile or two early on; dynamo then treats it
as dynamic.

Compiling happens at the first call, and can fail there (an op dynamo cannot trace, a missing
compiler). :class:`CompiledLoss` then runs the loss eagerly, warns once naming the error, and
stays eager: a run never stops because of ``compile``. An error the loss itself raises (a
missing key, say) is raised as usual, since the eager call raises it too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CompiledLoss", "compile_loss"]


class CompiledLoss:
    """Calls ``torch.compile(loss, mode=mode)``; falls back to ``loss`` itself if compiling fails.

    Args:
        loss: the loss module (any callable TensorDict -> TensorDict); its ``in_keys`` are passed on.
        mode: ``torch.compile``'s mode (``None``: its default; ``"reduce-overhead"`` for CUDA graphs).
        backend: ``torch.compile``'s backend (default ``"inductor"``).

    Examples:
        >>> loss = CompiledLoss(torch.nn.Linear(2, 1))  # compiles at its first call
        >>> loss.mode, loss.eager
        (None, False)
    """

    def __init__(self, loss: Callable[[Any], Any], *, mode: str | None = None,
                 backend: str | Callable[..., Any] = "inductor") -> None:
        if not callable(loss):
            raise TypeError(f"CompiledLoss: argument loss must be callable, got {type(loss).__name__}")
        self.loss = loss
        self.mode = mode
        self.eager = False
        """True once compiling failed and the loss runs eagerly."""
        self._compiled = torch.compile(loss, mode=mode, backend=backend)

    @property
    def in_keys(self) -> Any:
        return getattr(self.loss, "in_keys", None)

    @property
    def __name__(self) -> str:  # the trainer names its loss in errors
        return getattr(self.loss, "__name__", None) or type(self.loss).__name__

    def __call__(self, sample: Any) -> Any:
        if self.eager:
            return self.loss(sample)
        try:
            return self._compiled(sample)
        except Exception as err:  # noqa: BLE001 - told apart from the loss's own errors below
            out = self.loss(sample)  # raises the loss's own error, if that is what it was
            # dynamo wraps a backend's error (BackendCompilerFailed): name the error inside
            cause = getattr(err, "inner_exception", None) or err.__cause__ or err
            first_line = (str(cause).strip().splitlines() or [""])[0][:200]
            warnings.warn(
                f"torch.compile of {self.__name__} failed ({type(cause).__name__}: {first_line}); "
                "training on with the eager loss",
                RuntimeWarning,
                stacklevel=2,
            )
            self.eager = True
            return out


def compile_loss(loss: Callable[[Any], Any], *, enabled: bool, device: str | torch.device | None = None) -> Any:
    """``loss`` itself, or a :class:`CompiledLoss` of it when ``enabled``.

    Args:
        loss: the loss module.
        enabled: compile it (a recipe's ``compile`` field).
        device: where it trains; on CUDA the mode is ``"reduce-overhead"`` (CUDA graphs).

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> compile_loss(net, enabled=False) is net
        True
        >>> compile_loss(net, enabled=True, device="cuda").mode
        'reduce-overhead'
    """
    if not enabled:
        return loss
    device_type = torch.device(device).type if device is not None else "cpu"
    return CompiledLoss(loss, mode="reduce-overhead" if device_type == "cuda" else None)
