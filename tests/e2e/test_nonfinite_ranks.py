"""End to end: a NaN or Inf that one rank of ``engine-rl train --nproc 2`` meets alone (issue #37).

``HugeRewardOnRank1CartPole-v0`` (``tests/support/nonfinite_envs.py``) pays rank 1 a reward of
2e38 at the second step of each episode: finite, so no batch check stops, but a DQN loss over a
sample holding two of them is Inf on rank 1 while its gradients, and rank 0's loss, stay finite.
With ``nonfinite=skip`` both ranks skip the same steps (one all-reduce per optim step decides); with
``stop`` both stop and the run's error is one line, rank 1's. Seed 0, the suite's offset added.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from support.compare import differences
from support.seeds import seed_arg

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
DQN = {"env_id": "nonfinite_envs:HugeRewardOnRank1CartPole-v0", "vectorization": "sync", "num_envs": 4,
       "frames_per_batch": 64, "total_frames": 1024, "learning_starts": 256, "optim_steps_per_batch": 8,
       "batch_size": 32, "hidden": "(32,32)", "eps_frames": 512, "eval_every": 100, "eval_episodes": 1}


def train(out: Path, *sets: str) -> subprocess.CompletedProcess:
    args = [a for kv in [*(f"{k}={v}" for k, v in DQN.items()), *sets] for a in ("--set", kv)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "engine_rl", "train", "dqn-cartpole", "--nproc", "2", "--out",
                           str(out), "--no-progress", "--seed", seed_arg(0), "--checkpoint-every", "4", *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_with_skip_both_ranks_skip_the_steps_one_rank_found_non_finite(tmp_path):
    res = train(tmp_path, "nonfinite=skip")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    ranks = [torch.load(folder / "checkpoint_1024.pt", weights_only=True)
             for folder in (tmp_path / "checkpoints", tmp_path / "checkpoints" / "rank1")]
    skipped = [r["trainer.NaNGuard"]["skipped"] for r in ranks]
    assert skipped[0] == skipped[1] and 0 < skipped[0] < summary["optim_steps"], skipped  # some steps, the same ones
    for key in ("qnet", "target_qnet", "optimizer"):
        assert differences(ranks[0][key], ranks[1][key]) == [], key  # no rank stepped alone
    assert all(bool(torch.isfinite(p).all()) for p in ranks[0]["qnet"].values())
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["nonfinite_skipped"] for r in log if r["kind"] == "train"][-1] == skipped[0]


def test_with_stop_both_ranks_stop_and_the_error_is_one_line(tmp_path):
    res = train(tmp_path)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"engine-rl: error \(rank 1 of 2\): NaNGuard: non-finite loss output \(NaN or Inf\) 'loss' at optim step \d+ "
        r"\(batch \d+, frames \d+\); the optimizer step was not taken", lines[0]), res.stderr
    assert res.stdout == "" and not (tmp_path / "summary.json").exists()
