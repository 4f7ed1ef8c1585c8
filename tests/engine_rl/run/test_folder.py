"""The run folder: --out problems and a folder in use are one-line errors before any training; the
lock is released at the end, also on errors; a stale lock is taken over; no checkpoint is written
from NaN weights."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ignite.engine import Events

from engine_rl.cli import main
from engine_rl.recipes import RECIPES
from engine_rl.run.checkpoint import list_checkpoints, load_checkpoint
from engine_rl.run.driver import RunError, make_config, train
from engine_rl.run.lock import LOCK_NAME, RunLock

#: dqn-cartpole, 4 short batches, a checkpoint after each
SMALL = ["--frames", "1024", "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2", "--set", "hidden=(8,)",
         "--set", "eval_episodes=1", "--checkpoint-every", "1", "--no-progress"]


def train_cli(out, *extra):
    return main(["train", "dqn-cartpole", "--out", str(out), *SMALL, *extra])


@pytest.fixture
def no_build(monkeypatch):
    """Fail the test if the recipe is built: the errors below come before any training."""
    def build(config):
        raise AssertionError("the recipe was built")

    monkeypatch.setitem(RECIPES, "dqn-cartpole", dataclasses.replace(RECIPES["dqn-cartpole"], build=build))


def one_error_line(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("engine-rl: error: ") and "Traceback" not in err, err
    return err.removeprefix("engine-rl: error: ").rstrip("\n")


# -- --out problems ------------------------------------------------------------------------------
def test_an_empty_out_is_refused(tmp_path, monkeypatch, capsys, no_build):
    monkeypatch.chdir(tmp_path)
    assert train_cli("") == 2
    assert one_error_line(capsys) == "--out '': empty; name the folder for the run's files (e.g. runs/my-run)"
    assert list(tmp_path.iterdir()) == []  # not runs/... nor anything else
    with pytest.raises(RunError, match="--out '  ': empty"):
        train("dqn-cartpole", make_config("dqn-cartpole"), "  ")


def test_an_out_that_is_a_file_or_under_one_is_refused(tmp_path, capsys, no_build):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert train_cli(notes) == 2
    assert one_error_line(capsys) == (
        f"--out {notes}: is a file, not a folder; name a new or existing folder for the run's files")
    assert train_cli(notes / "run") == 2
    assert one_error_line(capsys) == (
        f"--out {notes / 'run'}: is under {notes}, which is a file, not a folder; name a new or existing folder "
        "for the run's files")
    assert notes.read_text() == "mine"


def test_an_out_that_is_or_is_under_a_dangling_symbolic_link_is_refused(tmp_path, capsys, no_build):
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone" / "runs")  # mkdir said "File exists"
    for out, where in ((link, "is"), (link / "run", f"is under {link}, which is")):
        assert train_cli(out) == 2
        assert one_error_line(capsys) == (
            f"--out {out}: {where} a symbolic link to {tmp_path / 'gone' / 'runs'}, which does not exist; "
            "create that folder, or name another --out")
    assert not (tmp_path / "gone").exists() and link.is_symlink()


def test_an_out_that_cannot_be_created_is_refused(tmp_path, monkeypatch, capsys, no_build):
    def mkdir(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert train_cli(tmp_path / "run") == 2
    assert one_error_line(capsys) == f"--out {tmp_path / 'run'}: cannot create the folder (Permission denied)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_out_is_refused(tmp_path, capsys, no_build):
    out = tmp_path / "run"
    out.mkdir(mode=0o500)
    try:
        assert train_cli(out) == 2
    finally:
        out.chmod(0o700)
    assert one_error_line(capsys) == f"--out {out}: the folder is not writable (permission denied); use another --out"


# -- the lock ------------------------------------------------------------------------------------
def test_a_folder_locked_by_another_run_is_refused_naming_its_pid(tmp_path, capsys, no_build):
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(out):
        assert train_cli(out) == 2
        message = one_error_line(capsys)
        assert train_cli(out, "--resume") == 2  # resuming into it as well
    assert message.startswith(f"{out / LOCK_NAME}: the folder is in use by another run: process {os.getpid()} holds")
    assert sorted(p.name for p in out.iterdir()) == []  # no config.json, no checkpoints; the lock file gone


def test_a_two_process_run_into_a_locked_folder_stops_both_processes_with_one_error(tmp_path):
    """Both ranks agree to stop with status 2; each leaves the process group before it exits (a rank
    that exited holding it could abort in torch's teardown, and the launcher reported status 1 when
    it saw that process first: the race this test once lost)."""
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(out) as lock:
        started = lock.path.read_text().split("started=")[1].strip()
        res = subprocess.run([sys.executable, "-m", "engine_rl", "train", "dqn-cartpole", "--out", str(out), "--nproc",
                              "2", *SMALL], capture_output=True, text=True, timeout=300)
    errors = [line for line in res.stderr.splitlines() if line.startswith("engine-rl: error")]
    assert errors == [  # rank 0 says why; rank 1 stops too, without a second error
        f"engine-rl: error: {out / LOCK_NAME}: the folder is in use by another run: process {os.getpid()} holds this "
        f"lock (started {started}); wait for it to end or use another --out"
    ], res.stderr
    assert res.returncode == 2 and "Traceback" not in res.stderr, f"exit status {res.returncode}; stderr:\n{res.stderr}"
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_concurrent_training_process_keeps_a_second_one_out(tmp_path, capsys):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "engine_rl", "train", "dqn-cartpole", "--out", str(out),
                             *SMALL, "--frames", "1000000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not list_checkpoints(out / "checkpoints") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        assert train_cli(out, "--resume") == 2
        assert f"the folder is in use by another run: process {proc.pid} holds this lock" in one_error_line(capsys)
    finally:
        proc.kill()
        proc.wait()
    assert train_cli(out, "--resume", "--frames", "1000000", "--until-frames", "1") == 0  # a stale lock: taken over
    err = capsys.readouterr().err
    assert f"engine-rl: warning: taking over the stale lock {out / LOCK_NAME} of process {proc.pid} (not running" in err
    assert not (out / LOCK_NAME).exists()


# -- no checkpoint from NaN weights --------------------------------------------------------------
def test_nan_weights_are_not_checkpointed_the_previous_checkpoint_stays_and_the_lock_is_released(
    tmp_path, capsys, monkeypatch
):
    recipe = RECIPES["dqn-cartpole"]

    def build(config):  # the weights turn NaN after the second batch, with no NaN loss to stop the run first
        setup = recipe.build(config)

        @setup.trainer.on(Events.ITERATION_COMPLETED(once=2))
        def diverge(engine):
            with torch.no_grad():
                setup.to_save["qnet"].parameters().__next__().fill_(float("nan"))

        return setup

    monkeypatch.setitem(RECIPES, "dqn-cartpole", dataclasses.replace(recipe, build=build))
    out = tmp_path / "run"
    assert train_cli(out) == 1
    message = one_error_line(capsys)
    [previous] = list_checkpoints(out / "checkpoints")
    frames = load_checkpoint(previous)["trainer"]["frames"]
    assert message.startswith(f"checkpoint at frames {2 * frames}: not written: entry 'qnet' holds non-finite values in ")
    assert message.endswith(f"the previous checkpoint, {previous}, is intact")
    assert all(torch.isfinite(t).all() for t in load_checkpoint(previous)["qnet"].values())
    assert not (out / LOCK_NAME).exists() and not (out / "summary.json").exists()


# -- config.json of older runs -------------------------------------------------------------------

def test_a_removed_field_at_its_old_default_is_no_difference_and_another_value_is_refused(tmp_path):
    from engine_rl.run.folder import check_same_config, config_record, read_config_json

    config = make_config("sac-pendulum")
    record = config_record("sac-pendulum", config)
    assert "precision" not in record
    (tmp_path / "config.json").write_text(json.dumps({**record, "precision": "float32"}))  # before issue 38
    assert read_config_json(tmp_path) == record
    check_same_config(tmp_path, "sac-pendulum", config)
    (tmp_path / "config.json").write_text(json.dumps({**record, "precision": "bfloat16"}))
    match = (r"config\.json: precision='bfloat16' cannot resume: the precision field was removed from the recipes "
             r"\(only its old default, 'float32', resumes\); start a new run in another --out$")
    with pytest.raises(RunError, match=match):
        check_same_config(tmp_path, "sac-pendulum", config)
