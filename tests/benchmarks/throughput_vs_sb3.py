"""Training throughput, engine_rl vs Stable-Baselines3, on PPO Hopper-v5 and PPO Atari Breakout (same hyperparameters).

Run ``python tests/benchmarks/throughput_vs_sb3.py [--workloads ppo-hopper ppo-atari] [--reps 3]``;
prints one JSON line (progress to stderr).

Arms, one process per run, one torch thread each (``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` too),
repetitions interleaved (sb3, engine, then engine, sb3, ...), seed = repetition:

- ``sb3``: ``tests/benchmarks/sb3_side.py --algo WORKLOAD --eval-episodes 0`` in the SB3 venv of
  ``vs_sb3.py`` (with the ``mujoco`` and ``atari`` packages added on first use); frames/s is
  ``frames / learn_s`` (``model.learn`` only).
- ``engine``: ``engine-rl train ppo-mujoco`` / ``ppo-atari`` with periodic evaluations off;
  frames/s is the frames over the ``time`` of the last ``train`` line of ``metrics.jsonl``
  (``trainer.run`` up to the end of training: collection, updates, logging and checkpoints,
  not the final evaluation).

Same for both: the hyperparameters (CleanRL's, listed in ``sb3_side.py`` and the recipes'
docstrings), the vectorization (Hopper: 1 env; Breakout: 8 envs stepped in the main process),
the frame budget (Hopper 20,480 = 10 batches of 2,048; Breakout 10,240 = 10 batches of 1,024;
``--frames-scale`` multiplies both). ``ratio`` is engine / SB3 frames/s (above 1: engine_rl faster).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import DEFAULT_VENV, REPO, SB3_SIDE, ensure_venv, log, timed_run  # noqa: E402

RECIPES = {"ppo-hopper": "ppo-mujoco", "ppo-atari": "ppo-atari"}
FRAMES = {"ppo-hopper": 20_480, "ppo-atari": 10_240}
SB3_EXTRAS = ["gymnasium[mujoco]", "ale-py==0.12.1", "opencv-python-headless"]


def ensure_extras(py: Path) -> None:
    """The SB3 venv with this environment's mujoco and gymnasium versions, ale-py and OpenCV."""
    check = "import mujoco, ale_py, cv2"
    if subprocess.run([str(py), "-c", check], capture_output=True).returncode == 0:
        return
    import gymnasium
    import mujoco

    log("adding mujoco, ale-py and opencv to the SB3 venv (once)")
    cmd = [str(py), "-m", "pip", "install", "--quiet", f"gymnasium[mujoco]=={gymnasium.__version__}",
           f"mujoco=={mujoco.__version__}", *SB3_EXTRAS[1:]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"throughput_vs_sb3: `{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def run_sb3(py: Path, workload: str, frames: int, seed: int) -> dict[str, Any]:
    cmd = [str(py), str(SB3_SIDE), "--algo", workload, "--frames", str(frames), "--seed", str(seed),
           "--threads", "1", "--eval-episodes", "0"]
    done, _, cpu_s = timed_run(cmd, threads=1, cwd=REPO)
    res = json.loads(done.stdout.strip().splitlines()[-1])
    return {"fps": frames / res["learn_s"], "train_s": res["learn_s"], "cpu_s": cpu_s}


def run_engine(workload: str, frames: int, seed: int, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{workload}-{seed}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "engine_rl", "train", RECIPES[workload], "--frames", str(frames), "--seed", str(seed),
           "--threads", "1", "--no-progress", "--out", str(out), "--set", "eval_every=1000000",
           "--set", "eval_episodes=1"]
    _, _, cpu_s = timed_run(cmd, threads=1, cwd=REPO)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [line for line in lines if line["kind"] == "train"][-1]
    if last["frames"] != frames:
        raise SystemExit(f"throughput_vs_sb3: the engine run stopped at {last['frames']} frames, not {frames}")
    return {"fps": frames / last["time"], "train_s": last["time"], "cpu_s": cpu_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", choices=sorted(RECIPES), default=["ppo-hopper", "ppo-atari"])
    p.add_argument("--reps", type=int, default=3, help="repetitions of each arm, interleaved (default 3)")
    p.add_argument("--frames-scale", type=float, default=1.0, help="multiply the frame budgets (whole batches)")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"the SB3 venv (default {DEFAULT_VENV})")
    args = p.parse_args()
    if args.reps < 1 or args.frames_scale <= 0:
        p.error("--reps must be >= 1 and --frames-scale > 0")
    py = ensure_venv(args.venv)
    ensure_extras(py)
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="throughput_vs_sb3_") as tmp:
        for workload in args.workloads:
            batch = FRAMES[workload] // 10
            frames = max(1, round(10 * args.frames_scale)) * batch
            runs: dict[str, list[dict[str, Any]]] = {"sb3": [], "engine": []}
            for rep in range(args.reps):
                for arm in ("sb3", "engine") if rep % 2 == 0 else ("engine", "sb3"):
                    log(f"{workload} rep {rep} {arm}: {frames} frames (load {os.getloadavg()[0]:.2f})")
                    run = run_sb3(py, workload, frames, rep) if arm == "sb3" else run_engine(workload, frames, rep, Path(tmp))
                    log(f"  -> {run['fps']:.1f} frames/s ({run['train_s']:.1f} s)")
                    runs[arm].append(run)
            sb3 = statistics.median(r["fps"] for r in runs["sb3"])
            eng = statistics.median(r["fps"] for r in runs["engine"])
            results[workload] = {
                "recipe": RECIPES[workload], "frames": frames, "sb3_fps": round(sb3, 1), "engine_fps": round(eng, 1),
                "ratio": round(eng / sb3, 3),
                "sb3_fps_runs": [round(r["fps"], 1) for r in runs["sb3"]],
                "engine_fps_runs": [round(r["fps"], 1) for r in runs["engine"]],
            }
    print(json.dumps({"benchmark": "throughput_vs_sb3", "reps": args.reps, "threads": 1,
                      "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2), **results}))


if __name__ == "__main__":
    main()
