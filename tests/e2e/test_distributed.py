"""End to end: ``engine-rl train RECIPE --nproc 2`` (two gloo processes on this machine), and torchrun.

Every run is a new ``python -m engine_rl`` process (which spawns the two ranks), as a user runs it.
Seeds: dqn-cartpole seed 1, ppo-cartpole seeds 0 (learning), 2 (resume) and 3, set below, the
suite's seed offset added (support.seeds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine_rl.cli import main
from support.compare import differences, log
from support.seeds import seed, seed_arg

ROOT = Path(__file__).resolve().parents[2]


def process(*args: str, launcher: tuple[str, ...] = ("-m", "engine_rl"), timeout: int = 300):
    """Run the command in a new process, as a user does; return the finished process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *launcher, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def cli(*args: str, launcher: tuple[str, ...] = ("-m", "engine_rl"), timeout: int = 300) -> dict:
    """Run the command in a new process; return its JSON summary (the last stdout line)."""
    res = process(*args, launcher=launcher, timeout=timeout)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def shared(state: dict) -> dict:
    """A policy state_dict without ``_extra_state`` (its sampling generator, which is each rank's own)."""
    return {k: v for k, v in state.items() if k != "_extra_state"}


def rank_states(out: Path, frames: int) -> list[dict]:
    """The final checkpoints of rank 0 and rank 1, read as a user would (weights_only)."""
    folders = (out / "checkpoints", out / "checkpoints" / "rank1")
    return [torch.load(folder / f"checkpoint_{frames}.pt", weights_only=True) for folder in folders]




def test_two_process_dqn_keeps_replay_shards_and_identical_weights(tmp_path, capsys):
    out = tmp_path / "run"
    summary = cli("train", "dqn-cartpole", "--nproc", "2", "--out", str(out), "--no-progress", "--frames", "2048",
                  "--seed", seed_arg(1), "--set", "learning_starts=512", "--set", "optim_steps_per_batch=8",
                  "--set", "hidden=(32,32)", "--set", "num_envs=4", "--set", "eval_every=2", "--set", "eval_episodes=2",
                  "--checkpoint-every", "2")
    # frames count both ranks: 4 iterations of 2 x 256; learning starts with the first (512 frames)
    assert (summary["frames"], summary["optim_steps"], summary["nproc"], summary["seed"]) == (2048, 4 * 8, 2, seed(1))
    lines = log(out / "metrics.jsonl")  # rank 0 alone writes the log, the summary and the inference files
    assert [r["frames"] for r in lines if r["kind"] == "train"] == [512, 1024, 1536, 2048]
    assert [r["frames"] for r in lines if r["kind"] == "eval"] == [1024, 2048]
    assert {p.name for p in out.iterdir()} == {"best", "checkpoints", "config.json", "inference.pt", "metrics.jsonl",
                                               "policy.pt", "summary.json"}
    assert json.loads((out / "config.json").read_text())["seed"] == seed(1)  # the run's config, not a rank's

    r0, r1 = rank_states(out, 2048)
    rank1_files = sorted(p.name for p in (out / "checkpoints" / "rank1").iterdir())
    assert rank1_files == ["checkpoint_1024.pt", "checkpoint_2048.pt"]
    for key in ("qnet", "target_qnet", "optimizer", "trainer", "trainer.AllReducedEpisodeStats"):
        assert differences(r0[key], r1[key]) == [], key  # one model, one optimizer state, shared counters
    # each rank keeps its own replay shard (its 1024 frames), envs and RNG
    assert r0["replay"]["storage"]["size"] == r1["replay"]["storage"]["size"] == 1024
    assert differences(r0["replay"], r1["replay"]) and differences(r0["collector"], r1["collector"])
    assert not torch.equal(r0["rng"]["torch"], r1["rng"]["torch"])
    # the eval scores are over both ranks' episodes (4), the same in both files
    assert r0["trainer_metrics"]["eval_return_mean"] == r1["trainer_metrics"]["eval_return_mean"]
    inference = torch.load(out / "inference.pt", weights_only=True)["policy"]
    assert all(torch.equal(inference[f"qnet.{k}"], v) for k, v in r0["qnet"].items())

    # a 2-process run resumes only with 2 processes
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress"]) == 2
    assert "holds a run of 2 process(es) and this run has 1; resume it with --nproc 2" in capsys.readouterr().err
    # a refusal inside the spawned processes is one line too: no lines about spawning and terminating them
    refused = process("train", "dqn-cartpole", "--nproc", "2", "--out", str(out), "--no-progress")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"engine-rl: error: {out} already holds checkpoints of a run (checkpoint_2048.pt); continue it with "
        "--resume, or use another --out"
    ]


@pytest.mark.slow
@pytest.mark.ci
def test_ppo_cartpole_learns_with_two_processes(tmp_path):
    """CI bar: seed 0, 40,960 frames over both ranks (20,480 each), greedy return >= 150 (random play: ~22);
    the two ranks end with identical parameters and optimizer states.

    7-10 s of training plus ~8 s of process start-up on the shared 2-core box. Margin checked over
    seeds 0-4 (--seed-offset 0-4) after the GAE value fix (2026-12-07): 193.3, 409.3, 500.0, 460.3, 359.5;
    lowest 193, a thin one (an earlier build scored 144 on seed 3).
    """
    summary = cli("train", "ppo-cartpole", "--nproc", "2", "--frames", "40960", "--seed", seed_arg(0),
                  "--out", str(tmp_path), "--no-progress")
    assert summary["eval_return_mean"] >= 150, summary
    r0, r1 = rank_states(tmp_path, summary["frames"])
    for key in ("policy", "optimizer", "trainer"):
        diff = differences(shared(r0[key]), shared(r1[key]))
        assert diff == [], (key, diff)


# normalized observations (statistics gathered from both ranks), a KL stop (shared), reward scaling
PPO_ARGS = ("--nproc", "2", "--frames", "2048", "--seed", seed_arg(2), "--no-progress", "--set", "eval_every=2",
            "--set", "eval_episodes=2", "--set", "num_epochs=4", "--set", "batch_size=64",
            "--set", "normalize_observations=true", "--set", "normalize_rewards=true", "--set", "target_kl=0.0002",
            "--checkpoint-every", "1")


@pytest.mark.slow
@pytest.mark.ci
def test_distributed_resume_in_new_processes_is_bitwise_identical(tmp_path):
    """2 processes: 4 iterations straight == 2, pause with checkpoints, new processes resume, 2 more.

    The KL stop (target_kl 0.0002) must end some iteration's epochs early: checked over seeds 2-6
    (--seed-offset 0-4), the fewest epochs run in an iteration was 1 or 2 of 4 on each."""
    straight = cli("train", "ppo-cartpole", "--out", str(tmp_path / "straight"), *PPO_ARGS)
    paused = cli("train", "ppo-cartpole", "--out", str(tmp_path / "split"), *PPO_ARGS, "--until-frames", "1024")
    assert paused["paused"] and paused["frames"] == 1024
    resumed = cli("train", "ppo-cartpole", "--out", str(tmp_path / "split"), "--resume", "--nproc", "2",
                  "--no-progress", "--checkpoint-every", "1")
    assert resumed["resumed_from_frames"] == 1024 and not resumed["paused"]
    assert resumed["frames"] == straight["frames"] == 2048

    a, b = rank_states(tmp_path / "straight", 2048), rank_states(tmp_path / "split", 2048)
    for rank in (0, 1):
        assert differences(a[rank], b[rank]) == [], rank
    assert differences(shared(a[0]["policy"]), shared(a[1]["policy"])) == []  # normalizer statistics included
    assert a[0]["policy"]["obs_normalizer.count"].item() == pytest.approx(2048, abs=1e-3)  # both ranks' frames
    assert log(tmp_path / "straight" / "metrics.jsonl") == log(tmp_path / "split" / "metrics.jsonl")
    kl_stops = [r["optim_epochs_run"] for r in log(tmp_path / "split" / "metrics.jsonl") if r["kind"] == "train"]
    assert min(kl_stops) < 4  # the KL stop happened, on both ranks at once (or the run would hang)


@pytest.mark.slow
def test_torchrun_launch_matches_nproc(tmp_path):
    """``torchrun --standalone --nproc-per-node 2 -m engine_rl train ...`` trains exactly as ``--nproc 2``."""
    args = ("--frames", "1024", "--seed", seed_arg(3), "--no-progress", "--set", "eval_every=2", "--set", "eval_episodes=2")
    spawned = cli("train", "ppo-cartpole", "--nproc", "2", "--out", str(tmp_path / "nproc"), *args)
    launched = cli("train", "ppo-cartpole", "--out", str(tmp_path / "torchrun"), *args,
                   launcher=("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "engine_rl"))
    assert launched["nproc"] == 2 and launched["eval_return_mean"] == spawned["eval_return_mean"]
    a, b = rank_states(tmp_path / "nproc", 1024), rank_states(tmp_path / "torchrun", 1024)
    for rank in (0, 1):
        assert differences(a[rank]["policy"], b[rank]["policy"]) == [], rank


@pytest.mark.slow
def test_two_machine_launch_flags_on_one_machine(tmp_path):
    """``--nnodes 2 --node-rank K --master-addr --master-port``: two commands (here on one machine,
    one process each) form one group and train exactly as ``--nproc 2``."""
    from engine_rl.run.launch import free_port

    args = ("train", "ppo-cartpole", "--frames", "1024", "--seed", seed_arg(3), "--no-progress", "--set", "eval_every=2",
            "--set", "eval_episodes=2")
    spawned = cli(*args, "--nproc", "2", "--out", str(tmp_path / "nproc"))
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    nodes = [subprocess.Popen([sys.executable, "-m", "engine_rl", *args, "--out", str(tmp_path / "nodes"),
                               "--nnodes", "2", "--node-rank", str(k), "--master-addr", "127.0.0.1",
                               "--master-port", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT) for k in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    summary = json.loads(outputs[0][0].strip().splitlines()[-1])  # machine 0 has rank 0: it reports
    assert outputs[1][0].strip() == ""
    assert summary["nproc"] == 2 and summary["eval_return_mean"] == spawned["eval_return_mean"]
    a, b = rank_states(tmp_path / "nproc", 1024), rank_states(tmp_path / "nodes", 1024)
    for rank in (0, 1):
        assert differences(a[rank]["policy"], b[rank]["policy"]) == [], rank


@pytest.mark.slow
def test_one_failing_rank_stops_the_run_with_its_error(tmp_path):
    """Rank 1's checkpoint is cut short: on --resume rank 1 fails to load it while rank 0 loads its
    own and waits for rank 1 in the first collective; the command must stop both and exit 1 with
    rank 1's error (not hang)."""
    args = ("train", "ppo-cartpole", "--nproc", "2", "--out", str(tmp_path), "--no-progress", "--frames", "1024",
            "--seed", seed_arg(0), "--set", "eval_every=100", "--set", "eval_episodes=1", "--checkpoint-every", "1")
    assert cli(*args, "--until-frames", "512")["paused"]
    broken = tmp_path / "checkpoints" / "rank1" / "checkpoint_512.pt"
    broken.write_bytes(broken.read_bytes()[:1000])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "engine_rl", *args, "--resume"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert res.returncode == 1, res.stderr[-3000:]
    assert f"engine-rl: error (rank 1 of 2): checkpoint {broken}: truncated or not a checkpoint" in res.stderr
    assert res.stdout.strip() == ""  # no summary: the run did not finish
