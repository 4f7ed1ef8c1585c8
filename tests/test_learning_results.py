"""tests/benchmarks/learning_results.py: the fresh-episode evaluations of a run's final policy and best checkpoint."""

from __future__ import annotations

import json
import re

import pytest
from benchmarks.learning_results import best_frames, fresh_row

from engine_rl.recipes.runner import make_config, train


def test_best_frames_reads_the_checkpoint_name() -> None:
    assert best_frames("/run/best/best_policy_18432_eval_return=500.0000.pt") == 18432
    with pytest.raises(ValueError, match=r"cannot read the frames from best checkpoint name 'policy\.pt'"):
        best_frames("policy.pt")


def test_fresh_row_at_the_runs_own_eval_seed_reproduces_its_evaluations(tmp_path) -> None:
    overrides = {"seed": 0, "total_frames": 1024, "learning_starts": 256, "optim_steps_per_batch": 8,
                 "eval_every": 1, "eval_episodes": 3}
    summary = train("dqn-cartpole", make_config("dqn-cartpole", overrides), tmp_path, progress=False)
    # at the recipe's own eval seed (10000) the final policy scores what the run's last evaluation
    # said, and the best checkpoint what its name says
    row, record = fresh_row("dqn-cartpole", [0], [summary], fresh_seed=10_000, threads=1)
    assert record["final_fresh_per_seed"] == [pytest.approx(summary["eval_return_mean"], abs=0.05)]
    best_score = float(re.search(r"eval_return=([\d.]+)\.pt$", summary["best_checkpoint"]).group(1))
    assert record["best_fresh_per_seed"] == [pytest.approx(best_score, abs=0.05)]
    assert record["best_chosen_at_frames"] == [best_frames(summary["best_checkpoint"])]
    assert record["best_chosen_at_frames"][0] in (256, 512, 768, 1024)
    assert row.startswith("| dqn-cartpole | 0 | ") and row.count("|") == 8


def test_fresh_row_without_best_checkpoints_names_the_seeds() -> None:
    with pytest.raises(SystemExit, match=r"the runs of seeds \[3\] have none"):
        fresh_row("x", [2, 3], [{"best_checkpoint": "b.pt"}, {"best_checkpoint": None}], fresh_seed=1, threads=1)


def test_merge_joins_the_seeds_of_earlier_runs_into_one_row(tmp_path, capsys) -> None:
    from benchmarks.learning_results import merge, table_row

    def saved(name, seeds, finals):
        record = {"recipe": "ppo-atari", "overrides": [], "frames": 153600, "seeds": seeds,
                  "eval_return_mean_per_seed": finals, "mean": 0.0, "std": 0.0, "wall_time_s": [100.0] * len(seeds)}
        path = tmp_path / name
        path.write_text("| table |\n" + json.dumps({"benchmark": "learning_results", "threads": 1, "runs": [record]}) + "\n")
        return str(path)

    records = merge([saved("a.log", [0], [2.0]), saved("b.log", [1, 2], [4.0, 6.0])])
    assert len(records) == 1 and records[0]["seeds"] == [0, 1, 2]
    assert records[0]["mean"] == 4.0 and records[0]["std"] == pytest.approx((8 / 3) ** 0.5)
    assert table_row(records[0]).startswith("| ppo-atari | 153,600 | 0, 1, 2 | 4.0 ± 1.6 | 2.0, 4.0, 6.0 | 100 s |")
    with pytest.raises(SystemExit, match=r"seed 0 of ppo-atari \[\] appears twice"):
        merge([saved("a.log", [0], [2.0]), saved("c.log", [0], [3.0])])
