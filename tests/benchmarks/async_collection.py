"""Async vs sync collection: wall time for dqn-cartpole to reach a fixed evaluation return.

Each repetition runs the recipe twice with the same seed, once with ``async_collection=true``
(an :class:`~engine_rl.collectors.AsyncCollector` worker process writes the replay buffer while
the learner optimizes) and once without (collect, then optimize, in one process), alternating
which goes first; a run stops at the first evaluation whose mean greedy return reaches the
target. Medians over repetitions; one JSON line. The forkserver that starts async workers is
warmed up before timing (a one-time ~5 s per process, not per run).

Usage: python tests/benchmarks/async_collection.py [--quick] [--reps N] [--target R] [--frames F]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from functools import partial

import torch
from ignite.engine import Events

from engine_rl.recipes.base import get_recipe
from engine_rl.run.driver import make_config


def warm_forkserver() -> None:
    from torch import nn

    from engine_rl.algos import QValuePolicy
    from engine_rl.collectors import AsyncCollector, make_vec_env
    from engine_rl.replay import SharedReplayBuffer

    collector = AsyncCollector(partial(make_vec_env, "CartPole-v1", 2), QValuePolicy(nn.Linear(4, 2)),
                               frames_per_batch=32, buffer=SharedReplayBuffer(1_000), seed=0)
    with collector:
        next(iter(collector))


def run(mode: str, *, seed: int, target: float, frames: int, eval_every: int) -> dict:
    torch.manual_seed(seed)
    config = make_config("dqn-cartpole", {"async_collection": mode == "async", "seed": seed, "total_frames": frames,
                                          "eval_every": eval_every})
    setup = get_recipe("dqn-cartpole").build(config)
    trainer = setup.trainer
    reached: dict = {}

    @trainer.on(Events.ITERATION_COMPLETED)
    def stop_at_target(engine):
        score = engine.state.metrics.get("eval_return_mean")
        if score is not None and score >= target and not reached:
            reached.update(wall_s=time.perf_counter() - start, frames=engine.state.frames,
                           optim_steps=engine.state.optim_steps, eval_return=score)
            engine.terminate()

    start = time.perf_counter()
    try:
        trainer.run()
    finally:
        setup.close()
    total = time.perf_counter() - start
    assert not multiprocessing.active_children()
    return {"mode": mode, "seed": seed, "reached": bool(reached), "run_wall_s": round(total, 2),
            **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in reached.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--target", type=float, default=450.0,
                        help="eval return to reach (near-solved: lower ones are hit by early flukes)")
    parser.add_argument("--frames", type=int, default=50_000, help="frame budget of a run (its lr schedule length)")
    parser.add_argument("--eval-every", type=int, default=4, help="batches between evaluations")
    args = parser.parse_args()
    reps = 1 if args.quick else args.reps
    torch.set_num_threads(1)
    warm_forkserver()
    runs = []
    for rep in range(reps):
        order = ("sync", "async") if rep % 2 == 0 else ("async", "sync")
        for mode in order:
            runs.append(run(mode, seed=rep, target=args.target, frames=args.frames, eval_every=args.eval_every))

    def median(mode: str, key: str) -> float | None:
        values = [r[key] for r in runs if r["mode"] == mode and r["reached"]]
        return round(statistics.median(values), 2) if values else None

    sync_s, async_s = median("sync", "wall_s"), median("async", "wall_s")
    print(json.dumps({
        "benchmark": "async_collection",
        "recipe": "dqn-cartpole",
        "target_eval_return": args.target,
        "reps": reps,
        "sync_wall_s_median": sync_s,
        "async_wall_s_median": async_s,
        "async_speedup": round(sync_s / async_s, 3) if sync_s and async_s else None,
        "sync_frames_median": median("sync", "frames"),
        "async_frames_median": median("async", "frames"),
        "sync_optim_steps_per_s_median": _rate(runs, "sync"),
        "async_optim_steps_per_s_median": _rate(runs, "async"),
        "reached": {m: sum(r["reached"] for r in runs if r["mode"] == m) for m in ("sync", "async")},
        "runs": runs,
    }))


def _rate(runs: list[dict], mode: str) -> float | None:
    rates = [r["optim_steps"] / r["wall_s"] for r in runs if r["mode"] == mode and r["reached"]]
    return round(statistics.median(rates), 1) if rates else None


if __name__ == "__main__":
    main()
