"""Training-episode statistics and throughput, published in ``state.metrics``."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from ignite.engine import Engine, Events
from tensordict import TensorDictBase

from engine_rl.collectors.info import INFO_KEY, check_info_keys
from engine_rl.events import RLEvents
from engine_rl.keys import MASK_KEY, require_keys
from handlers._attach import add_handler

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
    done = _episode_ends(batch)
    return batch[_RETURN].reshape(batch.shape)[done], batch[_LENGTH].reshape(batch.shape)[done]


def _episode_ends(batch: TensorDictBase) -> torch.Tensor:
    """Frames where an episode ended, masked frames excluded (bool, ``batch.shape``)."""
    done = batch[_DONE].reshape(batch.shape)
    mask = batch.get(MASK_KEY, None)
    return done & mask.reshape(batch.shape) if mask is not None else done


class EpisodeStats:
    """On ``BATCH_COLLECTED``: mean/std return and mean length of the episodes that finished in
    the batch, as ``train_return_mean``, ``train_return_std``, ``train_length_mean``, plus the
    running count ``episodes``. Batches in which no episode ended leave the last values;
    ``episodes_ended`` is the number that ended in this batch (0 in those).

    Env ``info`` scalars recorded by the collector (``GymCollector(..., info_keys=...)``, under
    ``("next", "info", key)``) are averaged over the same finished episodes, at their last step,
    as ``train_info_<key>`` (e.g. ``train_info_is_success``); episodes whose last step did not
    report the key are left out of its mean.

    Args:
        info_keys: the recorded info entries to report (each must be in the batch).

    Examples:
        >>> from tensordict import TensorDict
        >>> from types import SimpleNamespace
        >>> batch = TensorDict({("next", "done"): torch.tensor([False, True, True]),
        ...                     ("next", "episode_return"): torch.tensor([1.0, 2.0, 4.0]),
        ...                     ("next", "episode_length"): torch.tensor([1, 2, 4]),
        ...                     ("next", "info", "is_success"): torch.tensor([0.0, 1.0, 0.0])}, [3])
        >>> engine = SimpleNamespace(state=SimpleNamespace(batch=batch, metrics={}))
        >>> EpisodeStats(info_keys=["is_success"])(engine)
        >>> engine.state.metrics["train_return_mean"], engine.state.metrics["train_info_is_success"]
        (3.0, 0.5)
    """

    def __init__(self, *, info_keys: Sequence[str] = ()) -> None:
        self.episodes = 0
        self.info_keys = check_info_keys(info_keys, owner="EpisodeStats")

    def attach(self, engine: Engine, *, every: int = 1) -> EpisodeStats:
        add_handler(engine, self, RLEvents.BATCH_COLLECTED, every, owner=type(self).__name__, exclusive=self,
                    twice="every finished episode would be counted twice")
        return self

    def __call__(self, engine: Engine) -> None:
        returns, lengths = finished_episodes(engine.state.batch)
        n = int(returns.numel())
        engine.state.metrics["episodes_ended"] = n
        if n == 0:
            return
        self.episodes += n
        m = engine.state.metrics
        m["train_return_mean"] = float(returns.mean())
        m["train_return_std"] = float(returns.std(unbiased=False)) if n > 1 else 0.0
        m["train_length_mean"] = float(lengths.float().mean())
        m["episodes"] = self.episodes
        for key, value in self.info_means(engine.state.batch).items():
            m[f"train_info_{key}"] = value

    def info_values(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        """Per info key, its values (float64) at the last step of the episodes finished in
        ``batch``, leaving out the episodes that did not report it."""
        if not self.info_keys:
            return {}
        keys = [(*INFO_KEY, key) for key in self.info_keys]
        require_keys(batch, keys, consumer="EpisodeStats (info_keys; record them with the collector's info_keys)")
        done = _episode_ends(batch)
        out = {}
        for key, nested in zip(self.info_keys, keys):
            values = batch[nested].reshape(batch.shape)[done].double()
            out[key] = values[~torch.isnan(values)]
        return out

    def info_means(self, batch: TensorDictBase) -> dict[str, float]:
        """Mean of each info key over :meth:`info_values` (keys with no value are left out)."""
        means = {}
        for key, values in self.info_values(batch).items():
            if values.numel():
                mean = float(values.mean())
                if math.isfinite(mean):
                    means[key] = mean
        return means

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
        add_handler(engine, self, Events.ITERATION_COMPLETED, every, owner="Throughput", exclusive=self,
                    twice="the second would measure fps over no time")
        engine.add_event_handler(Events.STARTED, self._start)
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
