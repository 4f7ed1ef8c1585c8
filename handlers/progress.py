"""A progress bar counted in frames, with throughput, latest loss and evaluation return."""

from __future__ import annotations

import time
from typing import Any

from ignite.engine import Engine, Events
from tqdm.auto import tqdm

from engine_rl.checks import positive_int

__all__ = ["FramesProgressBar"]


class FramesProgressBar:
    """tqdm bar over ``state.frames`` (``tqdm.auto``: renders in notebooks and terminals).

    The postfix shows frames/s since the run started, the iteration's ``loss`` (first ``loss*``
    entry of ``state.output``) and the latest ``eval_return_mean``. The bar is closed when the
    run completes or terminates.

    Args:
        total_frames: the bar's total (None: an open-ended counter).
        every: refresh every this many iterations.
        disable: turn the bar off (e.g. in CI logs).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> p = torch.nn.Parameter(torch.zeros(()))
        >>> data = [TensorDict({"x": torch.ones(4)}, [4])] * 3
        >>> trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()},
        ...                          torch.optim.SGD([p], lr=0.1))
        >>> bar = FramesProgressBar(12, disable=True).attach(trainer)
        >>> _ = trainer.run(max_epochs=1)
        >>> bar.frames
        12
    """

    def __init__(self, total_frames: int | None = None, *, every: int = 1, disable: bool = False, **tqdm_kwargs: Any):
        self.total_frames = total_frames
        self.every = positive_int(every, name="argument every", owner="FramesProgressBar")
        self.disable = disable
        self.tqdm_kwargs = tqdm_kwargs
        self.frames = 0
        self._bar: Any = None
        self._t0 = 0.0
        self._frames0 = 0

    def attach(self, engine: Engine) -> FramesProgressBar:
        engine.add_event_handler(Events.STARTED, self._open)
        engine.add_event_handler(Events.ITERATION_COMPLETED(every=self.every), self._update)
        for ev in (Events.COMPLETED, Events.TERMINATE):
            engine.add_event_handler(ev, self._close)
        return self

    def _open(self, engine: Engine) -> None:
        self.frames = int(getattr(engine.state, "frames", 0))
        self._frames0 = self.frames
        self._t0 = time.perf_counter()
        self._bar = tqdm(
            total=self.total_frames, initial=self.frames, unit="frame", unit_scale=True,
            dynamic_ncols=True, disable=self.disable, **self.tqdm_kwargs,
        )

    def _update(self, engine: Engine) -> None:
        frames = int(getattr(engine.state, "frames", 0))
        if self._bar is None:
            self._open(engine)
        self._bar.update(frames - self.frames)
        self.frames = frames
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        postfix = {"fps": f"{(frames - self._frames0) / elapsed:.0f}"}
        output = engine.state.output
        if isinstance(output, dict):
            loss = next((v for k, v in output.items() if k.startswith("loss")), None)
            if isinstance(loss, float):
                postfix["loss"] = f"{loss:.3g}"
        eval_return = engine.state.metrics.get("eval_return_mean")
        if eval_return is not None:
            postfix["eval"] = f"{float(eval_return):.1f}"
        self._bar.set_postfix(postfix, refresh=False)

    def _close(self, engine: Engine) -> None:
        if self._bar is not None:
            self._update(engine)
            self._bar.close()
            self._bar = None
