"""Running statistics for normalization: observations (mean/std) and rewards (return scale).

- :func:`merge_moments`: fold a batch's mean/variance into running ones (Chan et al.'s parallel
  update, exact: updating with a whole batch equals updating item by item), or an exponential
  moving average of the first two moments.
- :class:`RunningMeanStd`: those statistics as a plain object with ``state_dict``.
- :class:`Normalizer`: an ``nn.Module`` computing ``clamp((x - mean) / sqrt(var + eps))``. Its
  statistics are module buffers, so a policy that contains it applies the *same* transform
  when collecting, training and evaluating, and saves it in its ``state_dict`` (checkpoints,
  ``policy.pt``). Only :meth:`Normalizer.update` changes them: nothing that merely runs the
  policy (a collector, an evaluation) does. :class:`handlers.normalization.ObservationNormalizer`
  calls it on training batches.
- :class:`ReturnScaler`: divides rewards by the running standard deviation of the discounted
  return (the scaling of Stable-Baselines3's ``VecNormalize`` and ProtoMotions), then clamps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from engine_rl.checks import fail, is_number

__all__ = ["merge_moments", "RunningMeanStd", "Normalizer", "ReturnScaler"]


def _check_ema(ema: float | None, owner: str) -> float | None:
    if ema is None:
        return None
    if not (is_number(ema) and 0.0 < ema < 1.0):
        fail(ema, "None or a decay in (0, 1)", name="argument ema", owner=owner)
    return float(ema)


def merge_moments(
    mean: torch.Tensor,
    var: torch.Tensor,
    count: torch.Tensor,
    x: torch.Tensor,
    *,
    ema: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Running ``(mean, var, count)`` after seeing the rows of ``x`` (leading dims are items).

    With ``ema=None`` the result is the exact population mean and variance of everything seen
    (``count`` may start at a small pseudo-count such as 1e-4, as in Stable-Baselines3). With a
    decay ``ema`` in (0, 1), the mean and the second moment are exponential moving averages over
    batches (``m <- ema * m + (1 - ema) * batch_m``); the first batch (``count == 0``) sets them.

    Args:
        mean: running mean, shape ``S``.
        var: running population variance, shape ``S``.
        count: items seen so far, a 0-dim tensor.
        x: new items, shape ``[..., *S]``.
        ema: ``None`` for exact statistics, or the EMA decay.

    Returns:
        New ``(mean, var, count)`` tensors in the dtype of ``mean``.

    Examples:
        >>> m, v, n = merge_moments(torch.zeros(()), torch.ones(()), torch.zeros(()), torch.tensor([1.0, 3.0]))
        >>> m, v, n = merge_moments(m, v, n, torch.tensor([5.0]))
        >>> m.item(), round(v.item(), 4), n.item()
        (3.0, 2.6667, 3.0)
    """
    dtype = mean.dtype
    x = x.to(dtype).reshape(-1, *mean.shape)
    n = x.shape[0]
    if n == 0:
        return mean, var, count
    batch_mean = x.mean(0)
    batch_var = x.var(0, correction=0)
    if ema is not None:
        if float(count) <= 0:
            return batch_mean, batch_var, count + n
        new_mean = ema * mean + (1 - ema) * batch_mean
        second = ema * (var + mean**2) + (1 - ema) * (batch_var + batch_mean**2)
        return new_mean, (second - new_mean**2).clamp_min(0.0), count + n
    total = count + n
    delta = batch_mean - mean
    new_mean = mean + delta * (n / total)
    m2 = var * count + batch_var * n + delta**2 * (count * n / total)
    return new_mean, m2 / total, total


class RunningMeanStd:
    """Running mean and population variance of a stream of tensors of shape ``shape``.

    Args:
        shape: shape of one item (``()`` for scalars).
        epsilon: initial pseudo-count (mean 0, var 1 weigh as ``epsilon`` items); 0 makes the
            statistics exactly those of the data.
        ema: ``None`` (exact statistics) or an EMA decay in (0, 1), see :func:`merge_moments`.
        dtype: dtype of the statistics (float64 by default: long runs stay exact).

    Examples:
        >>> rms = RunningMeanStd((), epsilon=0.0)
        >>> rms.update(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        >>> rms.mean.item(), rms.var.item(), rms.count.item()
        (2.5, 1.25, 4.0)
    """

    def __init__(
        self,
        shape: Sequence[int] | torch.Size = (),
        *,
        epsilon: float = 1e-4,
        ema: float | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        if epsilon < 0:
            raise ValueError(f"RunningMeanStd: argument epsilon must be >= 0, got {epsilon!r}")
        self.ema = _check_ema(ema, "RunningMeanStd")
        self.shape = torch.Size(shape)
        self.mean = torch.zeros(self.shape, dtype=dtype, device=device)
        self.var = torch.ones(self.shape, dtype=dtype, device=device)
        self.count = torch.tensor(float(epsilon), dtype=dtype, device=device)

    @property
    def std(self) -> torch.Tensor:
        """``sqrt(var)``."""
        return self.var.sqrt()

    def update(self, x: torch.Tensor) -> None:
        """Fold the items of ``x`` (shape ``[..., *shape]``) into the statistics."""
        if tuple(x.shape[x.ndim - len(self.shape):]) != tuple(self.shape) or x.ndim < len(self.shape):
            raise ValueError(
                f"RunningMeanStd: update expects items of shape {tuple(self.shape)}, got a tensor of "
                f"shape {tuple(x.shape)}"
            )
        self.mean, self.var, self.count = merge_moments(self.mean, self.var, self.count, x, ema=self.ema)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        missing = {"mean", "var", "count"} - set(state_dict)
        if missing:
            raise KeyError(f"RunningMeanStd.load_state_dict: missing key(s) {sorted(missing)}")
        for name in ("mean", "var", "count"):
            value = torch.as_tensor(state_dict[name], dtype=self.mean.dtype, device=self.mean.device)
            if value.shape != getattr(self, name).shape:
                raise ValueError(
                    f"RunningMeanStd.load_state_dict: {name} has shape {tuple(value.shape)}, "
                    f"expected {tuple(getattr(self, name).shape)}"
                )
            setattr(self, name, value.clone())


class Normalizer(nn.Module):
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` with running statistics as buffers.

    The statistics (float64 buffers ``mean``, ``var``, ``count``) live in the module's
    ``state_dict``; the float32 shift and scale used by :meth:`forward` are derived from them
    after every :meth:`update` and every ``load_state_dict``. :meth:`forward` never changes the
    statistics; :meth:`update` does, unless :attr:`frozen`.

    Args:
        shape: shape of one item (e.g. the observation shape).
        clip: clamp bound of the normalized values (``None``: no clamp).
        eps: added to the variance before the square root.
        epsilon: initial pseudo-count (see :class:`RunningMeanStd`).
        ema: ``None`` or an EMA decay in (0, 1) (see :func:`merge_moments`).

    Examples:
        >>> norm = Normalizer((2,), clip=5.0, epsilon=0.0)
        >>> norm.update(torch.tensor([[0.0, 10.0], [2.0, 30.0]]))
        >>> norm(torch.tensor([[1.0, 20.0], [3.0, 1000.0]]))
        tensor([[0., 0.],
                [2., 5.]])
        >>> norm.frozen = True
        >>> norm.update(torch.full((4, 2), 100.0))  # ignored while frozen
        >>> norm.mean.tolist(), norm.var.tolist()
        ([1.0, 20.0], [1.0, 100.0])
    """

    def __init__(
        self,
        shape: Sequence[int] | torch.Size,
        *,
        clip: float | None = 10.0,
        eps: float = 1e-8,
        epsilon: float = 1e-4,
        ema: float | None = None,
    ) -> None:
        super().__init__()
        if clip is not None and not clip > 0:
            raise ValueError(f"Normalizer: argument clip must be positive or None, got {clip!r}")
        if not eps >= 0:
            raise ValueError(f"Normalizer: argument eps must be >= 0, got {eps!r}")
        self.ema = _check_ema(ema, "Normalizer")
        self.clip = clip
        self.eps = eps
        self.frozen = False
        shape = torch.Size(shape)
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(float(epsilon), dtype=torch.float64))
        self.register_buffer("shift", torch.zeros(shape), persistent=False)
        self.register_buffer("scale", torch.ones(shape), persistent=False)
        self._refresh()
        self.register_load_state_dict_post_hook(lambda module, _: module._refresh())

    @torch.no_grad()
    def _refresh(self) -> None:
        self.shift.copy_(self.mean)
        self.scale.copy_((self.var + self.eps).rsqrt())

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold the items of ``x`` (shape ``[..., *shape]``) into the statistics (no-op if frozen)."""
        if self.frozen:
            return
        shape = self.mean.shape
        if x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape):]) != tuple(shape):
            raise ValueError(
                f"Normalizer: update expects items of shape {tuple(shape)}, got a tensor of shape {tuple(x.shape)}"
            )
        mean, var, count = merge_moments(self.mean, self.var, self.count, x.to(self.mean.device), ema=self.ema)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)
        self._refresh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x - self.shift) * self.scale
        if self.clip is not None:
            y = y.clamp(-self.clip, self.clip)
        return y

    def extra_repr(self) -> str:
        return f"shape={tuple(self.mean.shape)}, clip={self.clip}, ema={self.ema}, frozen={self.frozen}"


class ReturnScaler:
    """Scale rewards by the running std of the discounted return, then clamp.

    Per env copy it keeps the discounted return ``G <- gamma * G + r`` (reset to 0 after a
    done). :meth:`__call__` takes a ``[num_envs, T]`` block of rewards (rows contiguous in time,
    continuing the previous block's rows), folds the block's returns into a
    :class:`RunningMeanStd`, then returns ``clamp(r / sqrt(var + eps), -clip, clip)`` using the
    statistics *after* the block (Stable-Baselines3 updates per step; after a block the
    statistics are the same, only the scaling within the block differs slightly).

    Args:
        gamma: discount of the return (use the algorithm's gamma).
        clip: clamp bound of the scaled rewards (``None``: no clamp).
        eps: added to the variance before the square root.
        epsilon: initial pseudo-count of the statistics.
        ema: ``None`` or an EMA decay in (0, 1) for the statistics.

    Examples:
        >>> scaler = ReturnScaler(gamma=0.5, epsilon=0.0)
        >>> scaled = scaler(torch.tensor([[1.0, 1.0]]), torch.tensor([[False, True]]))  # returns 1, 1.5
        >>> scaled.round(decimals=3).tolist()  # std of the returns: 0.25
        [[4.0, 4.0]]
        >>> scaler.returns.tolist()  # reset after the done
        [0.0]
    """

    def __init__(
        self,
        *,
        gamma: float,
        clip: float | None = 10.0,
        eps: float = 1e-8,
        epsilon: float = 1e-4,
        ema: float | None = None,
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"ReturnScaler: argument gamma must be in [0, 1], got {gamma!r}")
        if clip is not None and not clip > 0:
            raise ValueError(f"ReturnScaler: argument clip must be positive or None, got {clip!r}")
        self.gamma = float(gamma)
        self.clip = clip
        self.eps = eps
        self.stats = RunningMeanStd((), epsilon=epsilon, ema=_check_ema(ema, "ReturnScaler"))
        #: Running discounted return per env copy (``None`` until the first call).
        self.returns: torch.Tensor | None = None

    def discounted_returns(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """The running discounted return at every step of the block, carrying :attr:`returns`."""
        if reward.ndim != 2 or done.shape != reward.shape:
            raise ValueError(
                "ReturnScaler: reward and done must both have shape [num_envs, T], got "
                f"{tuple(reward.shape)} and {tuple(done.shape)}"
            )
        n, t = reward.shape
        if self.returns is None or self.returns.shape[0] != n:
            self.returns = torch.zeros(n, dtype=torch.float64, device=reward.device)
        elif self.returns.device != reward.device:  # loaded from a checkpoint, which is read onto the CPU
            self.returns = self.returns.to(reward.device)
        reward_t = reward.to(torch.float64).t()
        keep_t = (~done.bool()).to(torch.float64).t()
        out = torch.empty_like(reward_t)
        g = self.returns
        for i in range(t):
            g = torch.add(reward_t[i], g, alpha=self.gamma, out=out[i])
            g = g * keep_t[i]
        self.returns = g
        return out.t()

    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Scaled rewards of a ``[num_envs, T]`` block (same dtype as ``reward``)."""
        self.stats.update(self.discounted_returns(reward, done))
        scale = (self.stats.var + self.eps).rsqrt().to(reward.dtype)
        scaled = reward * scale
        if self.clip is not None:
            scaled = scaled.clamp(-self.clip, self.clip)
        return scaled

    def state_dict(self) -> dict[str, Any]:
        """Statistics and the running returns (tensors; ``returns`` may be ``None``)."""
        return {
            "stats": self.stats.state_dict(),
            "returns": None if self.returns is None else self.returns.clone(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if "stats" not in state_dict:
            raise KeyError("ReturnScaler.load_state_dict: missing key 'stats'")
        self.stats.load_state_dict(state_dict["stats"])
        returns = state_dict.get("returns")
        self.returns = None if returns is None else torch.as_tensor(returns, dtype=torch.float64).clone()
