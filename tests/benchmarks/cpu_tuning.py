"""Benchmark: what :class:`engine_rl.optim.FastAdam` and :func:`engine_rl.runtime.tune_allocator` save.

Two side-by-side comparisons, each interleaved (A, B, B, A, ...) and repeated; medians reported.

- ``adam``: one optimizer step of ``torch.optim.Adam(fused=True)`` vs :class:`FastAdam` on the
  dqn-cartpole Q network (4-256-256-2) with fixed gradients, in this process (µs per step).
- ``allocator``: one optim step of the ``sac-pendulum`` recipe (256x256 critics, batch 256: its
  activations are 256 KiB, above glibc's default 128 KiB mmap threshold), each rep a fresh
  process with glibc's default allocator or with :func:`tune_allocator` (ms per step, and the
  minor page faults per step).

``speedup`` is A time / B time (> 1: the tuning helps). Usage:
``python tests/benchmarks/cpu_tuning.py [--reps N] [--quick]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]

_SAC_CHILD = """
import json, resource, sys, time
import torch
torch.set_num_threads(1)
if sys.argv[1] == "tuned":
    from engine_rl.runtime import tune_allocator
    assert tune_allocator()
from engine_rl.recipes import get_recipe
from engine_rl.recipes.runner import make_config
steps = int(sys.argv[2])
trainer = get_recipe("sac-pendulum").build(
    make_config("sac-pendulum", ["total_frames=300", "learning_starts=100", "eval_every_frames=1000000000"])
).trainer
trainer.run()
for _ in range(20):
    trainer._optim_step(None)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
for _ in range(steps):
    trainer._optim_step(None)
ms = (time.perf_counter() - start) / steps * 1e3
print(json.dumps({"ms": ms, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps}))
"""


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


def sac_step(kind: str, steps: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _SAC_CHILD, kind, str(steps)], capture_output=True, text=True,
                          cwd=REPO, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved(fn, kinds: tuple[str, str], reps: int) -> dict[str, list]:
    runs: dict[str, list] = {k: [] for k in kinds}
    for rep in range(reps):
        for kind in kinds if rep % 2 == 0 else kinds[::-1]:
            runs[kind].append(fn(kind))
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    args = p.parse_args()
    torch.set_num_threads(1)
    adam_steps, sac_steps = (200, 20) if args.quick else (3000, 150)

    adam = interleaved(lambda k: adam_step_us(k, adam_steps), ("torch", "fast"), args.reps)
    sac = interleaved(lambda k: sac_step(k, sac_steps), ("default", "tuned"), args.reps)
    med = statistics.median
    out = {
        "benchmark": "cpu_tuning", "threads": 1, "reps": args.reps,
        "adam_us": {"torch_fused": round(med(adam["torch"]), 1), "fast_adam": round(med(adam["fast"]), 1),
                    "speedup": round(med(adam["torch"]) / med(adam["fast"]), 2)},
        "sac_step_ms": {
            "default_malloc": round(med(r["ms"] for r in sac["default"]), 2),
            "tuned_malloc": round(med(r["ms"] for r in sac["tuned"]), 2),
            "speedup": round(med(r["ms"] for r in sac["default"]) / med(r["ms"] for r in sac["tuned"]), 3),
            "faults_per_step": {"default": round(med(r["faults"] for r in sac["default"]), 1),
                                "tuned": round(med(r["faults"] for r in sac["tuned"]), 1)},
            "runs_ms": {k: [round(r["ms"], 2) for r in v] for k, v in sac.items()},
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
