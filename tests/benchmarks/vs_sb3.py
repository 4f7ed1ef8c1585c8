"""engine_rl vs Stable-Baselines3: wall time and evaluation return at rl-zoo's budgets and hyperparameters.

Run ``python tests/benchmarks/vs_sb3.py [--algos dqn ppo sac td3] [--reps N] [--quick]`` (default
``dqn ppo sac``); prints
one JSON line (progress goes to stderr). Target (issue 3): engine_rl at most 0.5x SB3's wall
time at an equal or better evaluation return.

Arms, run one after the other on this machine, in separate processes:

- ``sb3``: Stable-Baselines3 in its own virtual environment (``--venv``, default
  ``~/.cache/engine_rl/sb3-venv``, created on first use with ``pip install torch==2.13.0`` first,
  then ``stable-baselines3`` and this environment's gymnasium version), running
  ``tests/benchmarks/sb3_side.py`` with rl-baselines3-zoo's hyperparameters (listed there).
  Its time is ``model.learn`` plus the final evaluation.
- ``engine``: ``python -m engine_rl train RECIPE --seed S --frames F --threads T --no-progress
  --out TMP`` (recipes ``dqn-cartpole``, ``ppo-cartpole``, ``sac-pendulum``, which carry the same
  rl-zoo values), reading ``summary.json``. Its time is the summary's ``wall_time_s``:
  ``trainer.run()`` with everything ``engine-rl train`` attaches (metrics.jsonl, checkpoints)
  and the final evaluation. The recipes' periodic evaluations are switched off (``--set
  eval_every=...``) so both arms evaluate once, after training (``--keep-evals`` keeps them).

Same for both: frame budget (rl-zoo's n_timesteps: DQN CartPole 50k, PPO CartPole 100k with 8
envs, SAC Pendulum 20k, TD3 Pendulum 20k; ``--quick`` runs a tenth), seed (repetition ``r``
uses seed ``r``), one torch thread (``torch.set_num_threads`` in both, plus ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``),
evaluation protocol (10 deterministic episodes on a 10-copy vector env reset with seed 10000,
copy ``i`` seeded ``10000 + i``, the first episode of each copy counted: identical initial states
on both sides). Known difference: engine_rl's dqn-cartpole collects its 256-frame batches from 32
env copies (``--variant num_envs=1`` runs it on one), SB3 (rl-zoo) from one env; the optim steps
(128 per 256 frames after 1000 frames) and every other value are the same. Neither side runs
threads of its own beyond torch's one.

``--variant KEY=VALUE`` (repeatable) adds a third arm, ``variant``: the engine recipe with those
``--set`` overrides (e.g. ``--variant compile=true``), reported as ``variant_*`` figures next to
the default recipe's.

Repetitions are interleaved per algorithm (sb3, engine[, variant], then reversed, ...) and
medians reported.
``ratio`` is engine / sb3 wall time; ``cpu_ratio`` the same for whole-process CPU seconds
(imports included; steadier than wall time on a shared machine). ``target_met``: ratio <= 0.5
and engine's median evaluation return >= SB3's. The one-minute load average before and after
is in the JSON line: on the 2-core shared box, other processes inflate wall times at random.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SB3_SIDE = Path(__file__).resolve().with_name("sb3_side.py")
DEFAULT_VENV = Path.home() / ".cache" / "engine_rl" / "sb3-venv"
RECIPES = {"dqn": "dqn-cartpole", "ppo": "ppo-cartpole", "sac": "sac-pendulum", "td3": "td3-pendulum"}
FRAMES = {"dqn": 50_000, "ppo": 100_000, "sac": 20_000, "td3": 20_000}
TORCH_PIN = "torch==2.13.0"
NO_EVAL = 10**9


def log(msg: str) -> None:
    print(f"[vs_sb3 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def venv_ready(venv: Path) -> bool:
    """Whether ``venv`` has stable_baselines3 and torch 2.13.0 importable."""
    py = venv_python(venv)
    if not py.is_file():
        return False
    check = "import stable_baselines3, torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)"
    return subprocess.run([str(py), "-c", check], capture_output=True).returncode == 0


def ensure_venv(venv: Path) -> Path:
    """The SB3 venv's python, creating the venv if needed (torch pinned first: no CUDA build)."""
    if venv_ready(venv):
        return venv_python(venv)
    import gymnasium

    log(f"creating the SB3 venv at {venv} (once; a few minutes)")
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv_python(venv)), "-m", "pip", "install", "--quiet", TORCH_PIN],
        [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "stable-baselines3",
         f"gymnasium=={gymnasium.__version__}"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"vs_sb3: creating the SB3 venv failed at `{' '.join(cmd)}` (exit {done.returncode}):\n"
                f"{done.stderr[-2000:]}"
            )
    if not venv_ready(venv):
        raise SystemExit(f"vs_sb3: the venv {venv} was created but cannot import stable_baselines3 with torch 2.13.0")
    return venv_python(venv)


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


def timed_run(cmd: list[str], *, threads: int, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``cmd``; return it with its wall seconds and its CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(threads), cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"vs_sb3: `{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done, wall, cpu


def run_sb3(py: Path, algo: str, frames: int, seed: int, threads: int) -> dict[str, Any]:
    cmd = [str(py), str(SB3_SIDE), "--algo", algo, "--frames", str(frames), "--seed", str(seed),
           "--threads", str(threads)]
    done, proc_s, cpu_s = timed_run(cmd, threads=threads, cwd=REPO)
    res = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": res["learn_s"] + res["eval_s"], "return": res["eval_return_mean"], "proc_s": proc_s,
            "cpu_s": cpu_s, "sb3": res["sb3"]}


def eval_override(algo: str) -> str:
    """``--set`` switching off the recipe's periodic evaluations (the final one stays)."""
    from engine_rl.recipes import get_recipe

    fields = {f.name for f in dataclasses.fields(get_recipe(RECIPES[algo]).config_cls)}
    name = "eval_every_frames" if "eval_every_frames" in fields else "eval_every"
    return f"{name}={NO_EVAL}"


def run_engine(algo: str, frames: int, seed: int, threads: int, tmp: Path, keep_evals: bool,
               overrides: Sequence[str] = ()) -> dict[str, Any]:
    out = tmp / f"{algo}-seed{seed}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "engine_rl", "train", RECIPES[algo], "--frames", str(frames), "--seed", str(seed),
           "--threads", str(threads), "--no-progress", "--out", str(out)]
    if not keep_evals:
        cmd += ["--set", eval_override(algo)]
    for override in overrides:
        cmd += ["--set", override]
    _, proc_s, cpu_s = timed_run(cmd, threads=threads, cwd=REPO)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": summary["wall_time_s"], "return": summary["eval_return_mean"], "proc_s": proc_s,
            "cpu_s": cpu_s, "optim_steps": summary["optim_steps"]}


def available(algos: list[str]) -> tuple[list[str], dict[str, str]]:
    """Algorithms whose engine_rl recipe is registered, and why the others are skipped."""
    from engine_rl.recipes import RECIPES as REGISTERED

    skipped = {a: f"recipe {RECIPES[a]!r} is not registered in engine_rl.recipes (not written yet?)"
               for a in algos if RECIPES[a] not in REGISTERED}
    return [a for a in algos if a not in skipped], skipped


def med(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", nargs="+", choices=sorted(RECIPES), default=["dqn", "ppo", "sac"],
                   help="algorithms to compare (default: issue 3's dqn ppo sac; td3 on request)")
    p.add_argument("--reps", type=int, default=1, help="repetitions of each arm (interleaved; default 1)")
    p.add_argument("--quick", action="store_true", help="a tenth of the frame budgets (smoke test)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on both sides (default 1)")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"the SB3 venv (default {DEFAULT_VENV})")
    p.add_argument("--keep-evals", action="store_true", help="keep the recipes' periodic evaluations")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                   help="add an engine arm with this recipe override (repeatable; all go to one arm)")
    args = p.parse_args()
    if args.reps < 1 or args.threads < 1:
        p.error("--reps and --threads must be >= 1")

    algos, skipped = available(args.algos)
    for algo, why in skipped.items():
        log(f"skipping {algo}: {why}")
    py = ensure_venv(args.venv) if algos else None
    # warm the page cache of both stacks so the first timed run does not pay for cold imports
    if py is not None:
        subprocess.run([str(py), "-c", "import stable_baselines3"], capture_output=True)
    subprocess.run([sys.executable, "-c", "import engine_rl.recipes"], capture_output=True, cwd=REPO,
                   env=child_env(args.threads))

    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    sb3_version = None
    with tempfile.TemporaryDirectory(prefix="vs_sb3_") as tmp:
        for algo in algos:
            frames = FRAMES[algo] // (10 if args.quick else 1)
            arms = ["sb3", "engine"] + (["variant"] if args.variant else [])
            runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for rep in range(args.reps):
                order = arms if rep % 2 == 0 else arms[::-1]
                for arm in order:
                    log(f"{algo} rep {rep} {arm}: {frames} frames, seed {rep} (load {os.getloadavg()[0]:.2f})")
                    if arm == "sb3":
                        run = run_sb3(py, algo, frames, rep, args.threads)
                    else:
                        overrides = args.variant if arm == "variant" else []
                        run = run_engine(algo, frames, rep, args.threads, Path(tmp), args.keep_evals, overrides)
                    log(f"  -> wall {run['wall_s']:.1f}s, cpu {run['cpu_s']:.1f}s, return {run['return']:.1f}")
                    runs[arm].append(run)
            sb3, eng = runs["sb3"], runs["engine"]
            sb3_version = sb3[0]["sb3"]
            ratio = med(eng, "wall_s") / med(sb3, "wall_s")
            results[algo] = {
                "env": "Pendulum-v1" if algo == "sac" else "CartPole-v1",
                "frames": frames,
                "sb3_wall_s": round(med(sb3, "wall_s"), 2),
                "engine_wall_s": round(med(eng, "wall_s"), 2),
                "ratio": round(ratio, 3),
                "sb3_cpu_s": round(med(sb3, "cpu_s"), 2),
                "engine_cpu_s": round(med(eng, "cpu_s"), 2),
                "cpu_ratio": round(med(eng, "cpu_s") / med(sb3, "cpu_s"), 3),
                "sb3_eval_return": round(med(sb3, "return"), 2),
                "engine_eval_return": round(med(eng, "return"), 2),
                "target_met": ratio <= 0.5 and med(eng, "return") >= med(sb3, "return"),
                "sb3_wall_s_runs": [round(r["wall_s"], 2) for r in sb3],
                "engine_wall_s_runs": [round(r["wall_s"], 2) for r in eng],
                "sb3_eval_return_runs": [r["return"] for r in sb3],
                "engine_eval_return_runs": [round(r["return"], 2) for r in eng],
            }
            if args.variant:
                var = runs["variant"]
                var_ratio = med(var, "wall_s") / med(sb3, "wall_s")
                results[algo].update({
                    "variant": args.variant,
                    "variant_wall_s": round(med(var, "wall_s"), 2),
                    "variant_ratio": round(var_ratio, 3),
                    "variant_cpu_ratio": round(med(var, "cpu_s") / med(sb3, "cpu_s"), 3),
                    "variant_eval_return": round(med(var, "return"), 2),
                    "variant_target_met": var_ratio <= 0.5 and med(var, "return") >= med(sb3, "return"),
                    "variant_wall_s_runs": [round(r["wall_s"], 2) for r in var],
                    "variant_eval_return_runs": [round(r["return"], 2) for r in var],
                })
    print(json.dumps({
        "benchmark": "vs_sb3",
        "quick": args.quick,
        "reps": args.reps,
        "threads": args.threads,
        "periodic_evals": args.keep_evals,
        "sb3_version": sb3_version,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        **results,
        "skipped": skipped,
    }))


if __name__ == "__main__":
    main()
