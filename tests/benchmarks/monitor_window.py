"""A published run's training return over a window of frames, from its Stable-Baselines3 monitor files.

rl-baselines3-zoo publishes the ``N.monitor.csv`` files of its trained agents (one per env copy,
e.g. ``rl-trained-agents/ppo/BreakoutNoFrameskip-v4_1/``): each line is a finished episode's return
``r``, its length ``l`` and the time. This prints the mean return of the episodes that ended while
the run's frame counter (all env copies together, in agent steps) was in ``(START, END]``: the
figure to set beside ``learning_results.py``'s training-return column at the same budget.

The env copies step in lockstep, so at ``F`` frames each copy has taken ``F / copies`` steps. On
Atari the monitor sits under the frame skip: ``l`` counts emulator frames, ``--frame-skip`` of them
per agent step (4; the no-op and FIRE frames of each reset, which are no agent steps, put the
window early by about 1% of the frames before it).

    python tests/benchmarks/monitor_window.py rl-trained-agents/ppo/BreakoutNoFrameskip-v4_1 \\
        --start 138240 --end 153600 --frame-skip 4
    python tests/benchmarks/monitor_window.py rl-trained-agents/sac/HalfCheetah-v3_1 --start 90000 --end 100000
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path


def episodes(path: Path) -> list[tuple[float, int]]:
    """``(return, length)`` of each episode in one monitor file (its ``#{...}`` header line skipped)."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [(float(row["r"]), int(row["l"])) for row in csv.DictReader(lines)]


def window_returns(folder: str | Path, start: int, end: int, frame_skip: int = 1) -> list[float]:
    """Returns of the episodes that ended with the run's frame count in ``(start, end]``."""
    files = sorted(Path(folder).glob("*.monitor.csv"))
    if not files:
        raise SystemExit(f"monitor_window: no *.monitor.csv files in {folder}")
    per_copy = (start * frame_skip / len(files), end * frame_skip / len(files))
    out = []
    for path in files:
        rows, elapsed = episodes(path), 0
        if sum(length for _, length in rows) < per_copy[1]:
            raise SystemExit(f"monitor_window: {path} ends before frame {end} (its env copy's share)")
        for ret, length in rows:
            elapsed += length
            if per_copy[0] < elapsed <= per_copy[1]:
                out.append(ret)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", help="the folder of a run's N.monitor.csv files")
    parser.add_argument("--start", type=int, required=True, help="the window's first frame (exclusive), agent steps")
    parser.add_argument("--end", type=int, required=True, help="the window's last frame, agent steps")
    parser.add_argument("--frame-skip", type=int, default=1, help="emulator frames per agent step in 'l' (Atari: 4)")
    args = parser.parse_args()
    returns = window_returns(args.folder, args.start, args.end, args.frame_skip)
    if not returns:
        raise SystemExit(f"monitor_window: no episode ended between frames {args.start} and {args.end}")
    print(json.dumps({"benchmark": "monitor_window", "folder": args.folder, "start": args.start, "end": args.end,
                      "episodes": len(returns), "return_mean": round(statistics.fmean(returns), 2),
                      "return_std": round(statistics.pstdev(returns), 2)}))


if __name__ == "__main__":
    main()
