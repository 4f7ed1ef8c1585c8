"""Mixed precision: matrix products in bfloat16, everything else in float32.

On a recent GPU, or a CPU with native bfloat16 dot products (``avx512_bf16`` or AMX), a matrix
product may run faster in bfloat16 than in float32, and SAC's update is mostly such products;
whether the whole update gains depends on the machine (``tests/benchmarks/sac_update.py``
measures it; on one AVX-512 bf16 CPU it was slower). :class:`AutocastLoss` runs a loss module under
``torch.autocast``: the products inside it (``linear``, ``mm``, ``bmm``, ``baddbmm``...) take
bfloat16 inputs and accumulate in float32; parameters, gradients, optimizer state and target
networks stay float32.

Two places keep full precision even under autocast, so that values and log-probabilities are
not rounded to bfloat16's 8 significant bits (a Q value near -100 would move in steps of 0.5):

- :class:`OutputLinear`, the last layer of :func:`engine_rl.algos.networks.mlp`, and the last
  layer of :class:`engine_rl.algos.sac.QEnsemble` run in float32;
- :class:`AutocastLoss` returns its floating-point entries as float32.

The precision is a recipe field (``--set precision=bfloat16``): float32 gives Stable-Baselines3's
numerics, bfloat16 the speed.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase  # noqa: F401  (TensorDict: the docstring example)
from torch import nn

__all__ = ["PRECISIONS", "AutocastLoss", "OutputLinear", "compute_dtype", "native_bfloat16"]

PRECISIONS = ("float32", "bfloat16")
"""Accepted values of a recipe's ``precision`` field."""


_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU feature flags of native bfloat16 dot products: x86's AVX-512 BF16 and AMX, Arm's BF16."""


def native_bfloat16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU has native bfloat16 dot products, from the feature flags Linux lists in ``cpuinfo``.

    ``False`` where the file cannot be read (not Linux): bfloat16 is then taken to be emulated.

    Examples:
        >>> native_bfloat16("/no/such/file")
        False
    """
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags: set[str] = set()
    for line in text.splitlines():
        name, _, values = line.partition(":")
        if name.strip() in ("flags", "Features"):  # x86, Arm
            flags.update(values.split())
    return any(flag in flags for flag in _BF16_FLAGS)


def compute_dtype(precision: str, *, owner: str, device: str | torch.device = "cpu") -> torch.dtype | None:
    """The autocast dtype of a ``precision`` name: ``None`` for float32, ``torch.bfloat16``.

    Raises a ``ValueError`` naming ``owner`` for any other name, and warns (once per call) when
    bfloat16 is asked for on a CPU ``device`` that would emulate it, where it is slower than float32.

    Examples:
        >>> compute_dtype("float32", owner="demo") is None
        True
        >>> compute_dtype("half", owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: precision must be one of ('float32', 'bfloat16'), got 'half'
    """
    if precision not in PRECISIONS:
        raise ValueError(f"{owner}: precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "float32":
        return None
    if torch.device(device).type == "cpu" and not native_bfloat16():
        warnings.warn(
            f"{owner}: precision='bfloat16' on a CPU without native bfloat16 (avx512_bf16 or AMX): "
            "its matmuls are emulated and slower than float32",
            RuntimeWarning,
            stacklevel=2,
        )
    return torch.bfloat16


class OutputLinear(nn.Linear):
    """An ``nn.Linear`` that computes in its parameters' dtype even under ``torch.autocast``.

    The output layer of a value or policy network: its product is small, and rounding its
    result to bfloat16 would cost the values their precision. Outside autocast it is exactly
    ``nn.Linear`` (same parameters, same ``state_dict`` keys).

    Examples:
        >>> layer = OutputLinear(4, 1)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     layer(torch.randn(2, 4)).dtype, nn.Linear(4, 1)(torch.randn(2, 4)).dtype
        (torch.float32, torch.bfloat16)
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.to(self.weight.dtype))


class AutocastLoss(nn.Module):
    """Runs ``loss``'s forward under ``torch.autocast(device_type, dtype)``; floats come out float32.

    A drop-in loss module for :func:`engine_rl.create_trainer`: ``in_keys`` are ``loss``'s, and
    every floating entry of the returned TensorDict (or mapping) is float32, whatever precision
    the products inside ran at. Checkpoint ``loss`` itself, not this wrapper (it adds a
    ``loss.`` prefix to the keys).

    Args:
        loss: the loss module (e.g. :class:`engine_rl.algos.SACLoss`).
        dtype: the products' dtype (``torch.bfloat16``; ``torch.float16`` where supported).
        device_type: autocast's device type (``"cpu"``, ``"cuda"``, ...); default: the device
            of ``loss``'s first parameter (``"cpu"`` if it has none), so a loss moved to a GPU
            runs under CUDA autocast.

    Examples:
        >>> from engine_rl.algos.networks import mlp
        >>> net = mlp(3, 1, (8,))
        >>> def mse(td):
        ...     return TensorDict({"loss": (net(td["x"]).squeeze(-1) - td["y"]).square().mean()}, [])
        >>> wrapped = AutocastLoss(mse)
        >>> out = wrapped(TensorDict({"x": torch.randn(4, 3), "y": torch.randn(4)}, [4]))
        >>> out["loss"].dtype, out["loss"].requires_grad
        (torch.float32, True)
    """

    def __init__(self, loss: Any, dtype: torch.dtype = torch.bfloat16, *, device_type: str | None = None) -> None:
        super().__init__()
        if not callable(loss):
            raise TypeError(f"AutocastLoss: loss must be callable, got {type(loss).__name__}")
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"AutocastLoss: dtype must be a floating torch.dtype, got {dtype!r}")
        self.loss = loss
        self.dtype = dtype
        if device_type is None:
            params = loss.parameters() if isinstance(loss, nn.Module) else iter(())
            first = next(iter(params), None)
            device_type = "cpu" if first is None else first.device.type
        self.device_type = device_type
        self.__name__ = f"AutocastLoss({getattr(loss, '__name__', None) or type(loss).__name__})"

    @property
    def in_keys(self) -> Any:
        """The wrapped loss's ``in_keys`` (``None`` if it declares none)."""
        return getattr(self.loss, "in_keys", None)

    def forward(self, sample: TensorDictBase) -> TensorDictBase | Mapping[str, Any]:
        with torch.autocast(self.device_type, dtype=self.dtype):
            out = self.loss(sample)
        items = out.items() if isinstance(out, (TensorDictBase, Mapping)) else None
        if items is None:
            raise TypeError(
                f"{self.__name__}: the loss must return a TensorDict or a mapping, got {type(out).__name__}"
            )
        casts = {
            key: value.float()
            for key, value in items
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32
        }
        if not casts:
            return out
        if isinstance(out, TensorDictBase):
            for key, value in casts.items():
                out.set(key, value)
            return out
        return {**out, **casts}

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, device_type={self.device_type!r}"
