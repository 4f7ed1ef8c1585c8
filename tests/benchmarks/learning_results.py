"""Learning results of the recipes: train each recipe on several seeds, tabulate the final evaluations.

Each run is ``engine-rl train RECIPE --seed S`` in a fresh process (the recipe's default frame
budget unless ``--frames`` is given); the final evaluation is the recipe's deterministic
evaluation (10 episodes, fixed eval seed) of the policy at the end of the run. Prints a
markdown table (for the README) and, last, one JSON line with every figure.

    python tests/benchmarks/learning_results.py --recipes dqn-cartpole ppo-cartpole --seeds 0 1 2
    python tests/benchmarks/learning_results.py --recipes sac-pendulum --set precision=bfloat16

``--set key=value`` (repeatable) passes config overrides to every run; the table's recipe
column then lists them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_one(recipe: str, seed: int, frames: int | None, out: Path, threads: int, overrides: list[str]) -> dict:
    cmd = [sys.executable, "-m", "engine_rl", "train", recipe, "--seed", str(seed), "--out", str(out),
           "--no-progress", "--threads", str(threads)]
    for override in overrides:
        cmd += ["--set", override]
    if frames is not None:
        cmd += ["--frames", str(frames)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", nargs="+", default=["dqn-cartpole"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None, help="override every recipe's frame budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every run (repeatable)")
    args = parser.parse_args()

    rows, records = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes:
            summaries = [run_one(recipe, s, args.frames, Path(tmp) / f"{recipe}-{s}", args.threads, args.overrides)
                         for s in args.seeds]
            label = f"{recipe} ({', '.join(args.overrides)})" if args.overrides else recipe
            finals = [s["eval_return_mean"] for s in summaries]
            walls = [s["wall_time_s"] for s in summaries]
            mean = statistics.fmean(finals)
            std = statistics.pstdev(finals)
            rows.append(
                f"| {label} | {summaries[0]['frames']:,} | {', '.join(map(str, args.seeds))} | "
                f"{mean:.1f} ± {std:.1f} | {', '.join(f'{f:.1f}' for f in finals)} | "
                f"{statistics.median(walls):.0f} s |"
            )
            records.append({"recipe": recipe, "overrides": args.overrides, "frames": summaries[0]["frames"],
                            "seeds": args.seeds,
                            "eval_return_mean_per_seed": finals, "mean": mean, "std": std, "wall_time_s": walls})
    print("| recipe | frames | seeds | final eval return (mean ± std over seeds) | per seed | median wall time |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(json.dumps({"benchmark": "learning_results", "threads": args.threads, "runs": records}))


if __name__ == "__main__":
    main()
