"""``--set n_step=3`` end to end: the replay holds n-step rows, the checkpoint the open windows."""

import json

import pytest
import torch

from engine_rl.cli import main
from support.seeds import seed_arg


def _run(recipe, out, *args, capsys):
    assert main(["train", recipe, "--out", str(out), "--no-progress", "--set", "n_step=3", *args]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return summary, torch.load(summary["checkpoint"], weights_only=True)


def test_dqn_cartpole_with_n_step_3_stores_three_frame_rows(tmp_path, capsys):
    summary, state = _run("dqn-cartpole", tmp_path / "run", "--frames", "2048", "--seed", seed_arg(1),
                          "--set", "learning_starts=512", "--set", "optim_steps_per_batch=8", "--set", "hidden=(32,)",
                          "--set", "num_envs=4", "--set", "eval_every=4", "--set", "eval_episodes=2",
                          "--set", "prioritized=true", capsys=capsys)
    assert summary["frames"] == 2048 and summary["optim_steps"] == 8 * 7  # batches 2..8 of 256 frames learn
    open_windows = state["trainer.NStepTransitions"]["open"]
    assert open_windows.shape == (4, 2)
    # every frame is in one row, but for those whose window is still open
    assert state["replay"]["storage"]["size"] == 2048 - int(open_windows.sum())
    rows = state["replay"]["storage"]["data"]
    size = state["replay"]["storage"]["size"]
    discount, terminated = rows["next"]["discount"][:size], rows["next"]["terminated"][:size]
    # CartPole terminates (discount 0) long before its 500-step truncation
    assert torch.equal(discount == 0, terminated) and bool(terminated.any())
    assert discount[~terminated].tolist() == pytest.approx([0.99**3] * int((~terminated).sum()))
    assert float(rows["next"]["reward"][:size].max()) == pytest.approx(1 + 0.99 + 0.99**2)
    assert state["replay"]["sampler"]["priorities"][:size].gt(0).all()
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["replay_size"] for r in lines if r["kind"] == "train"][-1] == size


def test_sac_pendulum_with_n_step_3_bootstraps_truncated_windows_from_their_last_frame(tmp_path, capsys):
    summary, state = _run("sac-pendulum", tmp_path / "run", "--frames", "600", "--seed", seed_arg(2),
                          "--set", "learning_starts=200", "--set", "hidden=(16,)", "--set", "eval_every_frames=600",
                          "--set", "eval_episodes=1", capsys=capsys)
    assert summary["frames"] == 600 and summary["optim_steps"] == 401
    # one frame a batch; three 200-step episodes, each truncated: no window is left open
    assert not state["trainer.NStepTransitions"]["open"].any()
    rows = state["replay"]["storage"]["data"]
    assert state["replay"]["storage"]["size"] == 600
    discount = rows["next"]["discount"][:600]
    # a window starting 2 frames (1 frame) before a truncation sums 2 (1) frames and keeps gamma^2 (gamma)
    counts = {round(v, 6): int((discount == v).sum()) for v in discount.unique().tolist()}
    assert counts == {round(0.99**1, 6): 3, round(0.99**2, 6): 3, round(0.99**3, 6): 594}
    truncated = rows["next"]["truncated"][:600].reshape(-1)
    assert int(truncated.sum()) == 9  # the last 3 windows of each episode end at its truncation
