"""Per-env random streams for batched torch envs, drawn on any device without a Python loop.

A ``torch.Generator`` is one stream for a whole batch: what env ``i`` draws would then depend on
how many envs there are and on which others reset before it. :class:`CounterRNG` gives every env
copy its own stream instead: draw ``c`` of env ``i`` is a 32-bit integer hash of
``(key_i, c)``, where ``key_i`` comes from ``(seed, i)`` and ``c`` is env ``i``'s draw counter.
Draws are plain int64 tensor ops (every product stays below ``2**63``), so they are identical on
every device and need no host sync, and the whole state is two int64 tensors.

The hash is a 32-bit integer mixer (xor-shift / multiply rounds); fine for reset states and
exploration noise, not for cryptography.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from engine_rl.checks import fail, is_int, positive_int

__all__ = ["CounterRNG"]

_MASK32 = 0xFFFFFFFF
_MAX_SEED = 2**64 - 1


# 0-dim CPU tensors: binary ops take them as scalars on any device, without wrapping a
# Python int into a tensor at every call (which costs as much as the op on a CPU).
_M32 = torch.tensor(_MASK32)
_MUL1 = torch.tensor(0x21F0AAAD)
_MUL2 = torch.tensor(0x735A2D97)
_S15 = torch.tensor(15)
_S16 = torch.tensor(16)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """Bijective 32-bit mixer on int64 tensors holding values in ``[0, 2**32)``.

    Both multipliers are below ``2**31``, so no int64 product overflows.
    """
    x = torch.bitwise_xor(x, torch.bitwise_right_shift(x, _S16))
    x = torch.mul(x, _MUL1).bitwise_and_(_M32)  # in place from here: x is a new tensor
    x.bitwise_xor_(torch.bitwise_right_shift(x, _S15))
    x.mul_(_MUL2).bitwise_and_(_M32)
    return x.bitwise_xor_(torch.bitwise_right_shift(x, _S15))


def check_seed(seed: Any, *, owner: str) -> int:
    """Return ``seed`` if it is an int in ``[0, 2**64)``, else raise a ``ValueError``."""
    if not (is_int(seed) and 0 <= seed <= _MAX_SEED):
        fail(seed, "an int in [0, 2**64)", name="seed", owner=owner)
    return int(seed)


class CounterRNG:
    """Independent, reproducible uniform streams, one per env copy, on any device.

    Env ``i``'s stream depends only on ``(seed, i)``: env 3 of a batch of 8 draws the same
    numbers as env 3 of a batch of 16 seeded alike, whatever the other envs do.

    Args:
        num_envs: number of streams.
        device: where keys, counters and draws live.
        seed: seed now (``None``: call :meth:`seed` before drawing).

    Examples:
        >>> rng = CounterRNG(3, seed=7)
        >>> u = rng.uniform(2)  # [num_envs, 2], each row from its env's stream
        >>> u.shape, bool(((u >= 0) & (u < 1)).all()), rng.counter.tolist()
        (torch.Size([3, 2]), True, [2, 2, 2])
        >>> big = CounterRNG(5, seed=7)
        >>> torch.equal(big.uniform(2)[:3], u)  # independent of the number of envs
        True
        >>> rng.uniform(1, index=torch.tensor([2])).shape, rng.counter.tolist()
        (torch.Size([1, 1]), [2, 2, 3])
    """

    def __init__(self, num_envs: int, *, device: torch.device | str | None = None, seed: int | None = None) -> None:
        num_envs = positive_int(num_envs, name="num_envs", owner="CounterRNG")
        self.device = torch.empty(0, device=device).device
        #: Per-env keys, int64 ``[2, num_envs]`` holding 32-bit values.
        self.keys = torch.zeros((2, num_envs), dtype=torch.int64, device=self.device)
        #: Per-env draw counters, int64 ``[num_envs]``.
        self.counter = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.seeded = False
        self._steps: dict[int, torch.Tensor] = {}
        if seed is not None:
            self.seed(seed)

    @property
    def num_envs(self) -> int:
        """Number of streams."""
        return self.counter.shape[0]

    def seed(self, seed: int) -> None:
        """Derive every env's key from ``(seed, env index)`` and zero the counters."""
        seed = check_seed(seed, owner="CounterRNG")
        index = torch.arange(self.num_envs, dtype=torch.int64, device=self.device)
        k0 = _mix32((_mix32(index) + (seed & _MASK32)) & _MASK32)
        k1 = _mix32((_mix32(k0 ^ 0x5BD1E995) + (seed >> 32)) & _MASK32)
        self.keys[0] = k0
        self.keys[1] = k1
        self.counter.zero_()
        self.seeded = True

    def words(self, count: int, *, index: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Draw ``count`` 32-bit words per selected env (int64 ``[envs, count]``), advancing
        the counters of the selected envs only.

        Args:
            count: words per env.
            index: distinct env indices (int64 ``[k]``) to draw for; result ``[k, count]``.
            mask: bool ``[num_envs]``: every env gets a row (``[num_envs, count]``) but only the
                counters where ``mask`` is True advance, so unmasked rows are not consumed
                (use it on GPUs: no data-dependent shapes, no host sync).
        """
        if not self.seeded:
            raise RuntimeError("CounterRNG: call seed() before drawing")
        if index is not None and mask is not None:
            raise ValueError("CounterRNG: pass index or mask, not both")
        keys, counter = self.keys, self.counter
        if index is not None:
            keys, counter = keys[:, index], counter[index]
        steps = self._steps.get(count)
        if steps is None:
            steps = self._steps[count] = torch.arange(count, dtype=torch.int64, device=self.device)
        ctr = torch.add(counter[:, None], steps).bitwise_and_(_M32)
        words = _mix32(_mix32(ctr.bitwise_xor_(keys[0][:, None])).bitwise_xor_(keys[1][:, None]))
        if index is not None:
            self.counter.index_add_(0, index, torch.full_like(index, count))
        elif mask is not None:
            self.counter.add_(mask.to(torch.int64), alpha=count)
        else:
            self.counter.add_(count)
        return words

    def uniform(
        self,
        count: int,
        *,
        index: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Uniform floats in ``[0, 1)``, ``[envs, count]``; arguments as in :meth:`words`.

        ``float64`` draws carry 32 random bits, ``float32`` draws 24.
        """
        words = self.words(count, index=index, mask=mask)
        if dtype == torch.float64:
            return words.to(torch.float64) * 2.0**-32
        if dtype == torch.float32:
            return (words >> 8).to(torch.float32) * 2.0**-24
        raise ValueError(f"CounterRNG: dtype must be torch.float32 or torch.float64, got {dtype}")

    def state_dict(self) -> dict[str, Any]:
        """Keys and counters (CPU copies) and whether the streams were seeded."""
        return {
            "keys": self.keys.to("cpu", copy=True),
            "counter": self.counter.to("cpu", copy=True),
            "seeded": self.seeded,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (shapes must match ``num_envs``)."""
        missing = {"keys", "counter", "seeded"} - set(state_dict)
        if missing:
            raise KeyError(f"CounterRNG.load_state_dict: missing key(s) {sorted(missing)}")
        for name, dest in (("keys", self.keys), ("counter", self.counter)):
            value = state_dict[name]
            if not isinstance(value, torch.Tensor) or value.shape != dest.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"CounterRNG.load_state_dict: {name!r} must be a tensor of shape {tuple(dest.shape)}, got {got}"
                )
            dest.copy_(value)
        self.seeded = bool(state_dict["seeded"])
