"""Fault injection: SIGKILL runs of each recipe, resume each to completion, and check that it
ends exactly where an uninterrupted run ends.

For each recipe: one uninterrupted ("straight") run of a short budget, timed; then ``--trials``
runs of the same command into fresh folders, each killed ``--kills`` times, and then resumed
until it finishes. Where the kill lands is the ``--phase``:

- ``random`` (default): at a time drawn uniformly from (0, the straight run's wall time) after
  each (re)start;
- ``final-evaluation``: inside the run's last evaluation (the one after its last batch), at an
  evaluation step drawn from (1, 400): the process kills itself there (once per trial);
- ``after-final-checkpoint``: once the final checkpoint is written, before ``policy.pt``,
  ``inference.pt`` and ``summary.json`` (once per trial).

A run killed before it wrote ``config.json`` is restarted with the original command; one killed
before its first checkpoint with results in its folder (a log, a best policy) is restarted with
the original command too, as the refusal of ``--resume`` there says; otherwise it is resumed with
``--resume``, as an operator would. A trial *matches* when its final full checkpoint equals the
straight run's bitwise (networks, optimizers, replay, RNG states, counters, handler states), its
``metrics.jsonl`` has the same lines (timing figures aside; the final evaluation's line included),
its summary the same evaluation scores, and its ``best/`` the same file. Each random kill is
classified by what the folder held when it landed: no ``config.json`` yet, no checkpoint yet, a
checkpoint file half written, or complete checkpoints; a kill that would land after the run ended
is counted as ``finished_first``.

Prints one JSON line per recipe, then one for all; exits 1 if any trial did not resume or did
not match::

    python tests/faults/kill_resume.py                     # every recipe x 20 trials, 1 kill each
    python tests/faults/kill_resume.py --recipes dqn-cartpole --trials 5 --kills 3 --jobs 2
    python tests/faults/kill_resume.py --phase final-evaluation --trials 3 --jobs 2

Kill times come from ``--seed`` (default 0); the recipes' seeds are fixed below.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from engine_rl.run.folder import results_of  # before tests/ goes on the path: it holds a folder named engine_rl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.compare
from support.compare import differences, log  # noqa: E402

# Short budgets with several checkpoints, an evaluation and a best policy each (and prioritized
# replay, normalizers, schedules where the recipe has them): every piece of state a resume restores.
# The last batch of each is due a checkpoint but not an evaluation: the final evaluation comes at
# the end of the run, after that batch's frames, which is where the final-evaluation kills land.
ARGS = {
    "dqn-cartpole": ["--frames", "24576", "--seed", "1", "--set", "learning_starts=512", "--set", "optim_steps_per_batch=16",
                     "--set", "hidden=(32,32)", "--set", "buffer_size=4096", "--set", "prioritized=true",
                     "--set", "eval_every=5", "--set", "eval_episodes=3", "--set", "num_envs=4", "--checkpoint-every", "8"],
    "ppo-cartpole": ["--frames", "40960", "--seed", "2", "--set", "eval_every=3", "--set", "eval_episodes=2",
                     "--set", "num_epochs=4", "--set", "batch_size=64", "--set", "normalize_observations=true",
                     "--set", "normalize_rewards=true", "--checkpoint-every", "2"],
    "sac-pendulum": ["--frames", "4500", "--seed", "3", "--set", "learning_starts=200", "--set", "frames_per_batch=50",
                     "--set", "eval_every_frames=700", "--set", "eval_episodes=2", "--set", "batch_size=64",
                     "--set", "hidden=(64,64)", "--checkpoint-every", "9"],
    "td3-pendulum": ["--frames", "6000", "--seed", "4", "--set", "learning_starts=200", "--set", "frames_per_batch=50",
                     "--set", "eval_every_frames=700", "--set", "eval_episodes=2", "--set", "batch_size=64",
                     "--set", "hidden=(64,64)", "--checkpoint-every", "12"],
    # MuJoCo physics, observation and reward normalization
    "ppo-mujoco": ["--frames", "6144", "--seed", "5", "--set", "num_epochs=2", "--set", "eval_every=2",
                   "--set", "eval_episodes=1", "--checkpoint-every", "1"],
    "sac-mujoco": ["--frames", "1200", "--seed", "6", "--set", "learning_starts=200", "--set", "hidden=(32,32)",
                   "--set", "env_kwargs={'max_episode_steps': 100}", "--set", "log_every_frames=50",
                   "--set", "eval_every_frames=500", "--set", "eval_episodes=1", "--checkpoint-every", "300"],
    "td3-mujoco": ["--frames", "1200", "--seed", "7", "--set", "learning_starts=200", "--set", "hidden=(32,32)",
                   "--set", "env_kwargs={'max_episode_steps': 100}", "--set", "log_every_frames=50",
                   "--set", "eval_every_frames=500", "--set", "eval_episodes=1", "--checkpoint-every", "300"],
    # the Atari emulator and frame stacks, uint8 frames in replay and in the on-policy batch
    "ppo-atari": ["--frames", "2048", "--seed", "8", "--set", "num_envs=2", "--set", "batch_size=128",
                  "--set", "eval_every=3", "--set", "eval_episodes=1", "--checkpoint-every", "1"],
    "dqn-atari": ["--frames", "2048", "--seed", "9", "--set", "num_envs=2", "--set", "frames_per_batch=128",
                  "--set", "learning_starts=512", "--set", "buffer_size=1024", "--set", "optim_steps_per_batch=8",
                  "--set", "eval_every=5", "--set", "eval_episodes=1", "--checkpoint-every", "2"],
    # QR-DQN's quantile network under a dueling head, prioritized by its td_error
    "qrdqn-cartpole": ["--frames", "24576", "--seed", "10", "--set", "learning_starts=512", "--set", "optim_steps_per_batch=16",
                       "--set", "hidden=(32,32)", "--set", "buffer_size=4096", "--set", "prioritized=true",
                       "--set", "dueling=true", "--set", "eval_every=5", "--set", "eval_episodes=3", "--set", "num_envs=4",
                       "--checkpoint-every", "8"],
    "qrdqn-atari": ["--frames", "2048", "--seed", "11", "--set", "num_envs=2", "--set", "frames_per_batch=128",
                    "--set", "learning_starts=512", "--set", "buffer_size=1024", "--set", "optim_steps_per_batch=8",
                    "--set", "eval_every=5", "--set", "eval_episodes=1", "--checkpoint-every", "2"],
}
EXTRAS = {"ppo-mujoco": "mujoco", "sac-mujoco": "mujoco", "td3-mujoco": "mujoco", "ppo-atari": "ale_py",
          "dqn-atari": "ale_py", "qrdqn-atari": "ale_py"}
TRAIN = [sys.executable, "-m", "engine_rl", "train"]
PHASES = ("random", "final-evaluation", "after-final-checkpoint")

#: Run as ``python -c KILL_ITSELF PHASE STEP train ...``: engine-rl's CLI, killing its own process
#: (SIGKILL) inside the last evaluation at its STEP-th policy call (or as it ends, if sooner), or
#: after the final checkpoint, before the end-of-run files.
KILL_ITSELF = """
import os, signal, sys
phase, step, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

if phase == "final-evaluation":
    from handlers.validation import ValidationRollout
    evaluate = ValidationRollout.__call__

    def last_evaluation(self, engine):
        if engine.state.frames < engine.total_frames:
            return evaluate(self, engine)
        calls = [0]

        def count(*_):
            calls[0] += 1
            if calls[0] >= step:
                die()

        policy = self.evaluator.policy
        if hasattr(policy, "register_forward_pre_hook"):
            policy.register_forward_pre_hook(count)
        else:
            self.evaluator.policy = lambda *a, **k: (count(), policy(*a, **k))[1]
        evaluate(self, engine)
        die()

    ValidationRollout.__call__ = last_evaluation
else:
    replace = os.replace

    def end_files(src, dst):
        if os.path.basename(dst) == "policy.pt":
            die()
        return replace(src, dst)

    os.replace = end_files
from engine_rl.cli import main
sys.exit(main(argv))
"""


def checkpoints(out: Path) -> list[Path]:
    return sorted((out / "checkpoints").glob("checkpoint_*.pt"))


def next_command(out: Path, fresh: list[str], recipe: str) -> list[str]:
    """What an operator runs next: the original command while there is nothing to resume
    (``--resume`` refuses a folder without checkpoints that holds results: it says to drop it)."""
    if not (out / "config.json").is_file() or (not checkpoints(out) and results_of(out)):
        return fresh
    return [*TRAIN, recipe, "--out", str(out), "--resume", "--no-progress"]


def phase(out: Path) -> str:
    """What the folder held when a kill landed."""
    if not (out / "config.json").is_file():
        return "before_config"
    if any(out.rglob(".*.partial")):  # a checkpoint (full, best or inference) half written
        return "during_a_checkpoint_write"
    return "before_first_checkpoint" if not checkpoints(out) else "after_checkpoints"


def run(cmd: list[str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def final_checkpoint(out: Path) -> Path:
    summary = json.loads((out / "summary.json").read_text())
    return out / "checkpoints" / f"checkpoint_{summary['frames']}.pt"


def trial(recipe: str, out: Path, straight: Path, wall: float, kills: int, rng: random.Random, where: str) -> dict:
    """One trial: start, kill ``kills`` times (``where``: see the module's docstring), resume to
    the end, compare."""
    args = [*ARGS[recipe], "--no-progress"]
    fresh = [*TRAIN, recipe, "--out", str(out), *args]
    phases, restarts = [], 0
    if where != "random":  # one kill, by the process itself
        step = rng.randint(1, 400)
        res = run([sys.executable, "-c", KILL_ITSELF, where, str(step), *fresh[3:]])
        if res.returncode != -signal.SIGKILL:
            return {"resumed": False, "matched": False, "phases": phases,
                    "error": f"not killed ({where}): exit {res.returncode}: {res.stderr.strip()[-500:]}"}
        phases.append(where)
        kills = 0
    for _ in range(kills):
        cmd = next_command(out, fresh, recipe)
        delay = rng.uniform(0.0, wall)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=delay)
            # it ended before the kill: a finished run, or an error (reported below)
            if proc.returncode != 0:
                return {"resumed": False, "matched": False, "phases": phases,
                        "error": f"exit {proc.returncode}: {proc.stderr.read().strip()[-500:]}"}
            phases.append("finished_first")
            break
        except subprocess.TimeoutExpired:
            at = phase(out)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            phases.append(at)
            restarts += 1
    if not (out / "summary.json").is_file() or json.loads((out / "summary.json").read_text()).get("paused"):
        res = run(next_command(out, fresh, recipe))
        if res.returncode != 0:
            lines = res.stderr.strip().splitlines()
            return {"resumed": False, "matched": False, "phases": phases,
                    "error": f"exit {res.returncode}: {lines[-1] if lines else ''}"}
    try:
        diff = differences(torch.load(final_checkpoint(straight), weights_only=True),
                           torch.load(final_checkpoint(out), weights_only=True))
    except (OSError, RuntimeError, KeyError, ValueError) as err:
        return {"resumed": True, "matched": False, "phases": phases, "error": f"final checkpoint: {err}"}
    same_log = log(straight / "metrics.jsonl") == log(out / "metrics.jsonl")
    same_end = end_of_run(straight) == end_of_run(out)
    result = {"resumed": True, "matched": not diff and same_log and same_end, "phases": phases}
    if diff:
        result["error"] = f"checkpoint differs at {diff[:3]}"
    elif not same_log:
        result["error"] = "metrics.jsonl differs"
    elif not same_end:
        result["error"] = f"end of run differs: {end_of_run(out)} vs the straight run's {end_of_run(straight)}"
    return result


def end_of_run(out: Path) -> dict:
    """What the end of a run leaves besides its checkpoint and log: the summary's evaluation
    scores, the best policy's file name, and whether the inference files are there."""
    summary = json.loads((out / "summary.json").read_text())
    return {
        "scores": {k: v for k, v in summary.items() if k.startswith("eval_")},
        "best": sorted(p.name for p in (out / "best").glob("*.pt")),
        "inference": [(out / n).is_file() for n in ("inference.pt", "policy.pt")],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(ARGS), choices=list(ARGS))
    parser.add_argument("--trials", type=int, default=20, help="killed runs per recipe (default 20)")
    parser.add_argument("--kills", type=int, default=1, help="kills per trial before the final resume (default 1)")
    parser.add_argument("--jobs", type=int, default=1, help="trials run at once (default 1; at most the cores)")
    parser.add_argument("--phase", choices=PHASES, default="random",
                        help="where the kills land (default random; see the docstring)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill times (default 0)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temporary folder, removed)")
    opts = parser.parse_args(argv)
    if opts.trials < 1 or opts.kills < 1 or opts.jobs < 1:
        parser.error("--trials, --kills and --jobs must be at least 1")

    root = opts.keep or Path(tempfile.mkdtemp(prefix="kill_resume_"))
    root.mkdir(parents=True, exist_ok=True)
    totals = {"trials": 0, "kills": 0, "resumed": 0, "matched": 0}
    try:
        for recipe in opts.recipes:
            if recipe in EXTRAS and importlib.util.find_spec(EXTRAS[recipe]) is None:
                print(json.dumps({"recipe": recipe, "skipped": f"{EXTRAS[recipe]} is not installed"}), flush=True)
                continue
            straight = root / recipe / "straight"
            shutil.rmtree(straight, ignore_errors=True)
            start = time.perf_counter()
            res = run([*TRAIN, recipe, "--out", str(straight), *ARGS[recipe], "--no-progress"])
            wall = time.perf_counter() - start
            if res.returncode != 0:
                print(json.dumps({"recipe": recipe, "error": f"straight run failed: {res.stderr.strip()[-500:]}"}))
                return 1
            rngs = [random.Random(f"{opts.seed}-{recipe}-{i}") for i in range(opts.trials)]
            outs = [root / recipe / f"trial{i:02d}" for i in range(opts.trials)]
            for out in outs:
                shutil.rmtree(out, ignore_errors=True)
            with ThreadPoolExecutor(opts.jobs) as pool:
                def one(i: int) -> dict:
                    return trial(recipe, outs[i], straight, wall, opts.kills, rngs[i], opts.phase)

                results = list(pool.map(one, range(opts.trials)))
            phases = [p for r in results for p in r["phases"]]
            row = {
                "recipe": recipe, "phase": opts.phase, "straight_wall_s": round(wall, 1), "trials": len(results),
                "kills": sum(p != "finished_first" for p in phases),
                "kills_by_phase": {p: phases.count(p) for p in sorted(set(phases))},
                "resumed": sum(r["resumed"] for r in results), "matched": sum(r["matched"] for r in results),
                "failures": [{"trial": i, **r} for i, r in enumerate(results) if not r["matched"]],
            }
            print(json.dumps(row), flush=True)
            for key in totals:
                totals[key] += row[key]
    finally:
        if opts.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"recipe": "all", **totals}), flush=True)
    return 0 if totals["matched"] == totals["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
