"""Replay-buffer micro-benchmark: extend, sample(256) and update_priority(256) costs.

Two item shapes: CartPole-like transitions at 100k rows, and torchrl's replay benchmark item
``{"a": f32[5], ("b", "c"): u8[3, 32, 32]}`` at 10k rows. Operations are interleaved round by
round (so machine noise hits them alike) and each figure is the median over rounds of the mean
per-call time in microseconds. The baseline is plain TensorDict row indexing of a same-sized
TensorDict (``td[idx]``), i.e. what a buffer gather would cost done the obvious way.

Run: ``python tests/benchmarks/replay.py [--quick]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from engine_rl.replay import PrioritizedSampler, ReplayBuffer

BATCH = 256
EXTEND_ROWS = 1000
TARGET_PRIORITIZED_SAMPLE_US = 1000.0


def cartpole_items(n: int) -> TensorDict:
    flags = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.randn(n, 4),
            "action": torch.randint(0, 2, (n,)),
            "next": {
                "observation": torch.randn(n, 4),
                "reward": torch.ones(n, 1),
                "done": flags,
                "terminated": flags.clone(),
                "truncated": flags.clone(),
            },
        },
        batch_size=[n],
    )


def pixel_items(n: int) -> TensorDict:
    return TensorDict(
        {"a": torch.randn(n, 5), "b": {"c": torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)}},
        batch_size=[n],
    )


def filled(make: Callable[[int], TensorDict], size: int, **kwargs) -> ReplayBuffer:
    buf = ReplayBuffer(size, seed=0, **kwargs)
    for start in range(0, size, 10_000):
        buf.extend(make(min(10_000, size - start)))
    return buf


def scenario(make: Callable[[int], TensorDict], size: int, *, memmap: bool) -> dict[str, Callable[[], object]]:
    """The timed operations for one item shape, each a zero-argument callable."""
    uniform = filled(make, size)
    prioritized = filled(make, size, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, beta_annealing_steps=10**6))
    sample = prioritized.sample(BATCH)
    index, td_error = sample["index"], torch.rand(BATCH)
    prioritized.update_priority(index, td_error)
    reference = make(size)  # the same rows as one TensorDict: the obvious gather
    rows = make(EXTEND_ROWS)
    generator = torch.Generator().manual_seed(0)
    ops = {
        f"extend_{EXTEND_ROWS}_prioritized": lambda: prioritized.extend(rows),
        f"prioritized_sample_{BATCH}": lambda: prioritized.sample(BATCH),
        f"prioritized_update_{BATCH}": lambda: prioritized.update_priority(index, td_error),
        f"uniform_sample_{BATCH}": lambda: uniform.sample(BATCH),
        f"tensordict_index_{BATCH}": lambda: reference[torch.randint(size, (BATCH,), generator=generator)],
    }
    if memmap:
        on_disk = filled(make, size, storage="memmap")
        ops[f"memmap_uniform_sample_{BATCH}"] = lambda: on_disk.sample(BATCH)
    return ops


def measure(ops: dict[str, Callable[[], object]], *, rounds: int, calls: int) -> dict[str, float]:
    """Median over ``rounds`` of the mean µs per call; operations interleaved within each round."""
    for op in ops.values():  # warm-up
        op()
    times: dict[str, list[float]] = {name: [] for name in ops}
    names = list(ops)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order each round
            op = ops[name]
            start = time.perf_counter()
            for _ in range(calls):
                op()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: round(statistics.median(values), 1) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls (~10 s)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rounds, calls = (5, 20) if args.quick else (21, 100)

    cartpole = measure(scenario(cartpole_items, 100_000, memmap=False), rounds=rounds, calls=calls)
    pixels = measure(scenario(pixel_items, 10_000, memmap=True), rounds=rounds, calls=calls)

    prioritized, uniform = f"prioritized_sample_{BATCH}", f"uniform_sample_{BATCH}"
    baseline = f"tensordict_index_{BATCH}"

    def ratio(figures: dict[str, float], a: str, b: str) -> float:
        return round(figures[a] / figures[b], 2)

    result = {
        "benchmark": "replay",
        "quick": args.quick,
        "unit": "us_per_call",
        "rounds": rounds,
        "calls_per_round": calls,
        "cartpole_100k": cartpole,
        "pixels_10k": pixels,
        "ratios": {
            "cartpole_prioritized_over_uniform_sample": ratio(cartpole, prioritized, uniform),
            "cartpole_uniform_sample_over_tensordict_index": ratio(cartpole, uniform, baseline),
            "pixels_prioritized_over_uniform_sample": ratio(pixels, prioritized, uniform),
            "pixels_uniform_sample_over_tensordict_index": ratio(pixels, uniform, baseline),
            "pixels_memmap_over_memory_uniform_sample": ratio(pixels, f"memmap_{uniform}", uniform),
        },
        "target_prioritized_sample_256_us": TARGET_PRIORITIZED_SAMPLE_US,
        "meets_target": max(cartpole[prioritized], pixels[prioritized]) <= TARGET_PRIORITIZED_SAMPLE_US,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
