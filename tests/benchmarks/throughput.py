"""PPO training frames/s by env backend: gymnasium sync and async, EnvPool, Ray with 1 and 2 workers.

Run ``python tests/benchmarks/throughput.py [--workloads breakout hopper] [--arms ...] [--reps 2]``;
prints one JSON line (progress to stderr).

Workloads (hyperparameters of the recipe, periodic evaluations off):

- ``breakout``: ``ppo-atari`` (CleanRL's ``ppo_atari``: 8 envs x 128 steps), 10 batches (10,240 frames);
- ``hopper``: ``ppo-mujoco`` on Hopper-v5 with 8 envs x 256 steps (the recipe's 2,048-frame batch spread
  over 8 copies, so that the backends have copies to step in parallel), 10 batches (20,480 frames).

Arms, each ``engine-rl train`` in its own process with one torch thread, repetitions interleaved
(the arm order reversed every other repetition), seed = repetition:

- ``sync``: ``--set vectorization=sync`` (the copies stepped one after another in the trainer's process);
- ``async``: ``--set vectorization=async`` (gymnasium's ``AsyncVectorEnv``, a subprocess per copy);
- ``envpool``: ``--set env_backend=envpool`` (EnvPool's C++ threads; the ``[envpool]`` extra);
- ``ray1``, ``ray2``: ``--set collector=ray --set ray_workers=N`` (Ray actors; the ``[ray]`` extra).

An arm whose extra is not installed is left out and named in ``skipped``. Frames/s is the frames
over the ``time`` of the last ``train`` line of ``metrics.jsonl`` (``trainer.run`` up to the end of
training: collection, updates, logging and checkpoints, not the final evaluation); ``ratio`` is each
arm's median over ``sync``'s.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import REPO, log, timed_run  # noqa: E402

WORKLOADS: dict[str, tuple[str, int, list[str]]] = {
    "breakout": ("ppo-atari", 10_240, []),
    "hopper": ("ppo-mujoco", 20_480, ["--set", "num_envs=8", "--set", "steps_per_env=256"]),
}
ARMS: dict[str, tuple[list[str], str | None]] = {
    "sync": (["--set", "vectorization=sync"], None),
    "async": (["--set", "vectorization=async"], None),
    "envpool": (["--set", "env_backend=envpool"], "envpool"),
    "ray1": (["--set", "collector=ray", "--set", "ray_workers=1"], "ray"),
    "ray2": (["--set", "collector=ray", "--set", "ray_workers=2"], "ray"),
}


def run_arm(workload: str, arm: str, frames: int, seed: int, tmp: Path) -> dict[str, Any]:
    recipe, _, extra = WORKLOADS[workload]
    out = tmp / f"{workload}-{arm}-{seed}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "engine_rl", "train", recipe, "--frames", str(frames), "--seed", str(seed),
           "--threads", "1", "--no-progress", "--out", str(out), "--set", "eval_every=1000000",
           "--set", "eval_episodes=1", *extra, *ARMS[arm][0]]
    _, wall_s, cpu_s = timed_run(cmd, threads=1, cwd=REPO)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [line for line in lines if line["kind"] == "train"][-1]
    if last["frames"] != frames:
        raise SystemExit(f"throughput: {workload} {arm} stopped at {last['frames']} frames, not {frames}")
    return {"fps": frames / last["time"], "train_s": last["time"], "wall_s": wall_s, "cpu_s": cpu_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["breakout", "hopper"])
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument("--reps", type=int, default=2, help="repetitions of each arm, interleaved (default 2)")
    p.add_argument("--frames-scale", type=float, default=1.0, help="multiply the frame budgets (whole batches)")
    args = p.parse_args()
    if args.reps < 1 or args.frames_scale <= 0:
        p.error("--reps must be >= 1 and --frames-scale > 0")
    if "sync" not in args.arms:
        p.error("--arms must include sync (the ratios' baseline)")
    arms = [a for a in args.arms if ARMS[a][1] is None or importlib.util.find_spec(ARMS[a][1]) is not None]
    skipped = [a for a in args.arms if a not in arms]
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="throughput_") as tmp:
        for workload in args.workloads:
            _, budget, _ = WORKLOADS[workload]
            frames = max(1, round(10 * args.frames_scale)) * (budget // 10)
            runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for rep in range(args.reps):
                for arm in arms if rep % 2 == 0 else arms[::-1]:
                    log(f"{workload} rep {rep} {arm}: {frames} frames (load {os.getloadavg()[0]:.2f})")
                    run = run_arm(workload, arm, frames, rep, Path(tmp))
                    log(f"  -> {run['fps']:.1f} frames/s ({run['train_s']:.1f} s)")
                    runs[arm].append(run)
            medians = {arm: statistics.median(r["fps"] for r in runs[arm]) for arm in arms}
            results[workload] = {
                "recipe": WORKLOADS[workload][0], "frames": frames,
                "fps": {arm: round(v, 1) for arm, v in medians.items()},
                "ratio_to_sync": {arm: round(v / medians["sync"], 3) for arm, v in medians.items()},
                "fps_runs": {arm: [round(r["fps"], 1) for r in runs[arm]] for arm in arms},
            }
    print(json.dumps({"benchmark": "throughput", "reps": args.reps, "threads": 1, "cpus": os.cpu_count(),
                      "skipped": skipped, "load_before": round(load_before, 2),
                      "load_after": round(os.getloadavg()[0], 2), **results}))


if __name__ == "__main__":
    main()
