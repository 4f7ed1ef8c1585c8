"""tests/benchmarks/learning_results.py: the fresh-episode evaluations of a run's final policy and best
checkpoint, the training-return column, merging saved rows, and the run folders ``--keep`` reuses."""

from __future__ import annotations

import json
import re

import pytest
from benchmarks.learning_results import best_frames, final_training_return, fresh_row, run_one

from engine_rl.run.driver import make_config, train


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
    # saved lines from before the training-return column leave it unknown
    assert table_row(records[0]).startswith("| ppo-atari | 153,600 | 0, 1, 2 | 4.0 ± 1.6 | 2.0, 4.0, 6.0 | — | 100 s |")
    with pytest.raises(SystemExit, match=r"seed 0 of ppo-atari \[\] appears twice"):
        merge([saved("a.log", [0], [2.0]), saved("c.log", [0], [3.0])])


def test_merge_carries_the_training_returns_of_newer_lines(tmp_path) -> None:
    from benchmarks.learning_results import merge, table_row

    record = {"recipe": "ppo-atari", "overrides": [], "frames": 153600, "seeds": [0, 1],
              "eval_return_mean_per_seed": [2.0, 4.0], "mean": 3.0, "std": 1.0,
              "train_return_last_per_seed": [10.0, 14.0], "wall_time_s": [90.0, 110.0]}
    path = tmp_path / "a.log"
    path.write_text(json.dumps({"benchmark": "learning_results", "threads": 1, "runs": [record]}) + "\n")
    (merged,) = merge([str(path)])
    assert merged["train_return_last_per_seed"] == [10.0, 14.0]
    assert "| 12.0 ± 2.0 (10.0, 14.0) | 100 s |" in table_row(merged)


def _metrics(path, lines) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_final_training_return_weighs_each_batch_by_the_episodes_that_ended_in_it(tmp_path) -> None:
    lines = [
        {"kind": "train", "frames": 100, "train_return_mean": 50.0, "episodes": 4},  # before the last 10%
        {"kind": "train", "frames": 910, "train_return_mean": 1.0, "episodes": 5},   # 1 episode ended
        {"kind": "eval", "frames": 910, "eval_return_mean": 99.0},
        {"kind": "train", "frames": 950, "train_return_mean": 1.0, "episodes": 5},   # none: the last value stays
        {"kind": "train", "frames": 1000, "train_return_mean": 4.0, "episodes": 8},  # 3 episodes ended
    ]
    # (1 * 1 + 4 * 3) / 4 episodes, not the mean of the batch means (2.5) nor of the lines (2.0)
    assert final_training_return(_metrics(tmp_path / "m.jsonl", lines)) == pytest.approx(13 / 4)
    # two runs' lines in one file (the count is checkpointed, so one run's never goes down)
    appended = lines[:2] + [{"kind": "train", "frames": 1000, "train_return_mean": 7.0, "episodes": 2}]
    with pytest.raises(SystemExit, match=r"a\.jsonl: the episode count goes down at frames 1000, so it is not the log"):
        final_training_return(_metrics(tmp_path / "a.jsonl", appended))
    none_ended = [lines[0], {"kind": "train", "frames": 1000, "train_return_mean": 50.0, "episodes": 4}]
    assert final_training_return(_metrics(tmp_path / "n.jsonl", none_ended)) is None
    with pytest.raises(SystemExit, match=r"e\.jsonl has no train lines"):
        final_training_return(_metrics(tmp_path / "e.jsonl", [lines[2]]))


def test_kept_run_folders_are_read_back_only_when_this_command_made_them(tmp_path, monkeypatch) -> None:
    import subprocess

    out = tmp_path / "ppo-cartpole-0"
    calls = []

    def fake_run(cmd, **kwargs):  # stands in for engine-rl train: writes the summary it would
        calls.append(cmd)
        (out / "summary.json").write_text(json.dumps({"paused": False, "eval_return_mean": 9.0, "frames": 1024}))

    monkeypatch.setattr(subprocess, "run", fake_run)
    summary = run_one("ppo-cartpole", 0, 1024, out, 1, ["lr=0.001"])
    assert summary["eval_return_mean"] == 9.0 and len(calls) == 1
    assert calls[0][1:5] == ["-m", "engine_rl", "train", "ppo-cartpole"]
    assert calls[0][-6:] == ["--threads", "1", "--set", "lr=0.001", "--frames", "1024"]
    assert json.loads((out / "learning_results_command.json").read_text())[-4:] == ["--set", "lr=0.001", "--frames", "1024"]
    # the same command again: read back, not trained again
    assert run_one("ppo-cartpole", 0, 1024, out, 1, ["lr=0.001"])["eval_return_mean"] == 9.0 and len(calls) == 1
    # another budget or override: refused, naming the folder
    with pytest.raises(SystemExit, match=r"ppo-cartpole-0 exists and was not made by this command .*--frames 2048"):
        run_one("ppo-cartpole", 0, 2048, out, 1, ["lr=0.001"])
    # a run that did not finish (killed: no summary, or paused) is named with the command that continues it
    (out / "summary.json").write_text(json.dumps({"paused": True}))
    with pytest.raises(SystemExit, match=r"holds an unfinished run .* --frames 1024 --resume, or delete it"):
        run_one("ppo-cartpole", 0, 1024, out, 1, ["lr=0.001"])
    assert len(calls) == 1


def test_a_reference_at_the_runs_budget_comes_before_the_recipes_own() -> None:
    from benchmarks.learning_results import reference

    assert "training return in 138k-154k: 6.2" in reference("ppo-atari", [], 153600)
    assert "training return in 194k-215k: 9.2" in reference("ppo-atari", ["lr_end=0.0002446"], 215040)
    assert reference("ppo-atari", [], 1024).startswith("CleanRL ppo_atari 414.7")
    assert "training return in 90k-100k: 4442.9" in reference("sac-mujoco", [], 100000)
    assert reference("sac-mujoco", [], 1000000).startswith("SB3 2.9.2 same values at 100k")  # another budget: the recipe's line
    assert "HalfCheetah-v4 at 1M: 1442.6" in reference("ppo-mujoco", ["env_id=HalfCheetah-v5"], 1001472)
    assert reference("ppo-mujoco", ["env_id=Walker2d-v5"]) == "—"
    assert reference("ppo-lstm", [], 100096).startswith("rl-zoo ppo_lstm, CartPoleNoVel-v1, 500")
    assert reference("ppo-cartpole", ["wrappers=MaskVelocity"], 100096).startswith("feed-forward PPO on ppo-lstm's env")
