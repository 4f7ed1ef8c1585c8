"""Benchmark: dqn-cartpole's optim step with the fused loss vs autograd's, measured in place.

One run of the recipe (its own handlers: replay sampling with the target network's values on
the worker thread, gradient clipping, target copies, Adam), one torch thread, no periodic
evaluations. Every ``--per`` batches the loss switches between ``DQNLoss(write_gradients=True)``
(:mod:`engine_rl.algos.dqn_fused`: the backward written by hand, outside autograd) and autograd's
path. Both give bitwise the same gradients, so switching does not change the training; timing
both in one run, batch by batch, cancels this box's drift (its speed moves by tens of percent
within minutes, which swamps separate runs). Each batch's figure is its iteration's wall time
(collection and all its optim steps) over its optim steps; ``fused_us``/``autograd_us`` are
medians over the batches, ``ratio`` is ``fused_us / autograd_us``.

Usage: ``python tests/benchmarks/dqn_step.py [--frames N] [--per K] [--seed S] [--quick]``;
prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch


def measure(frames: int, per: int, seed: int) -> dict[str, Any]:
    from ignite.engine import Events

    from engine_rl.recipes import get_recipe
    from engine_rl.recipes.runner import make_config

    config = make_config("dqn-cartpole", {"total_frames": frames, "eval_every": 10**9, "seed": seed})
    setup = get_recipe("dqn-cartpole").build(config)
    trainer, loss = setup.trainer, setup.trainer.loss_module
    per_step: dict[bool, list[float]] = {True: [], False: []}
    mark: dict[str, Any] = {}

    def started(engine: Any) -> None:
        loss.write_gradients = (engine.state.iteration // per) % 2 == 0
        mark["time"], mark["steps"] = time.perf_counter(), engine.state.optim_steps

    def completed(engine: Any) -> None:
        steps = engine.state.optim_steps - mark["steps"]
        if steps:
            per_step[loss.write_gradients].append((time.perf_counter() - mark["time"]) / steps * 1e6)

    trainer.add_event_handler(Events.ITERATION_STARTED, started)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, completed)
    try:
        trainer.run()
    finally:
        setup.close()
    fused, autograd = statistics.median(per_step[True]), statistics.median(per_step[False])
    return {
        "benchmark": "dqn_step", "frames": int(trainer.state.frames), "seed": seed, "switch_every": per,
        "batches": {"fused": len(per_step[True]), "autograd": len(per_step[False])},
        "fused_us": round(fused, 1), "autograd_us": round(autograd, 1), "ratio": round(fused / autograd, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=30_000, help="frames of the run (default 30000)")
    p.add_argument("--per", type=int, default=2, help="batches before each switch (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a 4096-frame run (smoke test)")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(json.dumps(measure(4096 if args.quick else args.frames, args.per, args.seed)))


if __name__ == "__main__":
    main()
