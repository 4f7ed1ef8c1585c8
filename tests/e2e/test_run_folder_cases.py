"""What ``--resume`` may continue from, and what a resume of a run killed near its end finishes.

A table of cases from issue 37 (C): each sets up run folders, runs ``engine-rl train ... --resume``
and checks the exit status, the exact stderr and that nothing of the run was deleted or replaced.
Runs are tiny dqn-cartpole ones (4 batches of 256 frames, a checkpoint every batch, an evaluation
after the third and at the end); what is checked is where files go, not what the network learns.
"""

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine_rl.cli import main
from engine_rl.run.checkpoint import list_checkpoints
from support.compare import log
from support.seeds import seed_arg

ARGS = ["--frames", "1024", "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2",
        "--set", "hidden=(16,)", "--set", "buffer_size=1024", "--set", "num_envs=4", "--set", "eval_every=3",
        "--set", "eval_episodes=1", "--checkpoint-every", "1", "--no-progress"]


def train(out, *extra, seed=1):
    return main(["train", "dqn-cartpole", "--out", str(out), "--seed", seed_arg(seed), *ARGS, *extra])


def snapshot(out):
    """Every file of a run folder with its bytes (the lock aside)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "run.lock"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (seed 1), and another one (seed 2) paused at half."""
    root = tmp_path_factory.mktemp("runs")
    assert train(root / "mine") == 0
    assert train(root / "other", "--until-frames", "512", seed=2) == 0
    return root


def copy_of(finished, tmp_path, name="mine"):
    out = tmp_path / name
    shutil.copytree(finished / name, out)
    return out


def foreign_checkpoint(out, finished, tmp_path):
    other = copy_of(finished, tmp_path, "other")
    return ["--resume", str(other / "checkpoints" / "checkpoint_512.pt")]


def own_missing_checkpoint(out, finished, tmp_path):
    return ["--resume", str(out / "checkpoints" / "checkpoint_9999.pt")]


def checkpoints_gone(out, finished, tmp_path):
    shutil.rmtree(out / "checkpoints")
    return ["--resume"]


def checkpoints_emptied(out, finished, tmp_path):
    for path in list_checkpoints(out / "checkpoints"):
        path.unlink()
    return ["--resume"]


#: case -> (prepare the folder and give the extra arguments, the expected stderr)
REFUSED = {
    "another run's checkpoint": (
        foreign_checkpoint,
        "engine-rl: error: --resume {other}/checkpoints/checkpoint_512.pt: not a checkpoint of the run in {out} (its "
        "checkpoints are in {out}/checkpoints); a run continues from its own checkpoints only (to continue the run "
        "that wrote it, use that run's folder as --out)\n",
    ),
    "a checkpoint of this run that is not there": (
        own_missing_checkpoint,
        "engine-rl: error: --resume {out}/checkpoints/checkpoint_9999.pt: no such checkpoint (checkpoint_<frames>.pt "
        "files in {out}/checkpoints: checkpoint_768.pt, checkpoint_1024.pt)\n",
    ),
    "checkpoints/ gone, results kept": (
        checkpoints_gone,
        "engine-rl: error: --resume: {out} holds no checkpoint to continue from ({out}/checkpoints is empty or gone), "
        "so the run would start over and replace {out}/metrics.jsonl, {out}/summary.json, {out}/inference.pt, "
        "{out}/policy.pt, {out}/best/{best}; drop --resume to start over (replacing them), or move them away, or use "
        "another --out\n",
    ),
    "checkpoints/ emptied, results kept": (
        checkpoints_emptied,
        "engine-rl: error: --resume: {out} holds no checkpoint to continue from ({out}/checkpoints is empty or gone), "
        "so the run would start over and replace {out}/metrics.jsonl, {out}/summary.json, {out}/inference.pt, "
        "{out}/policy.pt, {out}/best/{best}; drop --resume to start over (replacing them), or move them away, or use "
        "another --out\n",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_resume_that_would_lose_work_is_refused_and_changes_nothing(case, finished, tmp_path, capsys):
    prepare, expected = REFUSED[case]
    out = copy_of(finished, tmp_path)
    extra = prepare(out, finished, tmp_path)
    before = snapshot(out)
    best = next((out / "best").glob("*.pt")).name
    capsys.readouterr()
    assert main(["train", "dqn-cartpole", "--out", str(out), *extra, "--no-progress"]) == 2
    assert capsys.readouterr().err == expected.format(out=out, other=tmp_path / "other", best=best)
    assert snapshot(out) == before  # nothing deleted, nothing replaced
    assert not (out / "run.lock").exists()


def test_the_refusal_says_what_to_do_and_dropping_resume_starts_over(finished, tmp_path, capsys):
    out = copy_of(finished, tmp_path)
    shutil.rmtree(out / "checkpoints")
    assert train(out) == 0  # no --resume: the user chose to start over
    assert log(out / "metrics.jsonl") == log(finished / "mine" / "metrics.jsonl")


def test_a_run_killed_before_its_first_checkpoint_with_nothing_logged_starts_over_on_resume(finished, tmp_path):
    out = copy_of(finished, tmp_path)
    for name in ("checkpoints", "best"):
        shutil.rmtree(out / name)
    for name in ("metrics.jsonl", "summary.json", "inference.pt", "policy.pt"):
        (out / name).unlink()
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress"]) == 0
    assert log(out / "metrics.jsonl") == log(finished / "mine" / "metrics.jsonl")


#: The CLI, killing its own process: after the final checkpoint is in place, before the end files
#: (``end-files``), or inside the last evaluation (``final-evaluation``).
KILL = textwrap.dedent(
    """
    import os, signal, sys
    where, argv = sys.argv[1], sys.argv[2:]
    if where == "final-evaluation":
        from handlers.validation import ValidationRollout
        evaluate = ValidationRollout.__call__

        def last(self, engine):
            if engine.state.frames >= engine.total_frames:
                os.kill(os.getpid(), signal.SIGKILL)
            return evaluate(self, engine)

        ValidationRollout.__call__ = last
    else:
        replace = os.replace

        def end_files(src, dst):
            if os.path.basename(dst) == "policy.pt":
                os.kill(os.getpid(), signal.SIGKILL)
            return replace(src, dst)

        os.replace = end_files
    from engine_rl.cli import main
    sys.exit(main(argv))
    """
)


@pytest.mark.parametrize("where", ["final-evaluation", "end-files"])
def test_a_run_killed_at_its_end_finishes_its_evaluation_best_policy_and_summary_on_resume(
    where, finished, tmp_path, capsys
):
    """Issue 37: killed after the final checkpoint was written, before the final evaluation, a
    resumed run wrote no final eval line, an empty best/ and a summary with no scores; now the
    final checkpoint comes after the final evaluation, so the resume redoes it."""
    out = tmp_path / "killed"
    argv = ["train", "dqn-cartpole", "--out", str(out), "--seed", seed_arg(1), *ARGS]
    res = subprocess.run([sys.executable, "-c", KILL, where, *argv], capture_output=True, text=True, timeout=600)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert not (out / "summary.json").exists()
    capsys.readouterr()
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    straight = finished / "mine"
    assert log(out / "metrics.jsonl") == log(straight / "metrics.jsonl")  # the final eval line included
    assert sorted(p.name for p in (out / "best").iterdir()) == sorted(p.name for p in (straight / "best").iterdir())
    assert (out / "inference.pt").is_file() and (out / "policy.pt").is_file()
    expected = json.loads((straight / "summary.json").read_text())
    scores = {k: v for k, v in expected.items() if k.startswith("eval_")}
    assert scores and {k: v for k, v in summary.items() if k.startswith("eval_")} == scores
    if where == "end-files":  # nothing left to train: the summary says so instead of a made-up speed
        assert summary["resumed_from_frames"] == 1024 and summary["fps"] is None
    else:  # the last batch again, from the checkpoint before it
        assert summary["resumed_from_frames"] == 768 and summary["fps"] > 0


def test_resumed_from_is_null_once_the_rotation_deleted_it_and_its_frames_are_kept(finished, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--until-frames", "256") == 0
    capsys.readouterr()
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress", "--checkpoint-every", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not (out / "checkpoints" / "checkpoint_256.pt").exists()  # n_saved=2 kept 768 and 1024
    assert summary["resumed_from"] is None and summary["resumed_from_frames"] == 256
    assert json.loads((out / "summary.json").read_text())["resumed_from"] is None
