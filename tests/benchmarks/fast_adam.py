"""Benchmark: one optimizer step of ``torch.optim.Adam(fused=True)`` vs :class:`engine_rl.optim.FastAdam`.

On the dqn-cartpole Q network (4-256-256-2, 67k parameters) with fixed gradients, one torch
thread, µs per step; the two are interleaved (A, B, B, A, ...) and repeated, medians reported.
Both run the same fused kernel; the difference is ``Optimizer.step``'s generic Python around it.
``speedup`` is torch's time / FastAdam's. Usage:
``python tests/benchmarks/fast_adam.py [--reps N] [--quick]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

def adam_step_us(kind: str, steps: int) -> float:
    from engine_rl.algos.networks import mlp
    from engine_rl.optim import FastAdam

    torch.manual_seed(0)
    net = mlp(4, 2, (256, 256))
    for p in net.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, fused=True) if kind == "torch" else FastAdam(
        net.parameters(), lr=1e-4)
    for _ in range(20):
        opt.step()
    start = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - start) / steps * 1e6


def interleaved(fn, kinds: tuple[str, str], reps: int) -> dict[str, list]:
    runs: dict[str, list] = {k: [] for k in kinds}
    for rep in range(reps):
        for kind in kinds if rep % 2 == 0 else kinds[::-1]:
            runs[kind].append(fn(kind))
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    args = p.parse_args()
    torch.set_num_threads(1)
    steps = 200 if args.quick else 3000

    runs = interleaved(lambda k: adam_step_us(k, steps), ("torch", "fast"), args.reps)
    med = statistics.median
    out = {
        "benchmark": "fast_adam", "threads": 1, "reps": args.reps, "params": 67_586,
        "torch_fused_us": round(med(runs["torch"]), 1), "fast_adam_us": round(med(runs["fast"]), 1),
        "speedup": round(med(runs["torch"]) / med(runs["fast"]), 2),
        "runs_us": {k: [round(v, 1) for v in vs] for k, vs in runs.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
