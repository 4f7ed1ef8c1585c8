"""Preallocated circular storage of TensorDict rows, in memory or in memory-mapped files."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from engine_rl.checks import int_in, positive_int
from engine_rl.device import check_fits, format_bytes
from engine_rl.keys import flatten_keys, format_key, nest_keys

__all__ = ["TensorStorage", "batch_rows"]

Key = tuple[str, ...]


def batch_rows(td: TensorDictBase) -> dict[Key, torch.Tensor]:
    """The tensor leaves of ``td`` as rows, by tuple key: ``[*batch_size, *row_shape]`` becomes
    ``[n, *row_shape]`` (a view where the layout allows). Non-tensor entries are left out.

    Examples:
        >>> td = TensorDict({"observation": torch.zeros(2, 3, 4), "next": {"reward": torch.ones(2, 3)}}, [2, 3])
        >>> {key: tuple(row.shape) for key, row in batch_rows(td).items()}
        {('observation',): (6, 4), ('next', 'reward'): (6,)}
    """
    n, dims = td.batch_size.numel(), td.batch_dims
    rows: dict[Key, torch.Tensor] = {}
    for key, value in td.items(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor):
            rows[(key,) if isinstance(key, str) else tuple(key)] = value.reshape(n, *value.shape[dims:])
    return rows


class TensorStorage:
    """Circular rows of tensors, one preallocated ``[capacity, *row_shape]`` tensor per key.

    Nothing is allocated until the first :meth:`extend` (or :meth:`load_state_dict`), which fixes
    the keys, row shapes and dtypes; later writes must match them exactly. When full, the oldest
    rows are overwritten first. In-memory rows that need more than the device has are a
    ``ValueError`` naming ``capacity_label`` before anything is allocated
    (:func:`engine_rl.device.check_fits`).

    Args:
        capacity: number of rows.
        device: where rows live and where :meth:`get` returns them. Memory-mapped rows always
            live on the CPU; :meth:`get` moves the gathered rows to ``device``.
        memmap: keep rows in memory-mapped files (tensordict's ``memmap`` format: one
            ``<key>.memmap`` file per leaf plus ``meta.json``, so ``TensorDict.load_memmap``
            reopens them) instead of RAM.
        memmap_dir: folder for those files; a temporary folder, removed with the storage, if None.
        name: how error messages name the owner (e.g. ``"ReplayBuffer"``).
        capacity_label: how a refusal for memory names the capacity, ``"OWNER: FIELD"`` (a recipe's
            ``"DQNConfig: buffer_size"``); default ``"<name>: capacity"``.

    Examples:
        >>> storage = TensorStorage(3)
        >>> storage.extend({("obs",): torch.arange(4.0).unsqueeze(1)}).tolist()  # 4 rows, 3 slots
        [1, 2, 0]
        >>> storage.get(torch.tensor([0, 1, 2]))["obs"].squeeze(1).tolist()
        [3.0, 1.0, 2.0]
        >>> len(storage), storage.cursor
        (3, 1)
    """

    def __init__(
        self,
        capacity: int,
        *,
        device: torch.device | str = "cpu",
        memmap: bool = False,
        memmap_dir: str | Path | None = None,
        name: str = "TensorStorage",
        capacity_label: str | None = None,
    ) -> None:
        self._capacity = positive_int(capacity, name="capacity", owner=name)
        self._name = name
        self._capacity_label = capacity_label or f"{name}: capacity"
        self._device = torch.device(device)
        self._memmap = memmap
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        self._memmap_dir = Path(memmap_dir) if memmap_dir is not None else None
        self._memmap_td: TensorDict | None = None  # keeps the memory maps open
        self._data: dict[Key, torch.Tensor] = {}
        self._keys: tuple[Key, ...] = ()
        self._cursor = 0
        self._size = 0

    @property
    def capacity(self) -> int:
        """Number of rows."""
        return self._capacity

    @property
    def device(self) -> torch.device:
        """Where :meth:`get` returns rows."""
        return self._device

    @property
    def cursor(self) -> int:
        """Next row to be written."""
        return self._cursor

    @property
    def memmap_dir(self) -> Path | None:
        """Folder of the memory-mapped files (None for in-memory storage or before allocation)."""
        return self._memmap_dir if self._memmap else None

    @property
    def keys(self) -> tuple[Key, ...]:
        """Stored keys as tuples, empty before the first write."""
        return self._keys

    @property
    def data(self) -> dict[Key, torch.Tensor]:
        """The full ``[capacity, ...]`` tensors by key (plain tensors, memmap-backed for memmap)."""
        return self._data

    def __len__(self) -> int:
        return self._size

    def _allocate(self, rows: Mapping[Key, torch.Tensor]) -> None:
        storage_device = torch.device("cpu") if self._memmap else self._device
        if self._memmap:
            if self._memmap_dir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="engine_rl_replay_")
                self._memmap_dir = Path(self._tmpdir.name)
            # expanded zeros carry the shape without allocating it; memmap_like creates the files
            layout = {
                key: torch.zeros((1, *row.shape[1:]), dtype=row.dtype).expand(self._capacity, *row.shape[1:])
                for key, row in rows.items()
            }
            self._memmap_td = TensorDict(nest_keys(layout), batch_size=[self._capacity]).memmap_like(
                prefix=self._memmap_dir
            )
            # plain-tensor views of the same memory: cheaper indexing than the MemoryMappedTensor subclass
            self._data = {key: self._memmap_td.get(key).as_subclass(torch.Tensor) for key in rows}
        else:
            row_bytes = sum(math.prod(row.shape[1:]) * row.element_size() for row in rows.values())
            owner, _, field = self._capacity_label.rpartition(": ")
            check_fits(self._capacity * row_bytes, owner=owner, setting=f"{field}={self._capacity}", what="of replay",
                       each=f"{format_bytes(row_bytes)} a row", device=storage_device)
            self._data = {
                key: torch.zeros((self._capacity, *row.shape[1:]), dtype=row.dtype, device=storage_device)
                for key, row in rows.items()
            }
        self._keys = tuple(self._data)

    @classmethod
    def over(
        cls, data: Mapping[Key, torch.Tensor], *, cursor: int = 0, size: int = 0, name: str = "TensorStorage"
    ) -> TensorStorage:
        """A storage of the given ``[capacity, *row_shape]`` tensors, used as they are (not
        copied): e.g. another storage's :attr:`data` moved to shared memory, which a second
        process writes through this one while the first counts the rows in with :meth:`advance`.

        Args:
            data: tuple key -> tensor, all with the same leading size (the capacity).
            cursor: the next row to write.
            size: the rows already held.
            name: how error messages name the owner.

        Examples:
            >>> reader = TensorStorage(4)
            >>> _ = reader.extend({("obs",): torch.zeros(1, 1)})
            >>> writer = TensorStorage.over(reader.share_memory_().data, cursor=reader.cursor)
            >>> writer.extend({("obs",): torch.tensor([[1.0], [2.0]])}).tolist()  # in another process, usually
            [1, 2]
            >>> reader.advance(2).tolist(), reader.get(torch.arange(3))["obs"].squeeze(1).tolist()
            ([1, 2], [0.0, 1.0, 2.0])
        """
        data = dict(data)
        capacities = {t.shape[0] if t.dim() else 0 for t in data.values()}
        if not data or len(capacities) != 1 or 0 in capacities:
            shapes = {format_key(k): tuple(t.shape) for k, t in data.items()}
            raise ValueError(
                f"{name}: TensorStorage.over needs tensors with one common leading size > 0, got shapes {shapes}"
            )
        capacity = capacities.pop()
        if not (0 <= cursor < capacity and 0 <= size <= capacity):
            raise ValueError(
                f"{name}: TensorStorage.over needs 0 <= cursor < {capacity} and 0 <= size <= {capacity}, "
                f"got cursor {cursor!r}, size {size!r}"
            )
        devices = {t.device for t in data.values()}
        if len(devices) != 1:
            found = sorted(map(str, devices))
            raise ValueError(f"{name}: TensorStorage.over needs the tensors on one device, got {found}")
        storage = cls(capacity, device=devices.pop(), name=name)
        storage._data, storage._keys = data, tuple(data)
        storage._cursor, storage._size = int(cursor), int(size)
        return storage

    def share_memory_(self) -> TensorStorage:
        """Move the rows to shared memory, in place (:attr:`data` keeps the same tensors), so that
        another process may write them (see :meth:`over`). In-memory CPU storage only; returns
        ``self``."""
        if not self._data:
            raise ValueError(f"{self._name}.share_memory_: nothing allocated yet; call extend() first")
        if self._memmap or self._device.type != "cpu":
            where = "memory-mapped files" if self._memmap else f"device {self._device}"
            raise ValueError(f"{self._name}.share_memory_: needs rows in CPU memory, these are in {where}")
        for tensor in self._data.values():
            tensor.share_memory_()
        return self

    def check_rows(self, rows: Mapping[Key, torch.Tensor], *, where: str) -> None:
        """Raise unless ``rows`` (tuple key -> ``[n, *row_shape]``) have exactly the stored keys,
        row shapes and dtypes; ``where`` names the caller in the error (``"<name>.<where>: ..."``)."""
        if not self._data:
            raise ValueError(f"{self._name}.{where}: nothing allocated yet; call extend() first")
        if tuple(rows) != self._keys and set(rows) != set(self._keys):
            missing = sorted(format_key(k) for k in set(self._keys) - set(rows))
            extra = sorted(format_key(k) for k in set(rows) - set(self._keys))
            raise KeyError(
                f"{self._name}.{where}: keys must match the stored ones; missing {missing}, unexpected {extra}"
            )
        for key, row in rows.items():
            stored = self._data[key]
            if row.shape[1:] != stored.shape[1:] or row.dtype != stored.dtype:
                raise ValueError(
                    f"{self._name}.{where}: key {format_key(key)!r} expects rows of shape "
                    f"{tuple(stored.shape[1:])} and dtype {stored.dtype}, got {tuple(row.shape[1:])} {row.dtype}"
                )

    def extend(self, rows: Mapping[Key, torch.Tensor]) -> torch.Tensor:
        """Write ``rows`` (same leading size ``n`` for every key) at the cursor, wrapping around.

        If ``n > capacity`` only the last ``capacity`` rows are kept (the others would be
        overwritten by this same call).

        Args:
            rows: tuple key -> tensor ``[n, *row_shape]``; the first call fixes keys, shapes, dtypes.

        Returns:
            int64 tensor (CPU) of the positions written, in row order.
        """
        if not rows:
            raise KeyError(f"{self._name}.extend: no tensor entries to store")
        sizes = {row.shape[0] if row.dim() else -1 for row in rows.values()}
        if len(sizes) != 1 or -1 in sizes:
            raise ValueError(f"{self._name}.extend: every key needs the same number of rows, got sizes {sizes}")
        if not self._data:
            self._allocate(rows)
        else:
            self.check_rows(rows, where="extend")
        n = sizes.pop()
        cap = self._capacity
        start = self._cursor
        if n > cap:
            start = (start + n - cap) % cap
            rows = {key: row[n - cap :] for key, row in rows.items()}
            n = cap
        end = start + n
        for key, row in rows.items():
            dest = self._data[key]
            if end <= cap:
                dest[start:end].copy_(row)
            else:
                split = cap - start
                dest[start:].copy_(row[:split])
                dest[: end - cap].copy_(row[split:])
        self._cursor = end % cap
        self._size = min(self._size + n, cap)
        index = torch.arange(start, end, dtype=torch.int64)
        return index if end <= cap else index.remainder_(cap)

    def advance(self, n: int) -> torch.Tensor:
        """Count ``n`` rows that were written straight into :attr:`data` at the cursor (by another
        process sharing it, see :meth:`over` and :class:`engine_rl.replay.SharedReplayBuffer`): move the
        cursor and size as :meth:`extend` would, without copying. Returns their positions.

        Examples:
            >>> storage = TensorStorage(3)
            >>> _ = storage.extend({("obs",): torch.zeros(1, 1)})
            >>> storage.data[("obs",)][1:3] = torch.tensor([[5.0], [6.0]])  # a writer fills rows 1, 2
            >>> storage.advance(2).tolist(), len(storage), storage.cursor
            ([1, 2], 3, 0)
        """
        n = int_in(n, 0, self._capacity, name="n", owner=f"{self._name}.advance")
        if not self._data:
            raise ValueError(f"{self._name}.advance: nothing allocated yet; call extend() first")
        start, end = self._cursor, self._cursor + int(n)
        self._cursor = end % self._capacity
        self._size = min(self._size + int(n), self._capacity)
        index = torch.arange(start, end, dtype=torch.int64)
        return index if end <= self._capacity else index.remainder_(self._capacity)

    def get(self, index: torch.Tensor, *, extra: Mapping[str, torch.Tensor] | None = None) -> TensorDict:
        """Gather rows ``index`` into a TensorDict of batch size ``[len(index)]`` on :attr:`device`.

        Args:
            index: int64 positions (any device) below ``len(self)``; not range-checked here.
            extra: more top-level entries of the same batch size to put in the result.
        """
        if not self._data:
            raise ValueError(f"{self._name}.get: nothing stored yet; call extend() first")
        storage_device = next(iter(self._data.values())).device
        if index.device != storage_device:
            index = index.to(storage_device)
        out = nest_keys({key: torch.index_select(t, 0, index) for key, t in self._data.items()})
        if extra:
            out.update(extra)
        return TensorDict(out, batch_size=index.shape, device=self._device)

    def state_dict(self) -> dict[str, Any]:
        """Cursor, size and the filled rows as a nested dict of tensors (string keys).

        The tensors are views of the storage, not copies (like ``nn.Module.state_dict``), so
        saving does not double memory; for memmap storage they are the memory-mapped tensors
        themselves (as plain ``torch.Tensor``). ``torch.save`` writes a view's whole underlying
        buffer, i.e. all ``capacity`` rows. Save the state before writing more rows.
        """
        data = {key: t[: self._size] for key, t in self._data.items()}
        return {"capacity": self._capacity, "cursor": self._cursor, "size": self._size, "data": nest_keys(data)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore rows, cursor and size; allocates from the saved shapes if nothing is stored yet."""
        if state_dict["capacity"] != self._capacity:
            raise ValueError(
                f"{self._name}.load_state_dict: capacity {state_dict['capacity']} != this storage's {self._capacity}"
            )
        size, cursor = int(state_dict["size"]), int(state_dict["cursor"])
        if not (0 <= size <= self._capacity and 0 <= cursor < self._capacity):
            raise ValueError(f"{self._name}.load_state_dict: bad size {size} or cursor {cursor}")
        rows = flatten_keys(state_dict["data"])
        if rows:
            if not self._data:
                self._allocate(rows)
            else:
                self.check_rows(rows, where="load_state_dict")
            for key, row in rows.items():
                if row.shape[0] != size:
                    raise ValueError(
                        f"{self._name}.load_state_dict: key {format_key(key)!r} has {row.shape[0]} rows, size is {size}"
                    )
                dest = self._data[key][:size]
                if dest.data_ptr() != row.data_ptr() or dest.device != row.device:
                    dest.copy_(row)
        elif size:
            raise ValueError(f"{self._name}.load_state_dict: size is {size} but data is empty")
        self._size, self._cursor = size, cursor
