"""``engine-rl train --logger tensorboard|mlflow|wandb``: every metrics.jsonl line in each tracker,
read back with the tracker's own reader; a resume continues the same tracker runs with one point
per logged frame count; bad input is one line.

Tiny dqn-cartpole runs (8 batches of 256 frames, an evaluation every 2 batches): what is checked is
where the numbers go, not what the network learns.
"""

import json
import math
from pathlib import Path

import pytest

from engine_rl.cli import main
from support.seeds import seed_arg
from support.tracker_readers import (
    mlflow_params,
    mlflow_scalars,
    tensorboard_hparams,
    tensorboard_scalars,
    wandb_config,
    wandb_scalars,
)

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")

ARGS = ["--frames", "2048", "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2",
        "--set", "hidden=(16,)", "--set", "buffer_size=2048", "--set", "num_envs=4", "--set", "eval_every=2",
        "--set", "eval_episodes=1", "--checkpoint-every", "2", "--no-progress"]
ALL = ["--logger", "tensorboard", "--logger", "mlflow", "--logger", "wandb"]


@pytest.fixture(scope="module", autouse=True)
def _offline_wandb(tmp_path_factory):
    """W&B as on a machine where nobody ran `wandb login`: offline files under the run."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("WANDB_API_KEY", "WANDB_MODE"):
            patch.delenv(name, raising=False)
        home = tmp_path_factory.mktemp("home")
        patch.setenv("HOME", str(home))  # no ~/.netrc, no ~/.config/wandb
        patch.setenv("NETRC", str(home / ".netrc"))
        yield


def train(out, *extra):
    return main(["train", "dqn-cartpole", "--out", str(out), "--seed", seed_arg(3), *ARGS, *extra])


def logged(out):
    """``{key: [(frames, value)]}`` of metrics.jsonl, keyed as the trackers name them (tag/key)."""
    points = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key not in ("kind", "frames"):
                points.setdefault(f"{record['kind']}/{key}", []).append((record["frames"], float(value)))
    return points


def trackers(out):
    """Each tracker's points, keyed ``tag/key`` (MLflow's ``tag key`` names mapped back)."""
    record = json.loads((out / "trackers.json").read_text())
    mlflow = mlflow_scalars(record["mlflow"]["target"], record["mlflow"]["run_id"])
    return record, {
        "tensorboard": tensorboard_scalars(record["tensorboard"]["target"]),
        "mlflow": {k.replace(" ", "/"): v for k, v in mlflow.items()},
        "wandb": wandb_scalars(out / "wandb", record["wandb"]["run_id"]),
    }


def close(a, b):
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)  # TB keeps float32


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trackers") / "run"
    assert train(out, *ALL) == 0
    return out


def test_every_metrics_line_reaches_each_tracker_at_its_frames(run):
    expected = logged(run)
    assert {"train/loss", "train/fps", "eval/eval_return_mean"} <= set(expected)
    assert [f for f, _ in expected["eval/eval_return_mean"]] == [512, 1024, 1536, 2048]
    _, found = trackers(run)
    for name, points in found.items():
        for key, series in expected.items():
            assert [f for f, _ in points[key]] == [f for f, _ in series], (name, key)
            assert all(close(a, b) for (_, a), (_, b) in zip(points[key], series)), (name, key, points[key], series)
        # the learning rate of the optimizer, at every train line, decaying (dqn-cartpole's lr_end=0)
        lr = points["optimizer/lr/group_0"]
        assert [f for f, _ in lr] == [f for f, _ in expected["train/fps"]], name
        assert lr[0][1] > lr[-1][1] > 0, name


def test_the_config_is_each_tracker_runs_hyperparameters(run):
    record, _ = trackers(run)
    assert record["tensorboard"] == {"target": str(run / "tensorboard")}
    assert record["mlflow"]["target"] == f"sqlite:///{(run / 'mlflow.db').resolve()}"
    assert tensorboard_hparams(run / "tensorboard")["env_id"] == "CartPole-v1"
    params = mlflow_params(record["mlflow"]["target"], record["mlflow"]["run_id"])
    assert (params["recipe"], params["lr"], params["hidden"], params["seed"]) == ("dqn-cartpole", "0.0023", "[16]", "3")
    config = wandb_config(run / "wandb", record["wandb"]["run_id"])
    assert (config["recipe"], config["lr"], config["num_envs"]) == ("dqn-cartpole", 0.0023, 4)


@pytest.mark.parametrize("how", ["paused", "killed"])
def test_a_resume_continues_the_same_tracker_runs_with_one_point_per_logged_frame_count(tmp_path, run, how):
    out = tmp_path / "run"
    if how == "paused":  # paused at half, resumed without --logger: trackers.json names them
        assert train(out, *ALL, "--until-frames", "1024") == 0
        first = json.loads((out / "trackers.json").read_text())
        assert train(out, "--resume") == 0
    else:  # as if killed at the end, resumed from the checkpoint at 1536: the trackers got 1792 and 2048 already
        import shutil

        shutil.copytree(run, out)
        (out / "trackers.json").write_text((run / "trackers.json").read_text().replace(str(run), str(out)))
        first = json.loads((out / "trackers.json").read_text())
        assert train(out, *ALL, "--resume", str(out / "checkpoints" / "checkpoint_1536.pt")) == 0
    record, found = trackers(out)
    assert record == first  # the same directory, MLflow run and W&B run
    expected = logged(out)
    for name, points in found.items():
        for key in ("train/loss", "train/iteration", "eval/eval_return_mean", "optimizer/lr/group_0"):
            frames = [f for f, _ in points[key]]
            assert frames == sorted(set(frames)), (name, key, frames)  # no point twice, in order
        assert [f for f, _ in points["train/loss"]] == [f for f, _ in expected["train/loss"]], name
        # deterministic values equal metrics.jsonl's (the resumed run is bitwise the same)
        assert all(close(a, b) for (_, a), (_, b) in zip(points["train/loss"], expected["train/loss"])), name


def test_bad_tracker_options_are_one_line(tmp_path, capsys):
    assert train(tmp_path / "a", "--logger", "comet") == 2
    assert capsys.readouterr().err == ("engine-rl: error: --logger 'comet': unknown tracker 'comet'; accepted: "
                                       "tensorboard, mlflow, wandb (NAME or NAME=TARGET)\n")
    assert train(tmp_path / "b", "--logger", "mlflow=") == 2
    assert "--logger 'mlflow=': nothing after '='" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert train(tmp_path / "c", "--logger", f"tensorboard={blocker}/tb") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"engine-rl: error: --logger tensorboard: cannot create {blocker}/tb: ") and err.count("\n") == 1
    assert not list((tmp_path / "c").rglob("*.pt")) and not (tmp_path / "c" / "metrics.jsonl").exists()  # no training


def test_resuming_with_the_same_tracker_targets_named_again_continues_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative folders, as a user types them
    targets = ["--logger", "tensorboard=tb", "--logger", "mlflow=ml"]
    assert train(tmp_path / "run", *targets, "--until-frames", "1024") == 0
    first = json.loads((tmp_path / "run" / "trackers.json").read_text())
    assert first == {"tensorboard": {"target": str(tmp_path / "tb")},
                     "mlflow": {"target": f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}", "run_id": first["mlflow"]["run_id"]}}
    assert train(tmp_path / "run", "--resume", "--logger", f"tensorboard={tmp_path / 'tb'}", "--logger", "mlflow=./ml") == 0
    assert json.loads((tmp_path / "run" / "trackers.json").read_text()) == first
    steps = [s for s, _ in tensorboard_scalars(tmp_path / "tb")["train/fps"]]
    assert steps == sorted(set(steps)) and steps[-1] == 2048
    assert [s for s, _ in mlflow_scalars(first["mlflow"]["target"], first["mlflow"]["run_id"])["train fps"]] == steps


def test_resuming_with_another_tracker_target_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--logger", "tensorboard", "--until-frames", "512") == 0
    capsys.readouterr()
    assert train(out, "--resume", "--logger", f"tensorboard={tmp_path / 'elsewhere'}") == 2
    assert capsys.readouterr().err == (
        f"engine-rl: error: --logger tensorboard={tmp_path / 'elsewhere'}: this run logs to tensorboard at "
        f"{out / 'tensorboard'} (trackers.json); resume with --logger tensorboard (or the same target), or train "
        "into another --out\n")


def test_videos_go_to_each_tracker(tmp_path):
    """``--video 1`` with the three trackers: TensorBoard a GIF preview (an image summary) at the
    final frames, MLflow the MP4 as an artifact, W&B the MP4 as a media file of the run."""
    pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("moviepy")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert train(out, *ALL, "--video", "1", "--frames", "512") == 0
    video = out / "videos" / "final_512_ep1.mp4"
    assert video.is_file()
    record = json.loads((out / "trackers.json").read_text())
    events = EventAccumulator(record["tensorboard"]["target"], size_guidance={"images": 0})
    events.Reload()
    [image] = events.Images("video/final_ep1")
    assert image.step == 512 and image.encoded_image_string[:6] == b"GIF89a"
    client = MlflowClient(tracking_uri=record["mlflow"]["target"])
    artifacts = [a.path for a in client.list_artifacts(record["mlflow"]["run_id"], "videos")]
    assert artifacts == ["videos/final_512_ep1.mp4"]
    [media] = (out / "wandb").glob(f"offline-run-*-{record['wandb']['run_id']}/files/media/videos/video/final_ep1_*.mp4")
    assert media.read_bytes() == video.read_bytes()
