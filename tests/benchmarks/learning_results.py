"""Learning results of the recipes: train each recipe on several seeds, tabulate the final evaluations.

Each run is ``engine-rl train RECIPE --seed S`` in a fresh process (the recipe's default frame
budget unless ``--frames`` is given); the final evaluation is the recipe's deterministic
evaluation (10 episodes, fixed eval seed) of the policy at the end of the run. Prints a
markdown table (for the README) and, last, one JSON line with every figure.

    python tests/benchmarks/learning_results.py --recipes dqn-cartpole ppo-cartpole --seeds 0 1 2
    python tests/benchmarks/learning_results.py --recipes sac-pendulum --set batch_size=512

``--set key=value`` (repeatable) passes config overrides to every run; the table's recipe
column then lists them.

``--fresh-seed S`` also evaluates, on episodes the run never saw (eval env seed ``S``, e.g.
20000; ``engine-rl eval CHECKPOINT --seed S``), both the policy at the end of the run and the
run's best checkpoint (``RUN/best/``: the policy of its best periodic evaluation, chosen on the
recipe's own eval seed), and prints a second table with both. The fresh seed keeps the best
checkpoint's score honest: it was picked as the maximum over evaluations on the recipe's eval
episodes, so its score there is biased upwards.

    python tests/benchmarks/learning_results.py --recipes dqn-cartpole --seeds 0 1 2 --fresh-seed 20000

The table also gives each run's training return: the mean return of the training episodes (the
sampling policy's; the game's score where the loss sees clipped rewards) that ended in the last
10% of its frames, from its ``metrics.jsonl``. CleanRL's published figures are training-episode
returns, so this is the column to set beside them; the evaluation is of the deterministic policy.

``--keep DIR`` keeps the run folders (``DIR/RECIPE[-OVERRIDES]-SEED``) instead of a temporary
folder. Run again with the same arguments, the script reads the finished runs there back and
trains only the rest: a session cut short loses only the runs it had not finished (an unfinished
folder is named, with the ``--resume`` command that continues it; the table's wall time of a run
continued that way counts the continuation only).

    python tests/benchmarks/learning_results.py --recipes ppo-atari --seeds 0 1 2 --frames 153600 --jobs 2 --keep runs/lr

``--merge FILE ...`` trains nothing: it merges the JSON lines of earlier runs (their saved output),
e.g. seeds 0-1 from one session and seed 2 from another, into one table.

``--jobs N`` runs N trainings at once (each with ``--threads`` torch threads: give each its own
core). The table's last column is the published reference at the same budget, where one is known
(``REFERENCES``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


# Published results at the recipes' default budgets: (recipe, env or None for the default[, frames]) -> text, where env is
# the run's env_id and wrappers overrides as given ("env_id=...", "wrappers=...", joined by "|" when both)
REFERENCES = {
    ("dqn-cartpole", None): "rl-zoo 500 at 50k",
    ("qrdqn-cartpole", None): "rl-zoo 500 at 50k",
    ("ppo-cartpole", None): "rl-zoo 500 at 100k",
    ("ppo-lstm", None): "rl-zoo ppo_lstm, CartPoleNoVel-v1, 500 at 100k (its published agent)",
    ("ppo-cartpole", "wrappers=MaskVelocity"): "feed-forward PPO on ppo-lstm's env (no published figure)",
    ("sac-pendulum", None): "rl-zoo −157 ± 89 at 20k",
    ("td3-pendulum", None): "rl-zoo −152 ± 90 at 20k",
    ("ppo-mujoco", None): "CleanRL ppo_continuous_action, Hopper-v4 at 1M: 2382.9 ± 271.7",
    ("ppo-mujoco", "env_id=HalfCheetah-v5"): "CleanRL ppo_continuous_action, HalfCheetah-v4 at 1M: 1442.6 ± 46.0",
    # no published figure at the budgets these run here (about 20 minutes per seed on one core): the 1M/10M ones
    ("sac-mujoco", None): "SB3 2.9.2 same values at 100k, seed 0: 3965.5 (sb3_side.py); rl-zoo 9,535 at 1M",
    ("td3-mujoco", None): "SB3 2.9.2 same values at 100k, seed 0: 4623.7 (sb3_side.py); rl-zoo 9,656 at 1M",
    ("ppo-atari", None): "CleanRL ppo_atari 414.7 ± 28.1 at 10M; random play 1.2",
    # at a budget (a third key): the training return of rl-zoo's logged PPO run on Breakout (CleanRL's values,
    # its lr annealed over 10M frames; one seed) in the run's last 10% of frames, from monitor_window.py
    ("ppo-atari", None, 153600): "rl-zoo's logged run (same values), training return in 138k-154k: 6.2; random play 1.2",
    ("ppo-atari", None, 215040): "rl-zoo's logged run (same values), training return in 194k-215k: 9.2; random play 1.2",
    # rl-zoo's logged SAC and TD3 runs on HalfCheetah-v3 (the values of these recipes; seed 594371), 90k-100k frames
    ("sac-mujoco", None, 100000): "rl-zoo's logged run (same values, v3), training return in 90k-100k: 4442.9; "
                                  "SB3 2.9.2, same values, seed 0, evaluation: 3965.5",
    ("td3-mujoco", None, 100000): "rl-zoo's logged run (same values, v3), training return in 90k-100k: 5197.3; "
                                  "SB3 2.9.2, same values, seed 0, evaluation: 4623.7",
}


# written into each run folder: the ``engine-rl`` arguments that made it (``--keep`` reuses only those)
COMMAND_FILE = "learning_results_command.json"
# the training-return column: episodes that ended in this last fraction of each run's frames
TRAIN_TAIL = 0.1


def reference(recipe: str, overrides: list[str], frames: int | None = None) -> str:
    """The published figure for ``recipe`` (on the ``env_id`` it overrides), at ``frames`` where one is known."""
    env = "|".join(o for o in overrides if o.startswith(("env_id=", "wrappers="))) or None
    return REFERENCES.get((recipe, env, frames)) or REFERENCES.get((recipe, env), "—")


def run_one(recipe: str, seed: int, frames: int | None, out: Path, threads: int, overrides: list[str]) -> dict:
    """``engine-rl train`` into ``out``; its summary. A finished run already in ``out`` (``--keep``)
    that this same command made is read back instead of trained again."""
    args = ["train", recipe, "--seed", str(seed), "--out", str(out), "--no-progress", "--threads", str(threads)]
    for override in overrides:
        args += ["--set", override]
    if frames is not None:
        args += ["--frames", str(frames)]
    made_by, summary = out / COMMAND_FILE, out / "summary.json"
    if out.exists():
        if not (made_by.exists() and json.loads(made_by.read_text()) == args):
            raise SystemExit(f"learning_results: {out} exists and was not made by this command (engine-rl {' '.join(args)}); "
                             "give --keep another folder or delete it")
        finished = json.loads(summary.read_text()) if summary.exists() else {"paused": True}
        if not finished["paused"]:
            return finished
        raise SystemExit(f"learning_results: {out} holds an unfinished run (killed or still running); continue it with "
                         f"engine-rl {' '.join(args)} --resume, or delete it")
    out.mkdir(parents=True)
    made_by.write_text(json.dumps(args))
    subprocess.run([sys.executable, "-m", "engine_rl", *args], check=True, stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())


def evaluate(checkpoint: str, seed: int, threads: int) -> dict:
    """``engine-rl eval CHECKPOINT --seed SEED`` in a fresh process; its JSON metrics."""
    cmd = [sys.executable, "-m", "engine_rl", "eval", checkpoint, "--seed", str(seed)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_frames(checkpoint: str) -> int:
    """The frame count in a best-checkpoint name (``best_policy_<frames>_eval_return=<score>.pt``)."""
    match = re.search(r"_(\d+)_eval_return=", Path(checkpoint).name)
    if match is None:
        raise ValueError(f"learning_results: cannot read the frames from best checkpoint name {checkpoint!r}")
    return int(match.group(1))


def final_training_return(metrics: str | Path, fraction: float = TRAIN_TAIL) -> float | None:
    """The mean return of the training episodes (the sampling policy's, with the game's own score
    where rewards are clipped for the loss) that ended in the last ``fraction`` of a run's frames,
    read from its ``metrics.jsonl``; None when none ended there.

    Each ``train`` line carries the mean return of the episodes that ended in its batch and the
    running count ``episodes``: the count's step since the line before weighs that mean, so the
    figure is the mean over episodes, not over batches (it needs one line per batch, the default).
    """
    lines = [json.loads(line) for line in Path(metrics).read_text().splitlines()]
    train = [line for line in lines if line["kind"] == "train"]
    if not train:
        raise SystemExit(f"learning_results: {metrics} has no train lines")
    start = train[-1]["frames"] * (1 - fraction)
    total, count, before = 0.0, 0, 0
    for line in train:
        episodes = line.get("episodes", before)
        ended = episodes - before
        if ended < 0:  # the count is in the checkpoints, so a run's log never goes back
            raise SystemExit(f"learning_results: {metrics}: the episode count goes down at frames {line['frames']}, "
                             "so it is not the log of one run")
        if line["frames"] > start and ended:
            total += line["train_return_mean"] * ended
            count += ended
        before = episodes
    return total / count if count else None


def fresh_row(label: str, seeds: list[int], summaries: list[dict], fresh_seed: int, threads: int) -> tuple[str, dict]:
    """The final policy and the best checkpoint of each run, evaluated on eval seed ``fresh_seed``."""
    missing = [s for s, summary in zip(seeds, summaries) if not summary.get("best_checkpoint")]
    if missing:
        raise SystemExit(f"learning_results: --fresh-seed needs best checkpoints; the runs of seeds {missing} have none "
                         "(the recipe attaches no periodic evaluation)")
    final = [evaluate(s["inference"], fresh_seed, threads)["return_mean"] for s in summaries]
    best = [evaluate(s["best_checkpoint"], fresh_seed, threads)["return_mean"] for s in summaries]
    chosen = [best_frames(s["best_checkpoint"]) for s in summaries]
    row = (
        f"| {label} | {', '.join(map(str, seeds))} | {statistics.fmean(final):.1f} ± {statistics.pstdev(final):.1f} | "
        f"{', '.join(f'{f:.1f}' for f in final)} | {statistics.fmean(best):.1f} ± {statistics.pstdev(best):.1f} | "
        f"{', '.join(f'{b:.1f}' for b in best)} | {', '.join(f'{c:,}' for c in chosen)} |"
    )
    record = {"fresh_seed": fresh_seed, "final_fresh_per_seed": final, "best_fresh_per_seed": best,
              "best_chosen_at_frames": chosen}
    return row, record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", nargs="+", default=["dqn-cartpole"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None, help="override every recipe's frame budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="trainings run at once (default 1)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every run (repeatable)")
    parser.add_argument("--fresh-seed", type=int, default=None, metavar="S",
                        help="also evaluate each run's final policy and best checkpoint with eval env seed S")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="keep the run folders in DIR (default: a temporary folder); a finished run there that "
                             "the same command made is read back, not trained again")
    parser.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                        help="train nothing: merge the JSON lines of earlier runs of this script (saved output files), "
                             "e.g. seeds run in different sessions, into one table")
    args = parser.parse_args()
    if args.merge:
        records = merge(args.merge)
        print_table([table_row(r) for r in records], [], None, records, args.threads)
        return
    if args.fresh_seed is not None and args.fresh_seed < 0:
        parser.error(f"--fresh-seed must be >= 0, got {args.fresh_seed}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")

    rows, fresh_rows, records = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        runs = [(recipe, s) for recipe in args.recipes for s in args.seeds]
        with ThreadPoolExecutor(args.jobs) as pool:
            done = dict(zip(runs, pool.map(
                lambda run: run_one(run[0], run[1], args.frames, folder / run_name(run[0], run[1], args.overrides),
                                    args.threads, args.overrides), runs)))
        for recipe in args.recipes:
            summaries = [done[recipe, s] for s in args.seeds]
            record = summarize(recipe, args.overrides, args.seeds, summaries[0]["frames"],
                               [s["eval_return_mean"] for s in summaries], [s["wall_time_s"] for s in summaries],
                               [final_training_return(s["metrics"]) for s in summaries])
            if args.fresh_seed is not None:
                row, fresh = fresh_row(label_of(recipe, args.overrides), args.seeds, summaries, args.fresh_seed,
                                       args.threads)
                fresh_rows.append(row)
                record.update(fresh)
            records.append(record)
            rows.append(table_row(record))
    print_table(rows, fresh_rows, args.fresh_seed, records, args.threads)


def run_name(recipe: str, seed: int, overrides: list[str]) -> str:
    """A run's folder name: the recipe, the overrides (as file-name characters) and the seed."""
    label = "-".join([recipe, *(re.sub(r"[^A-Za-z0-9_.=-]+", "_", o) for o in overrides)])
    return f"{label}-{seed}"


def label_of(recipe: str, overrides: list[str]) -> str:
    return f"{recipe} ({', '.join(overrides)})" if overrides else recipe


def summarize(recipe: str, overrides: list[str], seeds: list[int], frames: int, finals: list[float],
              walls: list[float], trains: list[float | None]) -> dict:
    """One recipe's record: per-seed final evaluations, training returns (``final_training_return``;
    None where unknown) and wall times; the evaluations' mean and std."""
    return {"recipe": recipe, "overrides": overrides, "frames": frames, "seeds": seeds,
            "eval_return_mean_per_seed": finals, "mean": statistics.fmean(finals), "std": statistics.pstdev(finals),
            "train_return_last_per_seed": trains, "wall_time_s": walls}


def mean_std(values: list[float | None]) -> str:
    """``mean ± std (a, b, c)`` of known values; "—" when one is unknown (runs from before the column)."""
    if not values or any(v is None for v in values):
        return "—"
    return f"{statistics.fmean(values):.1f} ± {statistics.pstdev(values):.1f} ({', '.join(f'{v:.1f}' for v in values)})"


def table_row(record: dict) -> str:
    return (
        f"| {label_of(record['recipe'], record['overrides'])} | {record['frames']:,} | "
        f"{', '.join(map(str, record['seeds']))} | {record['mean']:.1f} ± {record['std']:.1f} | "
        f"{', '.join(f'{f:.1f}' for f in record['eval_return_mean_per_seed'])} | "
        f"{mean_std(record.get('train_return_last_per_seed', []))} | "
        f"{statistics.median(record['wall_time_s']):.0f} s | {reference(record['recipe'], record['overrides'], record['frames'])} |"
    )


def merge(paths: list[str]) -> list[dict]:
    """The records of earlier runs of this script (their JSON lines, in files), one per recipe,
    overrides and frame budget, with the seeds of all the files together."""
    merged: dict[tuple, dict] = {}
    for path in paths:
        lines = [line for line in Path(path).read_text().splitlines() if line.startswith('{"benchmark": "learning_results"')]
        if not lines:
            raise SystemExit(f"learning_results: {path} holds no learning_results JSON line")
        for record in json.loads(lines[-1])["runs"]:
            key = (record["recipe"], tuple(record["overrides"]), record["frames"])
            into = merged.setdefault(key, {"seeds": [], "finals": [], "walls": [], "trains": []})
            # lines from before the training-return column have none
            trains = record.get("train_return_last_per_seed", [None] * len(record["seeds"]))
            for seed, final, wall, train in zip(record["seeds"], record["eval_return_mean_per_seed"],
                                                record["wall_time_s"], trains):
                if seed in into["seeds"]:
                    raise SystemExit(f"learning_results: seed {seed} of {key[0]} {list(key[1])} appears twice ({path})")
                into["seeds"].append(seed), into["finals"].append(final), into["walls"].append(wall)
                into["trains"].append(train)
    return [summarize(recipe, list(overrides), m["seeds"], frames, m["finals"], m["walls"], m["trains"])
            for (recipe, overrides, frames), m in merged.items()]


def print_table(rows: list[str], fresh_rows: list[str], fresh_seed: int | None, records: list[dict], threads: int) -> None:
    print("| recipe | frames | seeds | final eval return (mean ± std over seeds) | per seed | "
          f"training return, last {TRAIN_TAIL:.0%} of frames (per seed) | median wall time | reference |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if fresh_rows:
        print()
        print(f"| recipe | seeds | final policy, eval seed {fresh_seed} (mean ± std) | per seed | "
              f"best checkpoint, eval seed {fresh_seed} (mean ± std) | per seed | best chosen at frames |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(fresh_rows))
    print(json.dumps({"benchmark": "learning_results", "threads": threads, "runs": records}))


if __name__ == "__main__":
    main()
