"""Data-parallel throughput: ``engine-rl train RECIPE --nproc 2`` vs one process (gloo, CPU).

Run ``python tests/benchmarks/distributed.py [--quick]``; prints one JSON line. For each recipe
(ppo-cartpole, dqn-cartpole) the same global frame budget is trained by one process and by two
(each rank then collects half the frames and runs the same optim steps per batch on averaged
gradients), repetitions interleaved, each a new ``python -m engine_rl`` command with
``--threads 1``. Figures are medians over the repetitions:

- ``fps_1``, ``fps_2``: frames/s of all ranks together, over the training loop (``wall_time_s``
  of the summary: process start-up and recipe building excluded; they are in ``startup_s_*``);
- ``optim_steps_per_s_1``, ``_2``: optim steps/s of one rank (in the 2-process run each step
  uses the averaged gradients of both ranks' samples);
- ``scaling_efficiency`` = ``fps_2 / (2 * fps_1)``: 1.0 is perfect weak scaling (each rank keeps
  the single-process rate); ``step_rate_ratio`` = ``optim_steps_per_s_2 / optim_steps_per_s_1``.

Also ``allreduce_us``: median latency of one gloo all-reduce between two processes here, for
1 float (a frame count) and for PPO's gradient buffer (the 2x64x64 actor-critic, 9,155 floats),
the per-optim-step cost of :class:`engine_rl.distributed.GradientAllReduce`.

On the 2-core development box shared with other jobs, two ranks compete with each other and
with everything else for the cores: efficiency there says little about a real multi-core or
multi-GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

RECIPES = {
    # frames: (full, quick); evaluations reduced to one short one at the end
    "ppo-cartpole": ((20_480, 8_192), ["--set", "eval_every=100000", "--set", "eval_episodes=1"]),
    "dqn-cartpole": ((8_192, 4_096), ["--set", "eval_every=100000", "--set", "eval_episodes=1",
                                      "--set", "learning_starts=1024"]),
}
PPO_GRAD_FLOATS = 9_155


def train_once(recipe: str, nproc: int, frames: int, extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "engine_rl", "train", recipe, "--frames", str(frames), "--seed", "0",
               "--out", out, "--no-progress", "--threads", "1", "--nproc", str(nproc), *extra]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        start = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
        total = time.perf_counter() - start
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
        summary = json.loads(res.stdout.strip().splitlines()[-1])
    wall = summary["wall_time_s"]
    return {"fps": summary["frames"] / wall, "optim_steps_per_s": summary["optim_steps"] / wall,
            "startup_s": total - wall}


def _allreduce_worker(local_rank: int, out: str, reps: int) -> None:
    import ignite.distributed as idist

    torch.set_num_threads(1)
    figures = {}
    for name, numel in (("1_float", 1), ("ppo_grads", PPO_GRAD_FLOATS)):
        x = torch.ones(numel)
        for _ in range(20):
            idist.all_reduce(x)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            idist.all_reduce(x)
            times.append(time.perf_counter() - start)
        figures[name] = round(statistics.median(times) * 1e6, 1)
    if idist.get_rank() == 0:
        Path(out).write_text(json.dumps(figures))


def allreduce_latency(reps: int) -> dict[str, float]:
    from engine_rl.run.launch import run_parallel

    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "allreduce.json")
        run_parallel(_allreduce_worker, out, reps, nproc_per_node=2, backend="gloo")
        return json.loads(Path(out).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames and repetitions")
    args = parser.parse_args()
    reps = 1 if args.quick else 3
    result: dict[str, object] = {"benchmark": "distributed", "quick": args.quick, "repetitions": reps,
                                 "backend": "gloo", "cpu_count": os.cpu_count()}
    for recipe, ((full, quick), extra) in RECIPES.items():
        frames = quick if args.quick else full
        runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
        for _ in range(reps):  # interleaved: 1, 2, 1, 2, ...
            for nproc in (1, 2):
                runs[nproc].append(train_once(recipe, nproc, frames, extra))
        med = {n: {k: statistics.median(r[k] for r in runs[n]) for k in runs[n][0]} for n in runs}
        result[recipe] = {
            "frames": frames,
            "fps_1": round(med[1]["fps"], 1), "fps_2": round(med[2]["fps"], 1),
            "optim_steps_per_s_1": round(med[1]["optim_steps_per_s"], 1),
            "optim_steps_per_s_2": round(med[2]["optim_steps_per_s"], 1),
            "scaling_efficiency": round(med[2]["fps"] / (2 * med[1]["fps"]), 3),
            "step_rate_ratio": round(med[2]["optim_steps_per_s"] / med[1]["optim_steps_per_s"], 3),
            "startup_s_1": round(med[1]["startup_s"], 2), "startup_s_2": round(med[2]["startup_s"], 2),
        }
    result["allreduce_us"] = allreduce_latency(200 if args.quick else 1000)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
