"""Replay handlers: fill a buffer with collected batches, sample from it, update its priorities.

Three thin adapters over :class:`engine_rl.replay.ReplayBuffer` (or anything with its
``extend``/``sample``/``update_priority``/``__len__``):

- :class:`ReplayExtender` on ``RLEvents.BATCH_COLLECTED``: ``buffer.extend(state.batch)``.
- :class:`ReplaySampler` on ``RLEvents.SAMPLE_REQUESTED``: ``state.sample = buffer.sample(n)``.
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

from collections.abc import Sequence
from typing import Any

import torch
from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle

from engine_rl.checks import positive_int
from engine_rl.events import RLEvents
from engine_rl.keys import MASK_KEY, NestedKey, require_keys
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
        return add_handler(engine, self, event, every, owner="ReplayExtender", exclusive=self.buffer,
                           twice="every batch would be stored twice")


class ReplaySampler:
    """Draw each optim step's sample from a replay buffer.

    On ``RLEvents.SAMPLE_REQUESTED`` sets ``engine.state.sample = buffer.sample(batch_size)``
    (rows with ``"index"`` and ``"weight"``); the trainer's loss then gets it.

    Args:
        buffer: a :class:`~engine_rl.replay.ReplayBuffer` (or any object with ``sample`` and ``len``).
        batch_size: rows per sample.
        keys: the entries each sample keeps (``None``: all the buffer's), e.g. a loss's
            ``in_keys`` and ``"index"``. A key the buffer lacks is an error naming it. Handlers
            that read ``state.sample`` see only these (and what the loss adds).
        device: where samples go (the loss's device) when the buffer keeps its rows elsewhere
            (``None``: the buffer's device).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.replay import ReplayBuffer
        >>> buffer = ReplayBuffer(10, seed=0)
        >>> sampler = ReplaySampler(buffer, batch_size=4, keys=["observation", "index"])
        >>> sampler.sample()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ReplaySampler: the replay buffer is empty, nothing to sample; ... learning_starts=N) ...
        >>> _ = buffer.extend(TensorDict({"observation": torch.zeros(6, 2), "reward": torch.zeros(6)}, [6]))
        >>> sample = sampler.sample()
        >>> sample.batch_size, sorted(sample.keys())
        (torch.Size([4]), ['index', 'observation'])
    """

    def __init__(
        self, buffer: Any, batch_size: int, *, keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.buffer = _check_buffer(buffer, ["sample", "__len__"], "ReplaySampler")
        self.device = None if device is None else torch.device(device)
        batch_size = positive_int(batch_size, name="argument batch_size", owner="ReplaySampler")
        if keys is not None and (isinstance(keys, (str, tuple)) or not keys):
            raise ValueError(f"ReplaySampler: argument keys must be a non-empty list of keys or None, got {keys!r}")
        self.batch_size = batch_size
        self.keys: list[NestedKey] | None = None if keys is None else list(keys)

    def sample(self) -> Any:
        """``buffer.sample(batch_size)``, with only ``keys`` when given."""
        if len(self.buffer) == 0:
            raise ValueError(
                "ReplaySampler: the replay buffer is empty, nothing to sample; collect frames first, "
                f"e.g. create_trainer(..., learning_starts=N) with N >= batch_size ({self.batch_size}) "
                "and a ReplayExtender attached"
            )
        sample = self.buffer.sample(self.batch_size)
        if self.keys is not None:
            try:
                sample = sample.select(*self.keys)
            except KeyError:  # explain which key is missing
                require_keys(sample, self.keys, consumer="ReplaySampler (argument keys)")
                raise
        if self.device is not None and sample.device != self.device:
            sample = sample.to(self.device, non_blocking=self.device.type == "cuda")  # host to GPU only
        return sample

    def __call__(self, engine: Engine) -> None:
        engine.state.sample = self.sample()

    def attach(
        self, engine: Engine, *, event: Any = RLEvents.SAMPLE_REQUESTED, every: int = 1
    ) -> RemovableEventHandle:
        """Call :meth:`sample` on ``event``; returns Ignite's handle.

        With ``every > 1`` the other optim steps train on the trainer's default sample (the
        whole current batch), which is rarely wanted: keep ``every=1``.
        """
        return add_handler(engine, self, event, every, owner="ReplaySampler", exclusive=self.buffer,
                           twice="each optim step would draw two samples, one of them wasted")


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
        return add_handler(engine, self, event, every, owner="PriorityUpdater", exclusive=self.buffer,
                           twice="priorities would be written twice per optim step")
