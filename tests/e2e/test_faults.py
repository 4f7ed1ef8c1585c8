"""Faults: SIGKILL mid-run, a kill during a checkpoint write or between a new best policy and the
next checkpoint, a damaged checkpoint, a resume from an older checkpoint, a full disk, an env that raises.

Every recovery is checked against a straight run of the same config (dqn-cartpole, seed 1 plus the
suite's seed offset): the resumed run ends bitwise identical, so no work was lost beyond what the
last checkpoint missed. The evaluations' score is set (``support.scores``): better at 1,024,
2,048 and 3,072 frames, worse after, in every process of every run here, so a second best policy
comes at 2,048 frames on every CPU and seed (what the network learns differs between them).
"""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from engine_rl.cli import main
from engine_rl.recipes import RECIPES
from engine_rl.run.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint
from support.compare import differences, log
from support.scores import peaking_at, scored_by_frames
from support.seeds import seed, seed_arg

TOTAL = 6144  # 24 batches of 256 frames; a checkpoint every 2 batches
ARGS = ["--frames", str(TOTAL), "--seed", seed_arg(1), "--set", "learning_starts=512", "--set", "optim_steps_per_batch=16",
        "--set", "hidden=(32,32)", "--set", "buffer_size=4096", "--set", "prioritized=true", "--set", "eval_every=4",
        "--set", "eval_episodes=3", "--set", "num_envs=4", "--checkpoint-every", "2", "--no-progress"]
EVERY_FRAMES = 2 * 256
PEAK = 3072
SCORE = peaking_at(PEAK)  # evaluations every 1,024 frames: new bests at 1,024, 2,048 and 3,072 frames
TESTS = str(Path(__file__).resolve().parents[1])  # support/, for the processes the tests start
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}
#: What each process of these runs does first, as the fixtures below do in this one.
SET_SCORE = f"""
from engine_rl.recipes import RECIPES
from support.scores import peaking_at, scored_by_frames
RECIPES["dqn-cartpole"] = scored_by_frames("dqn-cartpole", peaking_at({PEAK}))
"""
CLI = SET_SCORE + "import sys\nfrom engine_rl.cli import main\nsys.exit(main(sys.argv[1:]))\n"


@pytest.fixture(autouse=True)
def set_score(monkeypatch):
    monkeypatch.setitem(RECIPES, "dqn-cartpole", scored_by_frames("dqn-cartpole", SCORE))


def resume(out, capsys, *extra):
    capsys.readouterr()
    rc = main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress", "--checkpoint-every", "2",
               *extra])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def assert_resumed_from(summary, checkpoint):
    """The run went on from ``checkpoint`` to the end (the summary names the file only if the
    rotation, two kept, has not deleted it since)."""
    frames = int(checkpoint.stem.removeprefix("checkpoint_"))
    named = str(checkpoint) if checkpoint.exists() else None
    assert (summary["resumed_from"], summary["resumed_from_frames"], summary["frames"]) == (named, frames, TOTAL)


def assert_same_as_straight(out, straight):
    final = f"checkpoints/checkpoint_{TOTAL}.pt"
    a = torch.load(straight / final, weights_only=True)
    b = torch.load(out / final, weights_only=True)
    assert differences(a, b) == []
    assert log(straight / "metrics.jsonl") == log(out / "metrics.jsonl")


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(RECIPES, "dqn-cartpole", scored_by_frames("dqn-cartpole", SCORE))
        assert main(["train", "dqn-cartpole", "--out", str(out), *ARGS]) == 0
    evals = [r for r in log(out / "metrics.jsonl") if r["kind"] == "eval"]
    assert [(r["frames"], r["eval_return_mean"]) for r in evals] == [(f, SCORE(f)) for f in range(1024, TOTAL + 1, 1024)]
    return out


def test_sigkill_mid_run_then_resume_loses_only_the_work_since_the_last_checkpoint(straight, tmp_path, capsys):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", CLI, "train", "dqn-cartpole", "--out", str(out), *ARGS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV)
    deadline = time.monotonic() + 120
    while not list_checkpoints(out / "checkpoints") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(0.1)  # let it run past the checkpoint: that work is lost
    # send_signal does nothing if the process has ended already (poll() above reaps a process that
    # failed before its first checkpoint, and os.kill would raise ProcessLookupError): the assertion
    # below then shows why it ended
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"it ended with {proc.returncode}: {proc.stderr.read().decode()}"
    assert not (out / "summary.json").exists()  # it really died mid-run

    newest = latest_checkpoint(out / "checkpoints")
    saved_frames = load_checkpoint(newest)["trainer"]["frames"]
    logged = [json.loads(line)["frames"] for line in (out / "metrics.jsonl").read_text().splitlines()[:-1]]
    assert 0 < saved_frames < TOTAL and max(logged) - saved_frames <= EVERY_FRAMES  # lost <= one checkpoint interval

    assert_resumed_from(resume(out, capsys), newest)
    assert_same_as_straight(out, straight)


DIE_WHILE_WRITING = textwrap.dedent(
    """
    import io, os, signal, sys, torch
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # the second checkpoint: write half of it, then get killed
        if str(getattr(f, "name", "")).endswith("checkpoint_1024.pt.partial"):
            buf = io.BytesIO()
            real_save(obj, buf, *args, **kwargs)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
    """
) + CLI


def test_kill_during_a_checkpoint_write_leaves_the_previous_checkpoint_loadable(straight, tmp_path, capsys):
    out = tmp_path / "killed"
    res = subprocess.run([sys.executable, "-c", DIE_WHILE_WRITING, "train", "dqn-cartpole", "--out", str(out), *ARGS],
                         capture_output=True, text=True, timeout=300, env=CHILD_ENV)
    assert res.returncode == -signal.SIGKILL, res.stderr
    partial = out / "checkpoints" / ".checkpoint_1024.pt.partial"
    assert partial.exists() and [p.name for p in list_checkpoints(out / "checkpoints")] == ["checkpoint_512.pt"]
    with pytest.raises(CheckpointError, match="truncated"):  # what a non-atomic write would have left
        load_checkpoint(partial)
    assert load_checkpoint(out / "checkpoints" / "checkpoint_512.pt")["trainer"]["frames"] == 512

    assert_resumed_from(resume(out, capsys), out / "checkpoints" / "checkpoint_512.pt")
    assert not partial.exists()
    assert_same_as_straight(out, straight)


def test_damaged_newest_checkpoint_is_named_and_an_earlier_one_resumes(straight, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    older, newest = list_checkpoints(out / "checkpoints")
    newest.write_bytes(newest.read_bytes()[:1000])
    capsys.readouterr()
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"engine-rl: error: checkpoint {newest}: truncated or not a checkpoint")
    assert "Traceback" not in err and "pickle" not in err.lower()

    summary = resume(out, capsys, "--resume", str(older))  # the folder keeps the last two
    assert_resumed_from(summary, older)
    assert_same_as_straight(out, straight)  # the damaged file is rewritten by the replayed batches


DIE_AFTER_A_NEW_BEST = textwrap.dedent(
    """
    import os, signal, sys, torch
    real_save = torch.save
    bests = []

    def save(obj, f, *args, **kwargs):  # killed as the checkpoint after the second best policy starts
        name = os.path.basename(str(getattr(f, "name", "")))
        if name.startswith(".best_policy_"):
            bests.append(name)
        elif name.startswith(".checkpoint_") and len(bests) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
    """
) + CLI


def best_files_named_by(checkpoint):
    return [name for _, name in load_checkpoint(checkpoint)["evaluator.Checkpoint"]["_saved"]]


def test_kill_between_a_new_best_policy_and_the_next_checkpoint_then_resume_matches_a_straight_run(
    straight, tmp_path, capsys
):
    """Issue 27: the newest checkpoint's best-policy state names a file that the second best's
    rotation deleted; every --resume used to crash on it (FileNotFoundError). The second best
    comes at 2,048 frames (the set score), the kill as checkpoint_2048.pt starts."""
    out = tmp_path / "killed"
    res = subprocess.run([sys.executable, "-c", DIE_AFTER_A_NEW_BEST, "train", "dqn-cartpole", "--out", str(out), *ARGS],
                         capture_output=True, text=True, timeout=300, env=CHILD_ENV)
    assert res.returncode == -signal.SIGKILL, res.stderr
    newest = latest_checkpoint(out / "checkpoints")
    [named] = best_files_named_by(newest)
    assert newest.name == "checkpoint_1536.pt" and named.startswith("best_policy_1024_")
    assert not (out / "best" / named).exists() and len(list((out / "best").glob("best_policy_*.pt"))) == 1
    assert (out / "run.lock").exists()  # the killed run's lock: taken over with a warning

    assert_resumed_from(resume(out, capsys), newest)
    assert_same_as_straight(out, straight)
    assert [p.name for p in (out / "best").iterdir()] == [p.name for p in (straight / "best").iterdir()]
    assert not (out / "run.lock").exists()


def test_resume_from_an_older_checkpoint_replaces_what_followed_it(straight, tmp_path, capsys):
    """The issue's reproduction: pause, then --resume the checkpoint before the last one (which the
    damaged-checkpoint error advises); its best state names a best policy deleted since."""
    out = tmp_path / "run"
    assert main(["train", "dqn-cartpole", "--out", str(out), *ARGS, "--until-frames", "2048"]) == 0
    older = out / "checkpoints" / "checkpoint_1536.pt"
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["checkpoint_1536.pt", "checkpoint_2048.pt"]
    [named] = best_files_named_by(older)
    assert not (out / "best" / named).exists()

    summary = resume(out, capsys, "--resume", str(older))
    assert_resumed_from(summary, older)
    assert_same_as_straight(out, straight)
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == [f"checkpoint_{TOTAL - 512}.pt", f"checkpoint_{TOTAL}.pt"]
    assert Path(summary["best_checkpoint"]).is_file()


def test_a_full_disk_while_checkpointing_is_one_error_and_the_run_resumes(straight, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # the disk fills up during the second checkpoint
        if str(getattr(f, "name", "")).endswith(".checkpoint_1024.pt.partial"):
            f.write(b"PK\x03\x04 the first bytes")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    capsys.readouterr()
    with monkeypatch.context() as full_disk:
        full_disk.setattr(torch, "save", save)
        assert main(["train", "dqn-cartpole", "--out", str(out), *ARGS]) == 1
    err = capsys.readouterr().err
    ckpt = out / "checkpoints"
    assert err == (f"engine-rl: error: checkpoint {ckpt / 'checkpoint_1024.pt'}: cannot be written (No space left on "
                   f"device); the partial file was removed; the previous checkpoint, {ckpt / 'checkpoint_512.pt'}, "
                   "is intact\n")
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint_512.pt"]
    assert not (out / "run.lock").exists() and not (out / "summary.json").exists()

    assert_resumed_from(resume(out, capsys), ckpt / "checkpoint_512.pt")  # space again
    assert_same_as_straight(out, straight)


FAULT = {"on": True}


FAILING_COPY_SEED = seed(1) + 2  # copy 2 of a collector seeded seed(1)


class SensorFailure(CartPoleEnv):
    """CartPole whose copy seeded with FAILING_COPY_SEED (copy 2 of the runs' collector) raises at its 400th step."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.total_steps = 0  # an env attribute: saved and restored with the env state

    def step(self, action):
        self.total_steps += 1
        if FAULT["on"] and self._np_random_seed == FAILING_COPY_SEED and self.total_steps >= 400:
            raise RuntimeError("sensor failure")
        return super().step(action)


gym.register("SensorFailureCartPole-v0", entry_point=SensorFailure, max_episode_steps=500)


def test_env_error_names_env_and_step_and_keeps_the_latest_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    args = [*ARGS, "--set", "env_id=SensorFailureCartPole-v0", "--set", "vectorization=sync"]
    FAULT["on"] = True
    assert main(["train", "dqn-cartpole", "--out", str(out), *args]) == 1
    err = capsys.readouterr().err
    newest = latest_checkpoint(out / "checkpoints")
    assert err.startswith(
        "engine-rl: error: GymCollector: env.step raised RuntimeError: sensor failure -- in env 2 of 4 (step "
    )
    assert "at vector step 400;" in err and f"the latest checkpoint, {newest}, is intact: continue with --resume" in err
    assert load_checkpoint(newest)["trainer"]["frames"] == 1536  # written before the failing batch
    assert not (out / "summary.json").exists() and not (out / "run.lock").exists()  # the lock released on the error

    FAULT["on"] = False  # the sensor is fixed: the run continues from the checkpoint
    assert_resumed_from(resume(out, capsys), newest)
