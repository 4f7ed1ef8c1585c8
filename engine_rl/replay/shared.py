"""A replay buffer that another process appends to while this one samples from it.

:class:`SharedReplayBuffer` is a :class:`~engine_rl.replay.ReplayBuffer` whose storage tensors
live in shared memory. :meth:`SharedReplayBuffer.writer` hands out a :class:`SharedWriter`
(picklable through ``torch.multiprocessing``) that a collector process uses to write rows at
the buffer's cursor; the learner then :meth:`~SharedReplayBuffer.commit`\\ s them: the cursor,
the size and the sampler (priorities) learn about the new rows, which become sampleable.

Protocol (one writer, one reader). Three shared int64 counters: a sequence number, odd while a
write is in progress (a seqlock); the rows written so far; and the row count the write in
progress will reach. A write stores its rows at positions ``cursor + pending`` onwards, which
once the buffer is full are its oldest rows, still sampleable. A sample that overlapped a write
(the sequence number moved) and drew one of the rows that write touched is drawn again, so
samples never hold half-written rows; the writer never waits for the reader. The number of
rows a writer may run ahead of the commits is the caller's to bound (the
:class:`~engine_rl.collectors.AsyncCollector` allows ``max_ahead`` batches).

Both ends are :class:`~engine_rl.replay.TensorStorage` objects over the same shared tensors:
the writer's (:meth:`TensorStorage.over <engine_rl.replay.TensorStorage.over>`) writes rows at
its cursor, the buffer's counts them in with :meth:`TensorStorage.advance
<engine_rl.replay.TensorStorage.advance>`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from engine_rl.keys import MASK_KEY, flatten_keys, format_key, nest_keys
from engine_rl.replay.buffer import ReplayBuffer
from engine_rl.replay.samplers import Sampler
from engine_rl.replay.storage import TensorStorage, batch_rows

__all__ = ["SharedReplayBuffer", "SharedWriter"]

Key = tuple[str, ...]

# slots of the shared counter tensor
_SEQ, _WRITTEN, _WRITING_END, _WRITES = 0, 1, 2, 3
_SLOTS = 4
#: Draws of one sample before giving up on getting one free of rows being written.
_MAX_REDRAWS = 1000
#: Seconds a write may stay in progress before the writer counts as dead mid-write.
_STUCK_S = 2.0


class SharedWriter:
    """The writing end of a :class:`SharedReplayBuffer`, used in another process.

    It holds the buffer's shared storage tensors and counters (``torch.multiprocessing``
    passes them by shared-memory handle) and appends whole batches at the buffer's cursor,
    wrapping around. Build it with :meth:`SharedReplayBuffer.writer`; in the other process,
    rebuild it from its :attr:`parts`.

    Examples:
        >>> buffer = SharedReplayBuffer(8, seed=0)
        >>> _ = buffer.extend(TensorDict({"observation": torch.zeros(2, 1)}, [2]))
        >>> writer = buffer.writer()
        >>> writer.write(TensorDict({"observation": torch.ones(3, 1)}, [3]))
        3
        >>> writer.written, len(buffer)  # written, not yet committed: not sampleable
        (3, 2)
    """

    def __init__(self, data: Mapping[Key, torch.Tensor], counters: torch.Tensor, *, cursor: int) -> None:
        self._counters = counters
        self._written = int(counters[_WRITTEN])
        self._storage = TensorStorage.over(data, cursor=cursor, name="SharedWriter")
        self._np: np.ndarray | None = None

    @property
    def parts(self) -> tuple[dict[Key, torch.Tensor], torch.Tensor, int]:
        """``(data, counters, cursor)``: plain tensors and an int to send to another process
        (which rebuilds the writer with ``SharedWriter(data, counters, cursor=cursor)``), so
        unpickling there needs no class of this module."""
        return self._storage.data, self._counters, self._storage.cursor

    @property
    def written(self) -> int:
        """Rows written through this writer (committed or not)."""
        return self._written

    def write(self, batch: TensorDictBase) -> int:
        """Write every row of ``batch`` (flattened over its batch dims) after the rows already
        written; returns the number of rows.

        Args:
            batch: a TensorDict with exactly the buffer's keys, row shapes and dtypes, and at most
                ``capacity`` rows.
        """
        if self._np is None:
            self._np = self._counters.numpy()
        rows = batch_rows(batch)
        if MASK_KEY in rows:
            raise ValueError(
                f"SharedWriter.write: batches with a {format_key(MASK_KEY)!r} mask cannot be written; "
                "drop masked rows first"
            )
        n = batch.batch_size.numel()
        capacity = self._storage.capacity
        if n > capacity:
            raise ValueError(
                f"SharedWriter.write: a batch of {n} rows does not fit in the buffer's capacity {capacity}"
            )
        # refused before the sequence number turns odd: a refused batch leaves no write in progress
        self._storage.check_rows(rows, where="write")
        counters = self._np
        counters[_WRITING_END] = self._written + n
        counters[_SEQ] += 1  # odd: a write is in progress
        self._storage.extend(rows)
        self._written += n
        counters[_WRITTEN] = self._written
        counters[_WRITES] += 1
        counters[_SEQ] += 1  # even: rows complete
        return n


class SharedReplayBuffer(ReplayBuffer):
    """A :class:`~engine_rl.replay.ReplayBuffer` that a process in shared memory appends to.

    Use it like a ``ReplayBuffer`` (``extend``, ``sample``, priorities, ``state_dict``); in
    addition, :meth:`writer` moves the storage into shared memory and returns the
    :class:`SharedWriter` another process writes with, and :meth:`commit` makes the rows it
    wrote sampleable. Rows live in CPU memory (``storage="memory"``).

    Args:
        capacity: number of rows kept.
        sampler: a :class:`~engine_rl.replay.UniformSampler` (default) or
            :class:`~engine_rl.replay.PrioritizedSampler`.
        seed: seed of the buffer's sampling generator.
        capacity_label: see :class:`~engine_rl.replay.ReplayBuffer`.

    Examples:
        >>> buffer = SharedReplayBuffer(4, seed=0)
        >>> _ = buffer.extend(TensorDict({"observation": torch.zeros(1, 1)}, [1]))  # fixes the layout
        >>> writer = buffer.writer()  # in practice: sent to the collector process
        >>> writer.write(TensorDict({"observation": torch.tensor([[1.0], [2.0]])}, [2]))
        2
        >>> index, writes = buffer.commit()
        >>> index.tolist(), writes, len(buffer)
        ([1, 2], 1, 3)
        >>> sorted(buffer.sample(8)["observation"].squeeze(1).unique().tolist())
        [0.0, 1.0, 2.0]
    """

    def __init__(
        self, capacity: int = 100_000, *, sampler: Sampler | None = None, seed: int | None = None,
        capacity_label: str = "SharedReplayBuffer: capacity",
    ) -> None:
        super().__init__(capacity, sampler=sampler, seed=seed, capacity_label=capacity_label)
        self._counters = torch.zeros(_SLOTS, dtype=torch.int64).share_memory_()
        self._counters_np = self._counters.numpy()
        self._committed = 0  # rows of the current writer already counted in
        self._commits = 0  # writes already counted in
        self._writer_out = False

    @property
    def has_writer(self) -> bool:
        """True between :meth:`writer` and :meth:`close_writer`."""
        return self._writer_out

    @property
    def pending(self) -> int:
        """Rows the writer has finished and :meth:`commit` has not counted in yet."""
        return int(self._counters_np[_WRITTEN]) - self._committed

    def writer(self) -> SharedWriter:
        """Move the storage to shared memory and return a writer appending at the cursor.

        The storage must exist: :meth:`extend` (or :meth:`load_state_dict`) once first, which fixes
        the stored keys, shapes and dtypes. One writer at a time; until :meth:`close_writer`,
        only it writes (``extend`` and ``load_state_dict`` are refused).
        """
        if self._writer_out:
            raise RuntimeError("SharedReplayBuffer.writer: a writer is already out; call close_writer() first")
        if not self.storage.keys:
            raise ValueError(
                "SharedReplayBuffer.writer: nothing allocated yet; extend() once first (it fixes keys, shapes, dtypes)"
            )
        self.storage.share_memory_()  # in place: the storage keeps using the same tensors
        self._counters.zero_()
        self._committed = self._commits = 0
        self._writer_out = True
        return SharedWriter(self.storage.data, self._counters, cursor=self.storage.cursor)

    def close_writer(self) -> int:
        """Forget the writer (its process has stopped). Rows it wrote after the last
        :meth:`commit` are dropped (not counted in). Returns how many were."""
        dropped = self.pending if self._writer_out else 0
        self._writer_out = False
        return dropped

    def _even_seq(self, where: str) -> int:
        """The sequence number once no write is in progress (a write takes microseconds)."""
        counters = self._counters_np
        deadline = None
        while True:
            seq = int(counters[_SEQ])
            if not seq & 1:
                return seq
            if deadline is None:
                deadline = time.monotonic() + _STUCK_S
            elif time.monotonic() > deadline:
                raise RuntimeError(
                    f"SharedReplayBuffer.{where}: the writer stopped in the middle of a write (for over {_STUCK_S} s); "
                    "its process probably died"
                )
            time.sleep(0)

    def _consistent_counters(self) -> tuple[int, int]:
        counters = self._counters_np
        while True:
            seq = self._even_seq("commit")
            written, writes = int(counters[_WRITTEN]), int(counters[_WRITES])
            if seq == int(counters[_SEQ]):
                return written, writes

    def commit(self) -> tuple[torch.Tensor, int]:
        """Count in the rows the writer finished since the last commit: the cursor and size move
        over them and the sampler gets them (with the top priority, if prioritized).

        Returns:
            ``(index, writes)``: int64 positions of the new rows, in write order, and the number
            of :meth:`SharedWriter.write` calls they came from.
        """
        if not self._writer_out:
            raise RuntimeError("SharedReplayBuffer.commit: no writer is out; call writer() first")
        written, writes = self._consistent_counters()
        n = written - self._committed
        if n > self.capacity:
            raise RuntimeError(
                f"SharedReplayBuffer.commit: the writer ran {n} rows ahead of the commits, more than the capacity "
                f"{self.capacity}; rows were overwritten before they were counted in"
            )
        index = self.storage.advance(n) if n else torch.zeros(0, dtype=torch.int64)
        if n:
            self.sampler.extend(index)
        self._committed = written
        new_writes, self._commits = writes - self._commits, writes
        return index, new_writes

    def extend(self, td: TensorDictBase) -> torch.Tensor:
        """:meth:`ReplayBuffer.extend <engine_rl.replay.ReplayBuffer.extend>`; refused while a writer is out."""
        if self._writer_out:
            raise RuntimeError(
                "SharedReplayBuffer.extend: a writer is out and owns the cursor; call close_writer() first"
            )
        return super().extend(td)

    def sample(self, batch_size: int) -> TensorDict:
        """Draw ``batch_size`` committed rows (see :meth:`ReplayBuffer.sample
        <engine_rl.replay.ReplayBuffer.sample>`), none of them half-written."""
        counters = self._counters_np
        for _ in range(_MAX_REDRAWS):
            seq = int(counters[_SEQ])
            td = super().sample(batch_size)
            if seq == int(counters[_SEQ]) and not seq & 1:
                return td
            # a write overlapped the gather: it touched rows [committed, writing_end) of the writer,
            # i.e. positions cursor, cursor + 1, ... (the oldest rows once the buffer is full)
            touched = int(counters[_WRITING_END]) - self._committed
            offset = (td["index"] - self.storage.cursor).remainder_(self.capacity)
            if not bool((offset < touched).any()):
                return td
        raise RuntimeError(
            f"SharedReplayBuffer.sample: {_MAX_REDRAWS} draws in a row hit rows being written; the writer "
            "runs too far ahead of the commits"
        )

    def state_dict(self) -> dict[str, Any]:
        """:meth:`ReplayBuffer.state_dict <engine_rl.replay.ReplayBuffer.state_dict>`; while a
        writer is out, the rows are a copy taken between two writes (not views)."""
        state = super().state_dict()
        if not self._writer_out:
            return state
        counters = self._counters_np
        while True:
            seq = self._even_seq("state_dict")
            rows = {k: v.clone() for k, v in flatten_keys(state["storage"]["data"]).items()}
            if seq == int(counters[_SEQ]):
                break
        state["storage"] = {**state["storage"], "data": nest_keys(rows)}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """:meth:`ReplayBuffer.load_state_dict <engine_rl.replay.ReplayBuffer.load_state_dict>`;
        refused while a writer is out."""
        if self._writer_out:
            raise RuntimeError("SharedReplayBuffer.load_state_dict: a writer is out; call close_writer() first")
        super().load_state_dict(state_dict)

    def __repr__(self) -> str:
        return "Shared" + super().__repr__()
