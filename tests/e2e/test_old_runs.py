"""Run folders written before the layout change of issue 38 still resume and evaluate.

``tests/fixtures/runs_c75eee3/`` holds three run folders made by commit c75eee3 (the code before
the run package, the config base and the removal of ``precision``), each paused at half its
frames with the commands in ``PAUSED`` below (their seed is fixed there: the fixture does not
follow the suite's seed offset). Resuming one with today's code must finish it; DQN and SAC, whose
numbers the restructuring kept bit for bit, must end exactly where a run of today's code ends.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine_rl.cli import main
from support.compare import differences, log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs_c75eee3"

#: The arguments each fixture was made with (plus ``--until-frames``: half of ``--frames``).
PAUSED = {
    "dqn-cartpole": ["--seed", "3", "--frames", "1024", "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2",
                     "--set", "hidden=(16,)", "--set", "buffer_size=512", "--set", "num_envs=4", "--set", "eval_every=2",
                     "--set", "eval_episodes=1", "--set", "prioritized=true", "--checkpoint-every", "1"],
    "ppo-cartpole": ["--seed", "3", "--frames", "1024", "--set", "num_epochs=1", "--set", "eval_every=2",
                     "--set", "eval_episodes=1", "--set", "normalize_observations=true",
                     "--set", "normalize_rewards=true", "--set", "hidden=(16,)", "--checkpoint-every", "1"],
    "sac-pendulum": ["--seed", "3", "--frames", "600", "--set", "learning_starts=200", "--set", "hidden=(16,)",
                     "--set", "frames_per_batch=100", "--set", "eval_every_frames=200", "--set", "eval_episodes=1",
                     "--set", "buffer_size=1000", "--checkpoint-every", "1"],
}
#: Recipes whose numbers the restructuring left unchanged (PPO samples its actions with torch's
#: own sampler since, so its continuation differs from a run of today's code).
SAME_NUMBERS = ("dqn-cartpole", "sac-pendulum")


def final_checkpoint(out):
    summary = json.loads((out / "summary.json").read_text())
    return torch.load(out / "checkpoints" / f"checkpoint_{summary['frames']}.pt", weights_only=True)


@pytest.mark.parametrize("recipe", sorted(PAUSED))
def test_an_old_run_resumes_to_its_end(recipe, tmp_path, capsys):
    """sac-pendulum's config.json holds ``"precision": "float32"``, a field removed since: at its old
    default it is no difference to the config of today."""
    out = tmp_path / "old"
    shutil.copytree(FIXTURES / recipe, out)
    saved = json.loads((out / "config.json").read_text())
    capsys.readouterr()
    assert main(["train", recipe, "--out", str(out), "--resume", "--no-progress"]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] >= saved["total_frames"] and not summary["paused"]
    assert summary["resumed_from_frames"] == saved["total_frames"] // 2
    assert "eval_return_mean" in summary and Path(summary["inference"]).is_file()
    if recipe in SAME_NUMBERS:
        today = tmp_path / "today"
        assert main(["train", recipe, "--out", str(today), "--no-progress", *PAUSED[recipe]]) == 0
        assert differences(final_checkpoint(today), final_checkpoint(out)) == []
        assert log(today / "metrics.jsonl") == log(out / "metrics.jsonl")


@pytest.mark.parametrize("recipe", sorted(PAUSED))
def test_an_old_inference_checkpoint_evaluates(recipe, capsys):
    capsys.readouterr()
    assert main(["eval", str(FIXTURES / recipe / "inference.pt"), "--episodes", "1", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["recipe"] == recipe and result["episodes"] == 1 and result["return_mean"] == result["return_mean"]
