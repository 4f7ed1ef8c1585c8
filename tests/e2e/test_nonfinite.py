"""End to end: one non-finite policy for every recipe (issue #27, item 2).

With an env whose rewards turn NaN after 100 steps per env copy (``tests/support/nonfinite_envs.py``)
each recipe family stops at the first NaN batch with a :class:`NonFiniteError` naming the key
(``("next", "reward")``, written ``'next.reward'``), the batch, the frames and the optim step; no
checkpoint, inference or policy file is written after it, and the checkpoints before it are
finite throughout. With ``nonfinite="skip"``, steps whose loss or gradients are not finite are
skipped and counted (``nonfinite_skipped`` in metrics.jsonl) and the weights stay finite.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine_rl.events import RLEvents
from engine_rl.recipes import get_recipe
from engine_rl.run.checkpoint import list_checkpoints
from engine_rl.run.driver import make_config, train
from handlers.nan_guard import NonFiniteError

SUPPORT = Path(__file__).resolve().parents[1] / "support"
CARTPOLE, PENDULUM = "nonfinite_envs:NaNRewardCartPole-v0", "nonfinite_envs:NaNRewardPendulum-v0"

DQN = {"env_id": CARTPOLE, "vectorization": "sync", "num_envs": 4, "frames_per_batch": 64, "total_frames": 1024,
       "learning_starts": 256, "optim_steps_per_batch": 8, "batch_size": 32, "hidden": (32, 32), "eps_frames": 512,
       "eval_every": 100, "eval_episodes": 1}
OFF_POLICY = {"env_id": PENDULUM, "total_frames": 300, "frames_per_batch": 1, "learning_starts": 50, "hidden": (32, 32),
              "batch_size": 32, "eval_every_frames": 300, "eval_episodes": 1}
PPO = {"env_id": CARTPOLE, "vectorization": "sync", "total_frames": 2048, "num_epochs": 2, "eval_every": 100,
       "eval_episodes": 1}


@pytest.fixture(autouse=True)
def nan_envs(monkeypatch):
    """``nonfinite_envs:...`` ids resolve: gymnasium imports the module, which registers them."""
    monkeypatch.syspath_prepend(str(SUPPORT))


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def _all_finite(path):
    state = torch.load(path, weights_only=True)
    return all(bool(torch.isfinite(t).all()) for t in _tensors(state) if t.is_floating_point())


# recipe, config, checkpoint_every (batches), NaN batch, its frames, optim steps before it
STOPS = [
    # 16 steps per env copy and batch: steps 97-112 in batch 7; optim steps in batches 4-6 (frames >= 256)
    ("dqn-cartpole", DQN, 1, 7, 448, 24),
    # one frame per batch: the 101st; optim steps in batches 50-100
    ("sac-pendulum", OFF_POLICY, 25, 101, 101, 51),
    ("td3-pendulum", OFF_POLICY, 25, 101, 101, 51),
    # 32 steps per env copy and batch: steps 97-128 in batch 4; 3 batches x 2 epochs before it
    ("ppo-cartpole", PPO, 1, 4, 1024, 6),
]


@pytest.mark.parametrize("name, fields, every, batch, frames, steps", STOPS, ids=[s[0] for s in STOPS])
def test_a_nan_reward_stops_every_recipe_before_any_checkpoint_of_it(tmp_path, name, fields, every, batch, frames,
                                                                     steps):
    match = (rf"^NaNGuard: non-finite value \(NaN or Inf\) in batch key 'next.reward' at batch {batch} "
             rf"\(frames {frames}, optim step {steps}\)$")
    with pytest.raises(NonFiniteError, match=match):
        train(name, make_config(name, fields), tmp_path, progress=False, checkpoint_every=every)
    checkpoints = list_checkpoints(tmp_path / "checkpoints")
    frames_per_batch = frames // batch
    assert checkpoints[-1].name == f"checkpoint_{frames - frames_per_batch}.pt"  # the batch before the NaN
    assert all(_all_finite(path) for path in checkpoints)
    assert not any((tmp_path / f).exists() for f in ("inference.pt", "policy.pt", "summary.json"))
    assert not list((tmp_path / "best").glob("*.pt"))


def test_cli_reports_a_nan_reward_in_one_line_with_exit_code_1(tmp_path):
    sets = [f"{k}={v}" for k, v in DQN.items() if k != "hidden"] + ["hidden=(32,32)"]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    done = subprocess.run(
        [sys.executable, "-m", "engine_rl", "train", "dqn-cartpole", "--out", str(tmp_path / "run"), "--no-progress",
         "--checkpoint-every", "1", *[a for kv in sets for a in ("--set", kv)]],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "engine-rl: error: NaNGuard: non-finite value (NaN or Inf) in batch key 'next.reward' at batch 7 "
        "(frames 448, optim step 24)"
    ]
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")][-1] == "checkpoint_384.pt"


def test_off_policy_diverging_with_nonfinite_skip_skips_and_counts(tmp_path):
    """SAC at lr=1e10: after the first step every loss is infinite; each such step is skipped."""
    fields = {**OFF_POLICY, "env_id": "Pendulum-v1", "lr": 1e10, "nonfinite": "skip", "learning_starts": 100}
    summary = train("sac-pendulum", make_config("sac-pendulum", fields), tmp_path, progress=False)
    assert summary["frames"] == 300 and summary["optim_steps"] == 201
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in lines if r["kind"] == "train"]
    assert [r["nonfinite_skipped"] for r in train_lines[:100]] == [0] * 100  # before learning starts
    skipped = train_lines[-1]["nonfinite_skipped"]
    assert 150 <= skipped <= 200 and "Infinity" in {train_lines[-1]["loss_qvalue"], train_lines[-1]["loss_alpha"]}
    state = torch.load(tmp_path / "checkpoints" / "checkpoint_300.pt", weights_only=True)
    assert state["trainer.NaNGuard"] == {"skipped": skipped}
    assert {float(s["step"]) for s in state["critic_optimizer"]["state"].values()} == {201.0 - skipped}
    assert _all_finite(tmp_path / "checkpoints" / "checkpoint_300.pt") and _all_finite(tmp_path / "inference.pt")


def test_dqn_with_nonfinite_skip_skips_an_injected_nan_gradient():
    """Prioritized replay too: the skipped steps write no priority and move no weight."""
    from handlers.distributed import add_handler_first

    fields = {**DQN, "env_id": "CartPole-v1", "vectorization": "vector_entry_point", "nonfinite": "skip",
              "prioritized": True, "target_tau": 0.5, "max_grad_norm": 1.0}
    setup = get_recipe("dqn-cartpole").build(make_config("dqn-cartpole", fields))
    qnet = setup.to_save["qnet"]
    poisoned = {3, 10, 17}

    def poison(engine):
        if engine.state.optim_steps in poisoned:
            qnet[0].weight.grad[0, 0] = float("nan")

    add_handler_first(setup.trainer, RLEvents.BACKWARD_COMPLETED, poison)
    setup.trainer.run()
    setup.close()
    state = setup.trainer.state
    assert state.optim_steps == 104 and state.metrics["nonfinite_skipped"] == 3  # batches 4-16 (frames >= 256)
    assert {float(s["step"]) for s in setup.to_save["optimizer"].state.values()} == {101.0}
    nets = [*qnet.parameters(), *setup.to_save["target_qnet"].parameters()]
    assert all(bool(torch.isfinite(p).all()) for p in nets)
    replay = setup.to_save["replay"]
    assert np.isfinite(replay.sampler.tree.leaves[: len(replay)]).all()


def test_cli_stops_at_a_nan_reward_of_the_evaluation_env_alone_in_one_line_with_exit_code_1(tmp_path):
    """``NaNEvalRewardCartPole-v0`` pays NaN at step 3 of the episodes of copies reset with a seed >= 10,000:
    the evaluation env's (eval_seed 10,000), not the training env's. The run stops at its first evaluation
    (batch 2), before that batch's checkpoint, with exit 1 and one line; the checkpoint before it is intact."""
    sets = {**DQN, "env_id": "nonfinite_envs:NaNEvalRewardCartPole-v0", "learning_starts": 128,
            "optim_steps_per_batch": 2, "hidden": "(8,)", "eval_every": 2, "eval_episodes": 2}
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    done = subprocess.run(
        [sys.executable, "-m", "engine_rl", "train", "dqn-cartpole", "--out", str(tmp_path / "run"), "--no-progress",
         "--checkpoint-every", "1", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "engine-rl: error: ValidationRollout: non-finite value (NaN or Inf) in key 'next.reward' of evaluation env "
        "copy 0 of 2 at step 3 of its episode 1, in the evaluation after batch 2 (frames 128)"
    ]
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["checkpoint_64.pt"]
    assert _all_finite(tmp_path / "run" / "checkpoints" / "checkpoint_64.pt")
    assert not any((tmp_path / "run" / f).exists() for f in ("inference.pt", "policy.pt", "summary.json"))
