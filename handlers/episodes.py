"""Training-episode statistics and throughput, published in ``state.metrics``."""

from __future__ import annotations

import time

import torch
from ignite.engine import Engine, Events
from tensordict import TensorDictBase

from engine_rl.engine import MASK_KEY
from engine_rl.events import RLEvents
from engine_rl.keys import require_keys

__all__ = ["EpisodeStats", "Throughput", "finished_episodes"]

_DONE = ("next", "done")
_RETURN = ("next", "episode_return")
_LENGTH = ("next", "episode_length")


def finished_episodes(batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns and lengths of the episodes that ended in ``batch`` (masked frames ignored).

    Examples:
        >>> from tensordict import TensorDict
        >>> b = TensorDict({("next", "done"): torch.tensor([False, True, True]),
        ...                 ("next", "episode_return"): torch.tensor([1.0, 2.0, 5.0]),
        ...                 ("next", "episode_length"): torch.tensor([1, 2, 5])}, [3])
        >>> finished_episodes(b)
        (tensor([2., 5.]), tensor([2, 5]))
    """
    require_keys(batch, (_DONE, _RETURN, _LENGTH), consumer="EpisodeStats")
    done = batch[_DONE].reshape(batch.shape)
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        done = done & mask.reshape(batch.shape)
    return batch[_RETURN].reshape(batch.shape)[done], batch[_LENGTH].reshape(batch.shape)[done]


class EpisodeStats:
    """On ``BATCH_COLLECTED``: mean/std return and mean length of the episodes that finished in
    the batch, as ``train_return_mean``, ``train_return_std``, ``train_length_mean``, plus the
    running count ``episodes``. Batches in which no episode ended leave the last values.
    """

    def __init__(self) -> None:
        self.episodes = 0

    def attach(self, engine: Engine, *, every: int = 1) -> EpisodeStats:
        engine.add_event_handler(RLEvents.BATCH_COLLECTED(every=every), self)
        return self

    def __call__(self, engine: Engine) -> None:
        returns, lengths = finished_episodes(engine.state.batch)
        n = int(returns.numel())
        if n == 0:
            return
        self.episodes += n
        m = engine.state.metrics
        m["train_return_mean"] = float(returns.mean())
        m["train_return_std"] = float(returns.std(unbiased=False)) if n > 1 else 0.0
        m["train_length_mean"] = float(lengths.float().mean())
        m["episodes"] = self.episodes

    def state_dict(self) -> dict[str, int]:
        return {"episodes": self.episodes}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.episodes = int(state["episodes"])


class Throughput:
    """On ``ITERATION_COMPLETED``: ``fps`` (frames/s) and ``optim_steps_per_s`` over the last
    ``every`` iterations, and ``utd`` (optim steps per collected frame, cumulative)."""

    def __init__(self) -> None:
        self._last: tuple[float, int, int] | None = None

    def attach(self, engine: Engine, *, every: int = 1) -> Throughput:
        engine.add_event_handler(Events.STARTED, self._start)
        engine.add_event_handler(Events.ITERATION_COMPLETED(every=every), self)
        return self

    def _start(self, engine: Engine) -> None:
        s = engine.state
        self._last = (time.perf_counter(), s.frames, s.optim_steps)

    def __call__(self, engine: Engine) -> None:
        s = engine.state
        now = time.perf_counter()
        if self._last is None:
            self._last = (now, s.frames, s.optim_steps)
            return
        t0, f0, o0 = self._last
        dt = max(now - t0, 1e-9)
        s.metrics["fps"] = (s.frames - f0) / dt
        s.metrics["optim_steps_per_s"] = (s.optim_steps - o0) / dt
        s.metrics["utd"] = s.optim_steps / max(s.frames, 1)
        self._last = (now, s.frames, s.optim_steps)
