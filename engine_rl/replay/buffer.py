"""ReplayBuffer: TensorDict transitions in a circular storage, drawn by a uniform or prioritized sampler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from engine_rl.checks import fail, is_int, positive_int
from engine_rl.keys import MASK_KEY, format_key
from engine_rl.replay.samplers import Sampler, UniformSampler
from engine_rl.replay.storage import TensorStorage, batch_rows

__all__ = ["ReplayBuffer"]

_RESERVED = (("index",), ("weight",))


class ReplayBuffer:
    """A fixed-capacity buffer of TensorDict rows with uniform or prioritized sampling.

    :meth:`extend` flattens a batch of any shape to rows and writes them at the cursor, the
    oldest rows being overwritten once the buffer is full. The first call fixes the stored keys,
    shapes and dtypes (storage is preallocated then). Every tensor leaf is stored, ``("collector",
    ...)`` entries included, except the mask :data:`~engine_rl.keys.MASK_KEY`, ``("collector",
    "mask")``: when present (bool, shaped like the batch) only rows where it is True are stored.
    Non-tensor entries are ignored.

    :meth:`sample` returns a TensorDict ``[batch_size]`` on :attr:`device` with every stored key
    plus ``"index"`` (int64 positions, for :meth:`update_priority`) and ``"weight"`` (float32
    importance weights; all ones for uniform sampling).

    Args:
        capacity: number of rows kept.
        sampler: a :class:`UniformSampler` (default) or :class:`PrioritizedSampler`; one per buffer.
        device: where samples are returned and in-memory rows live.
        storage: ``"memory"`` (preallocated tensors) or ``"memmap"`` (tensordict memory-mapped
            files on the CPU; samples are moved to ``device``).
        memmap_dir: folder for the memmap files; a temporary folder removed with the buffer if None.
        seed: seed of the buffer's own ``torch.Generator`` (its state is in :meth:`state_dict`);
            if None, the seed is drawn from torch's global generator.
        capacity_label: how a refusal names the capacity when the rows need more memory than
            ``device`` has (checked when the first rows fix the row size): ``"OWNER: FIELD"``,
            e.g. a recipe's ``"DQNConfig: buffer_size"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> buf = ReplayBuffer(4, seed=0)
        >>> batch = TensorDict(
        ...     {"observation": torch.arange(6.0).reshape(2, 3, 1), "action": torch.zeros(2, 3, dtype=torch.int64),
        ...      "collector": {"mask": torch.tensor([[True, True, False], [True, True, True]])}},
        ...     batch_size=[2, 3])
        >>> buf.extend(batch).tolist()  # 5 valid rows into 4 slots: the first is overwritten
        [1, 2, 3, 0]
        >>> len(buf), buf.capacity
        (4, 4)
        >>> s = buf.sample(3)
        >>> s.batch_size, sorted(s.keys())
        (torch.Size([3]), ['action', 'index', 'observation', 'weight'])
        >>> bool((s["observation"].squeeze(1) == torch.tensor([5.0, 1.0, 3.0, 4.0])[s["index"]]).all())
        True
    """

    def __init__(
        self,
        capacity: int = 100_000,
        *,
        sampler: Sampler | None = None,
        device: torch.device | str = "cpu",
        storage: str = "memory",
        memmap_dir: str | Path | None = None,
        seed: int | None = None,
        capacity_label: str = "ReplayBuffer: capacity",
    ) -> None:
        capacity = positive_int(capacity, name="capacity", owner="ReplayBuffer")
        if storage not in ("memory", "memmap"):
            raise ValueError(f"ReplayBuffer: storage must be 'memory' or 'memmap', got {storage!r}")
        if memmap_dir is not None and storage != "memmap":
            raise ValueError("ReplayBuffer: memmap_dir is only used with storage='memmap'")
        if seed is not None and not is_int(seed):
            fail(seed, "an int or None", name="seed", owner="ReplayBuffer")
        self._device = torch.device(device)
        self._storage = TensorStorage(
            capacity, device=self._device, memmap=storage == "memmap", memmap_dir=memmap_dir, name="ReplayBuffer",
            capacity_label=capacity_label,
        )
        self._sampler: Sampler = UniformSampler() if sampler is None else sampler
        self._sampler.bind(capacity)
        if seed is None:
            seed = int(torch.randint(2**62, ()).item())
        self._generator = torch.Generator().manual_seed(int(seed))

    @property
    def capacity(self) -> int:
        """Number of rows kept."""
        return self._storage.capacity

    @property
    def device(self) -> torch.device:
        """Where samples are returned."""
        return self._device

    @property
    def sampler(self) -> Sampler:
        """The sampler choosing rows."""
        return self._sampler

    @property
    def storage(self) -> TensorStorage:
        """The circular storage (its ``memmap_dir`` holds the files for memmap storage)."""
        return self._storage

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        keys = [format_key(k) for k in self._storage.keys]
        return (
            f"ReplayBuffer(size={len(self)}, capacity={self.capacity}, sampler={type(self._sampler).__name__}, "
            f"device={self._device}, keys={keys})"
        )

    def extend(self, td: TensorDictBase) -> torch.Tensor:
        """Store the rows of ``td`` (flattened over its batch dims; masked rows dropped).

        Args:
            td: a TensorDict of any batch shape with the stored keys (all keys on the first call).

        Returns:
            int64 CPU tensor of the positions written (at most ``capacity`` of them).
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"ReplayBuffer.extend: td must be a TensorDict, got {type(td).__name__}")
        n = td.batch_size.numel()
        rows = batch_rows(td)
        mask = rows.pop(MASK_KEY, None)
        reserved = [format_key(k) for k in _RESERVED if k in rows]
        if reserved:
            raise KeyError(f"ReplayBuffer.extend: keys {reserved} are added by sample() and cannot be stored")
        if mask is not None:
            if mask.dtype != torch.bool or mask.numel() != n:
                raise ValueError(
                    f"ReplayBuffer.extend: {format_key(MASK_KEY)!r} must be a bool tensor shaped like the batch "
                    f"{tuple(td.batch_size)}, got {mask.dtype} {tuple(td.get(MASK_KEY).shape)}"
                )
            mask = mask.reshape(n)
            if not bool(mask.all()):
                keep = mask.nonzero().squeeze(1)
                rows = {key: value[keep] for key, value in rows.items()}
        index = self._storage.extend(rows)
        self._sampler.extend(index)
        return index

    def sample(self, batch_size: int) -> TensorDict:
        """Draw ``batch_size`` rows (with replacement) as a TensorDict on :attr:`device`.

        Args:
            batch_size: number of rows, > 0.
        """
        batch_size = positive_int(batch_size, name="batch_size", owner="ReplayBuffer.sample")
        if len(self._storage) == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty; call extend() before sample()")
        index, weight = self._sampler.sample(len(self._storage), int(batch_size), generator=self._generator)
        if self._device.type != "cpu":
            index, weight = index.to(self._device), weight.to(self._device)
        return self._storage.get(index, extra={"index": index, "weight": weight})

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set new priorities for sampled rows (no-op for uniform sampling).

        Args:
            index: positions, usually ``sample["index"]``.
            priority: ``|td_error|`` per index (any float dtype/device); the sampler stores
                ``(|priority| + eps) ** alpha``.
        """
        self._sampler.update_priority(index, priority)

    def state_dict(self) -> dict[str, Any]:
        """Storage (cursor, size, filled rows), sampler state and generator state.

        Only tensors, numbers, strings and plain dicts, so ``torch.load(..., weights_only=True)``
        reads it back. The row tensors are views of the storage, not copies; for memmap storage
        they are the memory-mapped tensors themselves, so this costs no extra memory.
        """
        return {
            "storage": self._storage.state_dict(),
            "sampler": self._sampler.state_dict(),
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; the next samples repeat the saved buffer's."""
        self._storage.load_state_dict(state_dict["storage"])
        self._sampler.load_state_dict(state_dict["sampler"])
        self._generator.set_state(state_dict["generator"].cpu())
