"""Replay handlers: fill a buffer with collected batches, sample from it, update its priorities.

Three thin adapters over :class:`engine_rl.replay.ReplayBuffer` (or anything with its
``extend``/``sample``/``update_priority``/``__len__``):

- :class:`ReplayExtender` on ``RLEvents.BATCH_COLLECTED``: ``buffer.extend(state.batch)``.
- :class:`ReplaySampler` on ``RLEvents.SAMPLE_REQUESTED``: ``state.sample = buffer.sample(n)``
  (or the next slice of a block drawn for several optim steps at once).
- :class:`PriorityUpdater` on ``RLEvents.OPTIM_STEP_DONE``:
  ``buffer.update_priority(sample["index"], |sample["td_error"]|)``.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from engine_rl import create_trainer
    >>> from engine_rl.replay import PrioritizedSampler, ReplayBuffer
    >>> net = torch.nn.Linear(1, 1)
    >>> def loss(td):
    ...     err = net(td["observation"]).squeeze(-1) - td["next", "reward"]
    ...     td["td_error"] = err.detach()
    ...     return {"loss": (td["weight"] * err**2).mean()}
    >>> data = [TensorDict({"observation": torch.ones(8, 1), ("next", "reward"): torch.ones(8)}, [8])] * 3
    >>> trainer = create_trainer(data, loss, torch.optim.SGD(net.parameters(), lr=0.1))
    >>> buffer = ReplayBuffer(100, sampler=PrioritizedSampler(), seed=0)
    >>> _ = ReplayExtender(buffer).attach(trainer)
    >>> _ = ReplaySampler(buffer, batch_size=4).attach(trainer)
    >>> _ = PriorityUpdater(buffer).attach(trainer)
    >>> _ = trainer.run(max_epochs=1)
    >>> len(buffer), trainer.state.metrics["replay_size"], trainer.state.sample.batch_size
    (24, 24, torch.Size([4]))
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle
from tensordict import TensorDictBase

from engine_rl.events import RLEvents
from engine_rl.keys import MASK_KEY, NestedKey, require_keys
from engine_rl.replay import PrioritizedSampler
from engine_rl.threads import start_torch_thread
from handlers._attach import add_handler

__all__ = ["PriorityUpdater", "ReplayExtender", "ReplaySampler"]


def _check_buffer(buffer: Any, methods: Sequence[str], owner: str) -> Any:
    missing = [m for m in methods if not callable(getattr(buffer, m, None))]
    if missing:
        raise TypeError(
            f"{owner}: argument buffer must be a replay buffer with {list(methods)}; "
            f"{type(buffer).__name__} lacks {missing}"
        )
    return buffer


class ReplayExtender:
    """Store each collected batch in a replay buffer; put the buffer size in ``state.metrics``.

    On ``RLEvents.BATCH_COLLECTED`` calls ``buffer.extend(engine.state.batch)`` (the buffer
    drops rows whose ``("collector", "mask")`` is False) and sets
    ``engine.state.metrics["replay_size"] = len(buffer)``.

    Args:
        buffer: a :class:`~engine_rl.replay.ReplayBuffer` (or any object with ``extend`` and ``len``).
        keys: keys to store (strings or tuples for nested keys); ``None`` stores every key. The
            mask is always passed along when the batch has it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.replay import ReplayBuffer
        >>> buffer = ReplayBuffer(10)
        >>> extender = ReplayExtender(buffer, keys=["observation"])
        >>> batch = TensorDict({"observation": torch.zeros(2, 3), "log_prob": torch.zeros(2, 3)}, [2, 3])
        >>> extender.extend(batch)
        6
        >>> buffer.sample(1).keys() >= {"observation"}, "log_prob" in buffer.sample(1).keys()
        (True, False)
    """

    def __init__(self, buffer: Any, *, keys: Sequence[NestedKey] | None = None) -> None:
        self.buffer = _check_buffer(buffer, ["extend", "__len__"], "ReplayExtender")
        if keys is not None:
            if isinstance(keys, (str, tuple)) or not keys:
                raise ValueError(
                    f"ReplayExtender: argument keys must be a non-empty list of keys or None, got {keys!r}"
                )
            keys = list(keys)
        self.keys: list[NestedKey] | None = keys

    def extend(self, batch: Any) -> int:
        """Store ``batch`` (its selected keys) and return the buffer's size."""
        if self.keys is not None:
            require_keys(batch, self.keys, consumer="ReplayExtender")
            has_mask = MASK_KEY not in self.keys and MASK_KEY in batch.keys(include_nested=True)
            keep = [*self.keys, MASK_KEY] if has_mask else self.keys
            batch = batch.select(*keep)
        self.buffer.extend(batch)
        return len(self.buffer)

    def __call__(self, engine: Engine) -> None:
        engine.state.metrics["replay_size"] = self.extend(engine.state.batch)

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1
    ) -> RemovableEventHandle:
        """Call :meth:`extend` on ``event`` (every ``every`` batches); returns Ignite's handle."""
        return add_handler(engine, self, event, every, owner="ReplayExtender")


class ReplaySampler:
    """Draw each optim step's sample from a replay buffer.

    On ``RLEvents.SAMPLE_REQUESTED`` sets ``engine.state.sample`` to a sample of ``batch_size``
    rows (with ``"index"`` and ``"weight"``); the trainer's loss then gets it.

    With ``prefetch=K`` the sampler draws ``K * batch_size`` rows in one ``buffer.sample`` call and
    hands them out ``batch_size`` at a time over the next ``K`` optim steps. One large gather costs
    far less than ``K`` small ones, and ``transform`` (if given) sees the whole block at once:
    :meth:`engine_rl.algos.DQNLoss.add_target_values` runs the target network over all ``K``
    samples in a few large forward passes. The rows are the same as ``K`` separate draws would give (a
    :class:`~engine_rl.replay.UniformSampler` draws its positions one after the other from the
    buffer's generator either way). Drawn-ahead rows never outlive the data they came from: the
    block is dropped when a new batch is collected, so every batch's first optim step draws anew.
    A prioritized buffer is refused: its priorities change after every optim step.

    With ``transform_rows=R`` the transform sees the block ``R`` rows at a time, and with
    ``background=True`` it runs on a worker thread, chunk after chunk, while the optim steps
    already train on the chunks done before: the first step waits for the first chunk only,
    which is one sample's rows there.
    On CPU the worker computes on the second core (torch ops release the GIL), and its large
    activations stay out of the learner's caches. The samples are the same either way.

    Args:
        buffer: a :class:`~engine_rl.replay.ReplayBuffer` (or any object with ``sample`` and ``len``).
        batch_size: rows per sample.
        prefetch: optim steps' samples drawn at once (1: one draw per step). Set it to the
            trainer's ``optim_steps_per_batch`` to draw once per batch.
        transform: called on each drawn block (a TensorDict of ``prefetch * batch_size`` rows)
            before it is split; it may add entries in place or return a new TensorDict.
        transform_rows: rows per ``transform`` call: the block is cut into chunks of this many
            rows (a multiple of ``batch_size``; ``None``: the whole block at once).
        background: run ``transform`` on a worker thread (needs ``transform``), and split its
            chunks into samples there too; the first chunk is one sample's rows, so the first step
            of a block waits for those only. Its errors are raised by the :meth:`sample` call that
            needs the chunk.
        keys: the entries each drawn block keeps (``None``: all the buffer's), e.g. a loss's
            ``in_keys`` and ``"index"``; fewer entries cost less to split and to hand out. A key
            the buffer lacks is an error naming it. Handlers that read ``state.sample`` see
            only these (and what ``transform`` and the loss add).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.replay import ReplayBuffer
        >>> buffer = ReplayBuffer(10, seed=0)
        >>> sampler = ReplaySampler(buffer, batch_size=4)
        >>> sampler.sample()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ReplaySampler: the replay buffer is empty, nothing to sample; ... learning_starts=N) ...
        >>> _ = buffer.extend(TensorDict({"observation": torch.zeros(6, 2)}, [6]))
        >>> sampler.sample().batch_size
        torch.Size([4])
        >>> ahead = ReplaySampler(buffer, batch_size=4, prefetch=3)
        >>> [ahead.sample().batch_size[0] for _ in range(4)], ahead.blocks_drawn
        ([4, 4, 4, 4], 2)

        A transform run on a worker thread, two samples' rows at a time:

        >>> def tag(chunk):
        ...     chunk["tagged"] = torch.ones(chunk.batch_size)
        ...     return chunk
        >>> worker = ReplaySampler(buffer, batch_size=2, prefetch=4, transform=tag, transform_rows=4,
        ...                        background=True)
        >>> [bool(worker.sample()["tagged"].all()) for _ in range(4)]
        [True, True, True, True]
        >>> worker.close()
    """

    def __init__(
        self,
        buffer: Any,
        batch_size: int,
        *,
        prefetch: int = 1,
        transform: Callable[[TensorDictBase], TensorDictBase | None] | None = None,
        transform_rows: int | None = None,
        background: bool = False,
        keys: Sequence[NestedKey] | None = None,
    ) -> None:
        self.buffer = _check_buffer(buffer, ["sample", "__len__"], "ReplaySampler")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"ReplaySampler: argument batch_size must be a positive int, got {batch_size!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"ReplaySampler: argument prefetch must be a positive int, got {prefetch!r}")
        if prefetch > 1 and isinstance(getattr(buffer, "sampler", None), PrioritizedSampler):
            raise ValueError(
                f"ReplaySampler: prefetch={prefetch} needs a uniform sampler; the buffer's PrioritizedSampler "
                "changes its priorities after every optim step, so rows drawn ahead would use stale ones "
                "(use prefetch=1)"
            )
        if transform is not None and not callable(transform):
            raise TypeError(f"ReplaySampler: argument transform must be callable or None, got {type(transform).__name__}")
        if transform_rows is not None and (
            isinstance(transform_rows, bool) or not isinstance(transform_rows, int) or transform_rows < 1
            or transform_rows % batch_size
        ):
            raise ValueError(
                f"ReplaySampler: argument transform_rows must be a positive multiple of batch_size ({batch_size}) "
                f"or None, got {transform_rows!r}"
            )
        if background and transform is None:
            raise ValueError("ReplaySampler: background=True runs the transform on a worker thread; give a transform")
        if keys is not None and (isinstance(keys, (str, tuple)) or not keys):
            raise ValueError(f"ReplaySampler: argument keys must be a non-empty list of keys or None, got {keys!r}")
        self.keys: list[NestedKey] | None = None if keys is None else list(keys)
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.transform = transform
        self.transform_rows = transform_rows
        self.background = bool(background)
        self.blocks_drawn = 0
        """Number of ``buffer.sample`` calls so far (one per block of ``prefetch`` samples)."""
        self._queue: list[TensorDictBase] = []  # samples of the current chunk, popped from the end
        self._chunks: deque[TensorDictBase | Future[list[TensorDictBase]]] = deque()  # the block's later chunks
        self._block_batch: int | None = None  # trainer batch the queued rows were drawn in
        self._worker: ThreadPoolExecutor | None = None

    def sample(self) -> Any:
        """The next sample: from the current block, or from a new block drawn when it is used up."""
        if not self._queue:
            if not self._chunks:
                self._chunks = deque(self._draw_block())
            chunk = self._chunks.popleft()
            if isinstance(chunk, Future):
                self._queue = chunk.result()  # waits for the worker; re-raises the transform's error
            else:
                self._queue = self._samples_of(chunk)
        return self._queue.pop()

    def _samples_of(self, chunk: TensorDictBase) -> list[TensorDictBase]:
        """The samples of a chunk, last first (popped from the end: first rows first)."""
        if self.prefetch == 1 or chunk.batch_size[0] == self.batch_size:
            return [chunk]
        return list(chunk.split(self.batch_size))[::-1]

    def _transformed(self, chunk: TensorDictBase) -> TensorDictBase:
        returned = self.transform(chunk)
        return chunk if returned is None else returned

    def _prepared(self, chunk: TensorDictBase) -> list[TensorDictBase]:
        """On the worker: the transformed chunk already split into samples."""
        return self._samples_of(self._transformed(chunk))

    def _draw_block(self) -> list[TensorDictBase | Future[list[TensorDictBase]]]:
        if len(self.buffer) == 0:
            raise ValueError(
                "ReplaySampler: the replay buffer is empty, nothing to sample; collect frames first, "
                f"e.g. create_trainer(..., learning_starts=N) with N >= batch_size ({self.batch_size}) "
                "and a ReplayExtender attached"
            )
        block = self.buffer.sample(self.batch_size * self.prefetch)
        self.blocks_drawn += 1
        if self.keys is not None:
            try:
                block = block.select(*self.keys)
            except KeyError:
                require_keys(block, self.keys, consumer="ReplaySampler (argument keys)")
                raise
        if self.transform is None:
            return [block]
        if not self.background:
            chunks = [block] if self.transform_rows is None else list(block.split(self.transform_rows))
            return [self._transformed(chunk) for chunk in chunks]
        # on the worker: the first sample's rows alone, so the first step waits for them only
        first, rest = block[: self.batch_size], block[self.batch_size:]
        chunks = [first] if rest.batch_size[0] == 0 else [first, *rest.split(self.transform_rows or rest.batch_size[0])]
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ReplaySampler",
                                              initializer=start_torch_thread)
        return [self._worker.submit(self._prepared, chunk) for chunk in chunks]

    def _drop_block(self) -> None:
        """Forget the rows drawn ahead; let the worker finish the chunk it is on (if any)."""
        pending = [c for c in self._chunks if isinstance(c, Future)]
        for future in pending:
            future.cancel()
        if pending:
            wait(pending)  # nothing may still read the networks when the caller changes them
        self._chunks.clear()
        self._queue = []

    def close(self) -> None:
        """Drop the rows drawn ahead and stop the worker thread (if one was started)."""
        self._drop_block()
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    def __call__(self, engine: Engine) -> None:
        iteration = engine.state.iteration  # one collected batch per iteration
        if iteration != self._block_batch:  # new data since the block was drawn
            self._drop_block()
            self._block_batch = iteration
        engine.state.sample = self.sample()

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.SAMPLE_REQUESTED, every: int = 1
    ) -> RemovableEventHandle:
        """Call :meth:`sample` on ``event``; returns Ignite's handle.

        With ``every > 1`` the other optim steps train on the trainer's default sample (the
        whole current batch), which is rarely wanted: keep ``every=1``.
        """
        return add_handler(engine, self, event, every, owner="ReplaySampler")


class PriorityUpdater:
    """Write the loss's TD errors back as priorities of the sampled rows.

    On ``RLEvents.OPTIM_STEP_DONE`` calls
    ``buffer.update_priority(sample["index"], sample[key].abs())``: the loss must have written
    ``key`` into the sample it was given (torchrl's convention; ``engine_rl``'s DQN loss does).

    Args:
        buffer: a :class:`~engine_rl.replay.ReplayBuffer` with a prioritized sampler (with a
            uniform one, the update is a no-op).
        key: the sample's entry holding the TD errors, one per row.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.replay import PrioritizedSampler, ReplayBuffer
        >>> buffer = ReplayBuffer(4, sampler=PrioritizedSampler(alpha=1.0, eps=1e-6), seed=0)
        >>> _ = buffer.extend(TensorDict({"observation": torch.zeros(4, 1)}, [4]))
        >>> sample = buffer.sample(2)
        >>> PriorityUpdater(buffer).update(sample)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        KeyError: "PriorityUpdater needs key(s) ['td_error'] but the TensorDict has [...]; the loss must ..."
        >>> sample["td_error"] = torch.tensor([-3.0, 0.0])
        >>> PriorityUpdater(buffer).update(sample)
        >>> [round(p, 3) for p in buffer.sampler.tree.leaves[sample["index"].numpy()].tolist()]
        [3.0, 0.0]
    """

    def __init__(self, buffer: Any, *, key: NestedKey = "td_error") -> None:
        self.buffer = _check_buffer(buffer, ["update_priority"], "PriorityUpdater")
        if not isinstance(key, (str, tuple)):
            raise TypeError(f"PriorityUpdater: argument key must be a str or a tuple of str, got {type(key).__name__}")
        self.key = key

    def update(self, sample: Any) -> None:
        """``buffer.update_priority(sample["index"], |sample[key]|)``."""
        try:  # the cheap path first; the key check only runs to explain a failure
            index, td_error = sample["index"], sample[self.key]
        except KeyError:
            try:
                require_keys(sample, ["index", self.key], consumer="PriorityUpdater")
            except KeyError as err:
                raise KeyError(
                    f"{err.args[0]}; the loss must write {self.key!r} into the sample it is given"
                ) from None
            raise
        self.buffer.update_priority(index, td_error.detach().abs())

    def __call__(self, engine: Engine) -> None:
        self.update(engine.state.sample)

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.OPTIM_STEP_DONE, every: int = 1
    ) -> RemovableEventHandle:
        """Call :meth:`update` on ``event`` (every ``every`` optim steps); returns Ignite's handle."""
        return add_handler(engine, self, event, every, owner="PriorityUpdater")
