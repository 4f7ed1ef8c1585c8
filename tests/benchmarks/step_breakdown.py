"""Where a recipe's training time goes, measured in place: µs per optim step by phase.

Builds a recipe's trainer (``get_recipe(name).build(config)``: the recipe's own handlers, none
of ``engine-rl train``'s logging or checkpoints), runs it with timers around each phase, and
prints one JSON line:

- ``loss_forward``: the loss module's call (for a loss that computes its gradients itself,
  ``DQNLoss(write_gradients=True)``, their computation too: it has no ``backward``);
- ``backward``: ``Tensor.backward`` (timed through a wrapper installed for the run only);
- ``optimizer_step``: every optimizer's ``step()``;
- ``event:<name>``: the handlers of each of the engine's RL events (``SAMPLE_REQUESTED``: replay
  sampling; ``BACKWARD_COMPLETED``: gradient clipping, NaN guards; ``OPTIM_STEP_DONE``: target
  updates; ``BATCH_COLLECTED``: replay extension, advantages; ...), and of Ignite's own events
  (``ITERATION_STARTED``: schedules; ``ITERATION_COMPLETED``: evaluations);
- ``optim_step_rest``: the rest of the engine's optim step (summing losses, ``zero_grad``);
- ``collection_and_rest``: wall time outside the optim steps and the events (the collector
  stepping envs and the policy, Ignite's loop).

Each figure is its total divided by the number of optim steps, so the phases add up to
``wall_s / optim_steps``; ``share`` gives each as a fraction of the wall time. The timers cost
about a microsecond each. One torch thread unless ``--threads``.

Usage: ``python tests/benchmarks/step_breakdown.py RECIPE [--frames N] [--seed S] [--set
key=value ...] [--threads T]``, e.g. ``python tests/benchmarks/step_breakdown.py dqn-cartpole
--frames 30000``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch


class _Timers:
    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.total[name] += time.perf_counter() - start


def _event_name(event: Any) -> str:
    name = getattr(event, "name", None) or str(event)
    return f"event:{name}"


def instrument(trainer: Any, timers: _Timers) -> contextlib.ExitStack:
    """Wrap the trainer's phases with timers; the returned stack undoes the global patch."""
    loss_module = trainer.loss_module

    def timed_loss(sample: Any) -> Any:
        with timers.phase("loss_forward"):
            return loss_module(sample)

    # the engine calls self.loss_module(sample) and reads in_keys and wrote_gradients from it
    wrapper = type("TimedLoss", (), {
        "__call__": staticmethod(timed_loss),
        "in_keys": getattr(loss_module, "in_keys", None),
        "wrote_gradients": property(lambda _: getattr(loss_module, "wrote_gradients", False)),
    })()
    trainer.loss_module = wrapper

    for opt in trainer.optimizers:
        step = opt.step

        def timed_step(*args: Any, _step: Any = step, **kwargs: Any) -> Any:
            with timers.phase("optimizer_step"):
                return _step(*args, **kwargs)

        opt.step = timed_step

    fire = trainer._fire

    def timed_fire(event: Any, *args: Any, **kwargs: Any) -> Any:
        with timers.phase(_event_name(event)):
            return fire(event, *args, **kwargs)

    trainer._fire = timed_fire
    fire_event = trainer._fire_event

    def timed_fire_event(event: Any, *args: Any, **kwargs: Any) -> Any:
        with timers.phase(_event_name(event)):
            return fire_event(event, *args, **kwargs)

    trainer._fire_event = timed_fire_event
    optim_step = trainer._optim_step

    def timed_optim_step(batch: Any) -> Any:
        with timers.phase("optim_step_total"):
            return optim_step(batch)

    trainer._optim_step = timed_optim_step

    stack = contextlib.ExitStack()
    backward = torch.Tensor.backward

    def timed_backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        with timers.phase("backward"):
            return backward(self, *args, **kwargs)

    torch.Tensor.backward = timed_backward
    stack.callback(setattr, torch.Tensor, "backward", backward)
    return stack


def breakdown(name: str, overrides: list[str], frames: int | None, seed: int) -> dict[str, Any]:
    from engine_rl.recipes import get_recipe
    from engine_rl.recipes.runner import make_config

    if frames is not None:
        overrides = [*overrides, f"total_frames={frames}"]
    config = make_config(name, [*overrides, f"seed={seed}"])
    setup = get_recipe(name).build(config)
    trainer = setup.trainer
    timers = _Timers()
    try:
        with instrument(trainer, timers):
            start = time.perf_counter()
            trainer.run()
            wall = time.perf_counter() - start
    finally:
        for close in setup.closers:
            close()
    steps = max(int(trainer.state.optim_steps), 1)
    total = dict(timers.total)
    in_step = total.pop("optim_step_total", 0.0)
    step_parts = ("loss_forward", "backward", "optimizer_step", "event:SAMPLE_REQUESTED",
                  "event:BACKWARD_COMPLETED", "event:OPTIM_STEP_DONE")
    total["optim_step_rest"] = in_step - sum(total.get(k, 0.0) for k in step_parts)
    # events fired inside optim steps are counted once, under their own names
    outside = wall - in_step - sum(v for k, v in total.items() if k.startswith("event:") and k not in step_parts)
    total["collection_and_rest"] = outside
    # events that took no measurable time per step (no handlers: only the timer's own cost) are left out
    total = {k: v for k, v in total.items() if not k.startswith("event:") or v / steps * 1e6 >= 0.05}
    per_step = {k: round(v / steps * 1e6, 1) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}
    return {
        "benchmark": "step_breakdown", "recipe": name, "overrides": overrides, "seed": seed,
        "frames": int(trainer.state.frames), "optim_steps": steps, "wall_s": round(wall, 2),
        "wall_per_step_us": round(wall / steps * 1e6, 1), "per_step_us": per_step,
        "share": {k: round(v / wall, 3) for k, v in total.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    p.add_argument("--frames", type=int, default=None, help="total frames (default: the recipe's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = breakdown(args.recipe, args.overrides, args.frames, args.seed)
    out["threads"] = args.threads
    print(json.dumps(out))


if __name__ == "__main__":
    main()
