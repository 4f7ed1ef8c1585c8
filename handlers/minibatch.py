"""On-policy minibatches: shuffled slices of the current batch, reshuffled every optim epoch.

:class:`MinibatchSampler` hangs on ``RLEvents.SAMPLE_REQUESTED`` (puts the next minibatch in
``state.sample``) and ``RLEvents.EPOCH_DONE`` (draws a new permutation). The trainer's
``optim_steps_per_batch`` should be ``frames_per_batch // batch_size`` so that an optim epoch is
one pass over the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ignite.engine import Engine
from tensordict import TensorDictBase

from engine_rl.checks import positive_int
from engine_rl.events import RLEvents
from engine_rl.keys import NestedKey, require_keys
from handlers._attach import add_handler

__all__ = ["MinibatchSampler"]


class MinibatchSampler:
    """Serve the current batch as shuffled minibatches of ``batch_size`` items.

    At the first request after a new batch was collected, the batch is flattened (and reduced
    to ``keys`` if given). Each optim epoch uses one random permutation: minibatch ``i`` is
    items ``perm[i * batch_size : (i + 1) * batch_size]``; leftover items (when the batch size
    does not divide the batch) wait for another epoch's permutation. Asking for more
    minibatches than an epoch holds starts a new permutation. When ``batch_size`` covers the
    whole batch, the sample is the batch itself (order does not change a mean loss), with no
    gather. Permutations come from the sampler's own generator, saved in :meth:`state_dict`.

    With ``whole_rows`` the items are the batch's env rows, each kept whole: a minibatch is
    ``batch_size // T`` rows ``[rows, T]`` of consecutive steps (a recurrent policy replays each
    from its stored state, as sb3-contrib's and CleanRL's recurrent PPO do), so ``batch_size``
    must be a multiple of ``T``.

    Args:
        batch_size: items (frames) per minibatch.
        keys: entries to keep in the samples (e.g. ``loss.in_keys``); ``None``: all.
        seed: the generator's seed (``None``: drawn from torch's global generator).
        whole_rows: serve whole env rows instead of single frames.

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> w = torch.nn.Parameter(torch.zeros(()))
        >>> batch = TensorDict({"x": torch.arange(8.0).reshape(2, 4)}, [2, 4])
        >>> seen = []
        >>> def loss(td):
        ...     seen.append(sorted(td["x"].tolist()))
        ...     return {"loss": w * td["x"].sum()}
        >>> trainer = create_trainer([batch], loss, torch.optim.SGD([w], lr=0.0),
        ...                          num_epochs=2, optim_steps_per_batch=2)
        >>> _ = MinibatchSampler(4, seed=0).attach(trainer)
        >>> _ = trainer.run(max_epochs=1)
        >>> sorted(seen[0] + seen[1]) == sorted(seen[2] + seen[3]) == [float(i) for i in range(8)]
        True
    """

    def __init__(
        self, batch_size: int, *, keys: Sequence[NestedKey] | None = None, seed: int | None = None,
        whole_rows: bool = False,
    ) -> None:
        self.batch_size = positive_int(batch_size, name="argument batch_size", owner="MinibatchSampler")
        self.whole_rows = bool(whole_rows)
        self._items = self.batch_size  # items per minibatch: frames, or rows with whole_rows
        self.keys = list(keys) if keys is not None else None
        if seed is None:
            seed = int(torch.randint(2**62, ()).item())
        self._generator = torch.Generator().manual_seed(seed)
        self._batch_id: int | None = None
        self._source: TensorDictBase | None = None  # the batch the minibatches come from
        self._flat: TensorDictBase | None = None
        self._shuffled: TensorDictBase | None = None
        self._next = 0  # index of the next minibatch in the current permutation

    @property
    def minibatches_per_epoch(self) -> int:
        """Minibatches in one pass over the current batch (0 before the first batch)."""
        if self._flat is None:
            return 0
        return max(self._flat.shape[0] // self._items, 1)

    def _load(self, batch: TensorDictBase, batch_id: int) -> None:
        self._source = batch
        if self.keys is not None:
            require_keys(batch, self.keys, consumer="MinibatchSampler")
            batch = batch.select(*self.keys)
        if self.whole_rows:
            if batch.batch_dims != 2 or self.batch_size % batch.shape[1]:
                raise ValueError(
                    f"MinibatchSampler: whole_rows needs a [num_envs, T] batch and a batch_size that is a multiple "
                    f"of T; got batch shape {tuple(batch.shape)} and batch_size {self.batch_size}"
                )
            self._items = self.batch_size // batch.shape[1]
            self._flat = batch
        else:
            self._flat = batch.reshape(-1)
        self._batch_id = batch_id
        self.reshuffle()

    def reshuffle(self) -> None:
        """Start a new pass with a new permutation."""
        self._next = 0
        flat = self._flat
        if flat is None or flat.shape[0] <= self._items:
            self._shuffled = flat
            return
        perm = torch.randperm(flat.shape[0], generator=self._generator)
        self._shuffled = flat[perm.to(flat.device)]

    def sample(self) -> TensorDictBase:
        """The next minibatch of the current batch."""
        if self._shuffled is None:
            raise RuntimeError("MinibatchSampler: no batch yet; it is loaded at the first SAMPLE_REQUESTED")
        if self._next >= self.minibatches_per_epoch:
            self.reshuffle()
        i = self._next
        self._next += 1
        if self._shuffled.shape[0] <= self._items:
            return self._shuffled
        return self._shuffled[i * self._items : (i + 1) * self._items]

    def _on_sample_requested(self, engine: Engine) -> None:
        state = engine.state
        batch_id = getattr(state, "batches", None)
        # a new batch: another object, or the same object yielded again (a new batch count)
        if state.batch is not self._source or batch_id != self._batch_id:
            self._load(state.batch, batch_id)
        state.sample = self.sample()

    def _on_epoch_done(self, _: Engine) -> None:
        if self._flat is not None:
            self.reshuffle()

    def attach(self, engine: Engine) -> MinibatchSampler:
        """Sample on ``RLEvents.SAMPLE_REQUESTED``, reshuffle on ``RLEvents.EPOCH_DONE``."""
        add_handler(engine, self._on_sample_requested, RLEvents.SAMPLE_REQUESTED, 1, owner="MinibatchSampler",
                    exclusive=self, twice="each optim step would take two minibatches and train on the second")
        engine.add_event_handler(RLEvents.EPOCH_DONE, self._on_epoch_done)
        return self

    def state_dict(self) -> dict[str, Any]:
        """The generator state (a uint8 tensor)."""
        return {"rng_state": self._generator.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "rng_state" not in state_dict:
            raise KeyError("MinibatchSampler.load_state_dict: missing key 'rng_state'")
        self._generator.set_state(state_dict["rng_state"])
