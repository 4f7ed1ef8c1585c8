"""Benchmark: what handing work to the loss worker thread costs, against what it can save.

:mod:`engine_rl.algos.worker` runs part of SAC's and TD3's updates on a second thread. Whether
the same pays for smaller units of work (e.g. parts of a DQN optim step, ~1.3 ms with four
64x256x256 products) depends on the round trip: ``submit`` plus ``result`` of a task that does
nothing. Measured here, one torch thread each, µs per call, the arms interleaved and repeated
(medians):

- ``one_product_us``: one 64x256x256 product (``ROWS``, ``WIDTH``) on this thread;
- ``two_serial_us``: two of them one after the other;
- ``two_parallel_us``: one on the worker while the other runs here (``worker.result_after``);
- ``empty_task_us``: the round trip of a task that does nothing.

``parallel_saving_us`` is ``two_serial - two_parallel``: a task pays only where its work
exceeds about ``empty_task_us``. Usage: ``python tests/benchmarks/thread_handoff.py [--reps N]
[--rows R] [--quick]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

WIDTH = 256


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rows", type=int, default=64, help="rows of each product (default: DQN's batch)")
    p.add_argument("--quick", action="store_true", help="fewer calls (smoke test)")
    args = p.parse_args()
    if args.reps < 1 or args.rows < 1:
        p.error(f"--reps and --rows must be >= 1, got {args.reps} and {args.rows}")
    torch.set_num_threads(1)
    from engine_rl.algos import worker

    calls = 20 if args.quick else 500
    torch.manual_seed(0)
    x, weight = torch.randn(args.rows, WIDTH), torch.randn(WIDTH, WIDTH)

    def product() -> torch.Tensor:
        return x.mm(weight)

    arms: dict[str, Callable[[], object]] = {
        "one_product": product,
        "two_serial": lambda: (product(), product()),
        "two_parallel": lambda: worker.result_after(worker.submit(product), product),
        "empty_task": lambda: worker.submit(int).result(),
    }
    worker.submit(product).result()  # start the thread
    runs: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            runs[name].append(per_call_us(arms[name], calls))
    med = {name: statistics.median(values) for name, values in runs.items()}
    print(json.dumps({
        "benchmark": "thread_handoff", "threads": 1, "reps": args.reps, "calls": calls,
        "product": [args.rows, WIDTH, WIDTH],
        **{f"{name}_us": round(value, 1) for name, value in med.items()},
        "parallel_saving_us": round(med["two_serial"] - med["two_parallel"], 1),
        "parallel_ratio": round(med["two_parallel"] / med["two_serial"], 3),
        "runs_us": {name: [round(v, 1) for v in values] for name, values in runs.items()},
    }))


if __name__ == "__main__":
    main()
