"""Experiment trackers: TensorBoard, MLflow and Weights & Biases, through Ignite's own loggers.

:func:`open_tracker` opens one of Ignite's logger classes (``TensorboardLogger``, ``MLflowLogger``,
``WandBLogger``) with defaults that work offline, under the run folder; :class:`handlers.TrackerHandler`
then sends it every line ``metrics.jsonl`` gets. ``engine-rl train --logger NAME[=TARGET]``:

=============  ==========================================  ==========================================
NAME           where it goes by default                    TARGET
=============  ==========================================  ==========================================
tensorboard    event files in ``RUN/tensorboard/``         a directory
mlflow         ``sqlite:///RUN/mlflow.db`` (artifacts in   a directory (its ``mlflow.db``) or a
               ``RUN/mlartifacts/``), experiment = recipe  tracking URI (``http://...``, ``sqlite:///...``)
wandb          offline files in ``RUN/wandb/``, unless     the W&B project (default: the recipe)
               W&B is configured (``WANDB_API_KEY``,
               ``WANDB_MODE`` or ``wandb login``)
=============  ==========================================  ==========================================

Each tracker run gets the run's config as hyperparameters (TensorBoard's hparams, MLflow params,
W&B config). What a resumed run needs to continue the same tracker run (the directory, the MLflow
run id, the W&B run id) is :func:`tracker_record`, kept in ``RUN/trackers.json`` by the run driver.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TRACKERS", "TrackerError", "TrackerSpec", "hyperparameters", "log_videos", "open_tracker", "output_handlers",
           "same_target"]

#: Tracker name -> (the package it needs, the engine_rl extra that installs it).
TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}


class TrackerError(ValueError):
    """A tracker that cannot be opened: its message names the tracker, the target and why."""


@dataclass(frozen=True)
class TrackerSpec:
    """One ``--logger NAME[=TARGET]``.

    Examples:
        >>> TrackerSpec.parse("mlflow=http://127.0.0.1:5000")
        TrackerSpec(name='mlflow', target='http://127.0.0.1:5000')
        >>> TrackerSpec.parse("comet")
        Traceback (most recent call last):
        ...
        engine_rl.trackers.TrackerError: --logger 'comet': unknown tracker 'comet'; accepted: tensorboard, mlflow, wandb (NAME or NAME=TARGET)
    """

    name: str
    target: str | None = None

    @classmethod
    def parse(cls, text: str) -> TrackerSpec:
        name, sep, target = text.partition("=")
        name = name.strip().lower()
        if name not in TRACKERS:
            raise TrackerError(f"--logger {text!r}: unknown tracker {name!r}; accepted: {', '.join(TRACKERS)} "
                               "(NAME or NAME=TARGET)")
        if sep and not target.strip():
            raise TrackerError(f"--logger {text!r}: nothing after '='; give a TARGET (a directory; for mlflow a "
                               "tracking URI, for wandb a project) or just --logger " + name)
        package, extra = TRACKERS[name]
        if importlib.util.find_spec(package) is None:
            raise TrackerError(f"--logger {name} needs the {package!r} package, which is not installed: "
                               f"pip install 'engine_rl[{extra}]'")
        return cls(name, target.strip() or None)


def hyperparameters(config_record: dict[str, Any]) -> dict[str, str | int | float | bool]:
    """The run's config as tracker hyperparameters: numbers and bools as they are, anything else
    (tuples, None, names) as its text, each at most 500 characters (MLflow's and TensorBoard's limits
    are larger).

    Examples:
        >>> hyperparameters({"lr": 0.001, "hidden": [64, 64], "lr_end": None, "double": True})
        {'lr': 0.001, 'hidden': '[64, 64]', 'lr_end': 'None', 'double': True}
    """
    out: dict[str, str | int | float | bool] = {}
    for key, value in config_record.items():
        out[key] = value if isinstance(value, (bool, int, float, str)) else str(value)
        if isinstance(out[key], str):
            out[key] = out[key][:500]
    return out


def open_tracker(spec: TrackerSpec, run_dir: Path, *, experiment: str, run_name: str, params: dict[str, Any],
                 previous: dict[str, Any] | None = None, resumed_frames: int | None = None) -> tuple[Any, dict]:
    """Open the Ignite logger ``spec`` names for the run in ``run_dir``; return it and the record
    that reopens the same tracker run on resume (``previous``: that record, from ``trackers.json``).

    ``resumed_frames``: the frames of the checkpoint a resumed run continues from. TensorBoard then
    purges the points the previous process logged after it (``SummaryWriter(purge_step=...)``).

    Raises:
        TrackerError: the tracker cannot be opened (an unwritable directory, a bad URI), naming it.
    """
    opener = {"tensorboard": _tensorboard, "mlflow": _mlflow, "wandb": _wandb}[spec.name]
    try:
        return opener(spec, run_dir, experiment, run_name, params, previous, resumed_frames)
    except TrackerError:
        raise
    except Exception as err:  # an unwritable folder, an unreachable server, a bad URI: one line
        where = spec.target or (previous or {}).get("target") or f"the default under {run_dir}"
        message = " ".join(str(err).split())[:300]
        raise TrackerError(f"--logger {spec.name}: cannot open it at {where}: {type(err).__name__}: {message}") from err


def _writable_dir(path: Path, name: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrackerError(f"--logger {name}: cannot create {path}: {err.strerror or err}") from err
    if not os.access(path, os.W_OK | os.X_OK):
        raise TrackerError(f"--logger {name}: {path} is not writable; give another folder with --logger {name}=DIR")
    return path


def _tensorboard(spec, run_dir, experiment, run_name, params, previous, resumed_frames):
    from ignite.handlers.tensorboard_logger import TensorboardLogger
    from torch.utils.tensorboard.summary import hparams

    log_dir = _writable_dir(Path(spec.target or (previous or {}).get("target") or run_dir / "tensorboard"), spec.name)
    # purge_step: TensorBoard hides what a killed process logged after the resumed checkpoint
    purge = {} if resumed_frames is None else {"purge_step": resumed_frames + 1}
    logger = TensorboardLogger(log_dir=str(log_dir), **purge)
    if previous is None:  # the HPARAMS tab: the config, against the evaluation's mean return
        for summary in hparams(params, {"eval/eval_return_mean": math.nan}):
            logger.writer.file_writer.add_summary(summary)
    return logger, {"target": os.path.abspath(log_dir)}


def _is_uri(target: str) -> bool:
    return "://" in target or target.startswith("file:")


def _sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{(folder / 'mlflow.db').resolve()}"


def _mlflow_uri(target: str | None, run_dir: Path) -> str:
    if target and _is_uri(target):
        return target
    return _sqlite_uri(_writable_dir(Path(target) if target else run_dir, "mlflow"))


def same_target(name: str, given: str, saved: str) -> bool:
    """Whether ``--logger NAME=GIVEN`` names the target ``saved`` that ``trackers.json`` records for
    the run's tracker (a folder, a tracking URI or a project) however it is spelled: a relative or
    absolute folder, MLflow's folder or the ``sqlite:///`` URI of its ``mlflow.db``.

    Examples:
        >>> same_target("mlflow", "runs/x", f"sqlite:///{Path('runs/x/mlflow.db').resolve()}")
        True
        >>> same_target("tensorboard", "runs/x/tb", os.path.abspath("runs/x/other"))
        False
    """
    if name == "mlflow" and not _is_uri(given):
        return _sqlite_uri(Path(given)) == saved
    if name == "tensorboard":
        return os.path.abspath(given) == os.path.abspath(saved)
    return given == saved


#: MLflow's HTTP retries, unless the user set them: about 10 s before a server counts as gone.
_MLFLOW_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


def _mlflow(spec, run_dir, experiment, run_name, params, previous, resumed_frames):
    import mlflow
    from ignite.handlers.mlflow_logger import MLflowLogger

    for name in ("alembic", "mlflow"):  # schema migrations and store notices, at INFO on stderr
        logging.getLogger(name).setLevel(logging.WARNING)
    uri = (previous or {}).get("target") if spec.target is None and previous else _mlflow_uri(spec.target, run_dir)
    if uri.startswith(("http://", "https://")):
        # MLflow's defaults retry a dead server for minutes, in the training thread: a few seconds
        # here, then the run stops (at start) or drops the tracker with a warning (mid-run)
        for name, value in _MLFLOW_HTTP.items():
            os.environ.setdefault(name, value)
    mlflow.set_tracking_uri(uri)
    if mlflow.active_run() is not None:
        mlflow.end_run()
    if previous is not None:
        mlflow.start_run(run_id=previous["run_id"])
    else:
        found = mlflow.get_experiment_by_name(experiment)
        artifacts = (run_dir / "mlartifacts").resolve().as_uri() if uri.startswith("sqlite:") else None
        experiment_id = found.experiment_id if found else mlflow.create_experiment(experiment, artifacts)
        mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
        mlflow.log_params(params)
    logger = MLflowLogger()  # the run started above is the active one it logs to
    return logger, {"target": uri, "run_id": logger.active_run.info.run_id}


def _wandb_configured() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _wandb(spec, run_dir, experiment, run_name, params, previous, resumed_frames):
    import wandb
    from ignite.handlers.wandb_logger import WandBLogger

    project = spec.target or (previous or {}).get("target") or experiment
    options: dict[str, Any] = {"project": project, "name": run_name, "dir": str(_writable_dir(run_dir, spec.name)),
                               "config": params,
                               # a short summary on stderr; the terminal's output is not copied into the run
                               "settings": wandb.Settings(quiet=True, console="off")}
    if previous is not None:
        options.update(id=previous["run_id"], resume="allow")
    if not _wandb_configured():
        options["mode"] = "offline"
    logger = WandBLogger(**options)
    return logger, {"target": project, "run_id": logger.run.id}


def output_handlers(logger: Any) -> tuple[type, type]:
    """Ignite's ``OutputHandler`` and ``OptimizerParamsHandler`` classes for ``logger``'s kind."""
    module = type(logger).__module__
    if module.endswith("tensorboard_logger"):
        from ignite.handlers.tensorboard_logger import OptimizerParamsHandler, OutputHandler
    elif module.endswith("mlflow_logger"):
        from ignite.handlers.mlflow_logger import OptimizerParamsHandler, OutputHandler
    elif module.endswith("wandb_logger"):
        from ignite.handlers.wandb_logger import OptimizerParamsHandler, OutputHandler
    else:
        raise TypeError(f"output_handlers: {type(logger).__name__} is not Ignite's TensorboardLogger, MLflowLogger "
                        "or WandBLogger")
    return OutputHandler, OptimizerParamsHandler


def log_videos(logger: Any, videos: Any, *, kind: str, step: int) -> None:
    """Send recorded episodes (:class:`engine_rl.video.Video`, from ``VideoEvents.VIDEO_SAVED``) to
    the tracker, tagged ``video/<kind>_ep<k>`` at ``step`` (frames): TensorBoard through torch's
    ``add_video`` (an animated GIF, which needs ``moviepy``; at most 100 frames no wider than 240
    pixels, a preview: the MP4 stays in the run folder), MLflow as artifacts under ``videos/``, W&B
    as ``wandb.Video`` of the MP4."""
    module = type(logger).__module__
    for video in videos:
        tag = f"video/{kind}_ep{video.episode}"
        if module.endswith("tensorboard_logger"):
            clip, every = _preview(video.path, video.frames)
            logger.writer.add_video(tag, clip, global_step=step, fps=max(1, round(video.fps / every)))
        elif module.endswith("mlflow_logger"):
            logger.log_artifact(str(video.path), artifact_path="videos")
        elif module.endswith("wandb_logger"):
            import wandb

            logger.log({tag: wandb.Video(str(video.path), format="mp4")}, step=step)


def _preview(path: Path, frames: int, *, max_frames: int = 100, max_side: int = 240) -> tuple[Any, int]:
    """The MP4 at ``path`` as a ``(1, T, 3, H, W)`` uint8 tensor of at most ``max_frames`` frames
    (every ``every``-th, returned too) whose sides are at most ``max_side`` (every n-th pixel)."""
    import imageio_ffmpeg
    import numpy as np
    import torch

    reader = imageio_ffmpeg.read_frames(str(path))
    width, height = next(reader)["size"]
    every, shrink = max(1, math.ceil(frames / max_frames)), max(1, math.ceil(max(width, height) / max_side))
    clip = [np.frombuffer(raw, np.uint8).reshape(height, width, 3)[::shrink, ::shrink]
            for i, raw in enumerate(reader) if i % every == 0]
    reader.close()
    return torch.from_numpy(np.stack(clip)).permute(0, 3, 1, 2).unsqueeze(0), every
