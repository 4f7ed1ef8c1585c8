"""summary.json names files that exist, for a relative --out and an absolute one, and null where there is none."""

import json
from pathlib import Path

import pytest

from engine_rl.cli import main

#: Keys of summary.json whose values are paths (or null).
PATH_KEYS = ("checkpoint", "best_checkpoint", "inference", "metrics", "resumed_from")
#: ppo-cartpole (256 frames per batch), short
SMALL = ["--no-progress", "--set", "num_epochs=1", "--set", "eval_episodes=1"]


def read_summary(folder):
    """summary.json as written, and parsed."""
    text = (folder / "summary.json").read_text()
    return text, json.loads(text)


def assert_paths_exist(summary, *, relative):
    for key in PATH_KEYS:
        path = summary[key]
        if path is None:
            continue
        assert path != "None" and (path[0] != "/") == relative, (key, path)
        assert Path(path).exists(), f"{key}: {path} does not exist"


@pytest.mark.parametrize("relative", [True, False], ids=["relative-out", "absolute-out"])
def test_every_path_in_the_summary_exists(relative, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --out is relative to the working directory
    out = "runs/ppo" if relative else str(tmp_path / "elsewhere" / "ppo")
    assert main(["train", "ppo-cartpole", "--out", out, "--frames", "512", "--set", "eval_every=1", *SMALL]) == 0
    _, summary = read_summary(tmp_path / out)
    assert summary["checkpoint"] == f"{out}/checkpoints/checkpoint_512.pt"
    assert summary["best_checkpoint"].startswith(f"{out}/best/best_policy_")
    assert_paths_exist(summary, relative=relative)
    assert not (tmp_path / out / "run.lock").exists()  # released at the end of the run


def test_a_paused_run_writes_null_where_there_is_no_file_and_its_resume_names_files_that_exist(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    args = ["--frames", "512", "--set", "eval_every=2"]  # two checkpoints: n_saved=2 keeps the resumed one
    assert main(["train", "ppo-cartpole", "--out", "run", *args, *SMALL, "--until-frames", "256"]) == 0
    text, paused = read_summary(tmp_path / "run")
    assert paused["paused"] and paused["frames"] == 256
    assert paused["best_checkpoint"] is None and '"best_checkpoint": null' in text  # no evaluation yet
    assert paused["resumed_from"] is None and "None" not in text
    assert_paths_exist(paused, relative=True)

    assert main(["train", "ppo-cartpole", "--out", "run", "--resume", *args, *SMALL]) == 0
    _, resumed = read_summary(tmp_path / "run")
    assert not resumed["paused"] and resumed["frames"] == 512
    assert resumed["resumed_from"] == "run/checkpoints/checkpoint_256.pt"
    assert resumed["checkpoint"] == "run/checkpoints/checkpoint_512.pt" and resumed["best_checkpoint"] is not None
    assert_paths_exist(resumed, relative=True)
