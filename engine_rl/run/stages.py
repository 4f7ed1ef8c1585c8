"""The stages of a training run (:func:`engine_rl.run.driver.train`), in the order the run goes
through them. Each stage reads and adds parts of one :class:`Run`:

1. :func:`locked_run_folder`: the folder checked and created, its lock taken (rank 0); a rank that
   cannot start stops every rank, before any collective.
2. :func:`prepare_folder`: the checkpoint to resume from, partial files of a killed write removed;
   a fresh run's ``config.json``.
3. :func:`build_on_rank`: the recipe built from this rank's config and seeds.
4. :func:`attach_bookkeeping`: episode statistics, throughput, the metrics log, the progress bar.
5. :func:`attach_evaluation_extras`: the best checkpoint and early stopping on the recipe's evaluator.
6. :func:`attach_videos`: videos of the final (and each new best) policy (rank 0, with ``video``).
7. :func:`make_checkpoint`: the training state and the checkpoint that saves it.
8. :func:`resume_from_checkpoint`: the state restored; the log cut back to it, newer checkpoints
   and videos deleted, the older checkpoints rotated, an untracked best checkpoint dropped; envs
   whose state could not be saved (EnvPool's) start fresh episodes, said in one line on stderr.
9. :func:`schedule_checkpoints`: periodic checkpoints, the final one at ``COMPLETED`` (after the
   final evaluation and its videos), the pause at ``until_frames``.
10. :func:`attach_live_dashboard`: the visdom plots (rank 0, with ``visdom``); then
    :func:`engine_rl.run.trackers.attach_trackers`: TensorBoard, MLflow, W&B (rank 0, ``--logger``).
11. :func:`run_trainer`: training, unless the run is finished already.
12. :func:`write_end_files`: ``policy.pt`` and ``inference.pt`` (rank 0).
13. :func:`write_summary`: ``summary.json`` (rank 0), returned on every rank.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Events
from ignite.handlers import EarlyStopping

from engine_rl.checks import is_int
from engine_rl.collectors.env_state import unsupported_reason
from engine_rl.run.checkpoint import (
    AtomicDiskSaver,
    InferenceState,
    SafeCheckpoint,
    attached_objects,
    check_finite,
    latest_checkpoint,
    remove_partial_files,
    restore,
    training_state,
)
from engine_rl.run.folder import (
    RunError,
    config_record,
    drop_newer_checkpoints,
    drop_untracked_best,
    existing_or_none,
    open_run_folder,
    track_files_on_disk,
    truncate_metrics,
    write_text,
)
from engine_rl.run.launch import rank_config
from engine_rl.recipes.env_source import recipe_render_env
from engine_rl.run.rank_checkpoints import rank_checkpoint_dir, rank_disk_saver, resume_path
from handlers.distributed import AllReducedEpisodeStats, make_data_parallel
from handlers.episodes import EpisodeStats, Throughput
from handlers.metrics_log import MetricsLogger, json_number
from handlers.progress import FramesProgressBar
from handlers.validation import ValidationRollout
from handlers.video import VideoRecording

__all__ = [
    "Run",
    "RunOptions",
    "attach_bookkeeping",
    "attach_evaluation_extras",
    "attach_live_dashboard",
    "attach_videos",
    "build_on_rank",
    "evaluation_score",
    "fresh_env_episodes",
    "locked_run_folder",
    "make_checkpoint",
    "prepare_folder",
    "resume_from_checkpoint",
    "run_trainer",
    "schedule_checkpoints",
    "write_end_files",
    "write_summary",
]


@dataclass(kw_only=True)
class RunOptions:
    """The options of :func:`~engine_rl.run.driver.train` (documented there).

    Raises:
        RunError: ``checkpoint_every``, ``until_frames``, ``patience`` or ``video`` not a positive
            int or None; ``video_best`` without ``video``.
    """

    progress: bool = True
    n_saved: int = 2
    visdom: str | None = None
    resume: bool | str | Path = False
    checkpoint_every: int | None = None
    until_frames: int | None = None
    patience: int | None = None
    video: int | None = None
    video_best: bool = False
    loggers: tuple[str, ...] = ()  # --logger NAME[=TARGET] (engine_rl.run.trackers)

    def __post_init__(self) -> None:
        for arg in ("checkpoint_every", "until_frames", "patience", "video"):
            value = getattr(self, arg)
            if value is not None and not (is_int(value) and value >= 1):
                raise RunError(f"train: {arg} must be a positive int or None, got {value!r}")
        if self.video_best and self.video is None:
            raise RunError("train: video_best records videos of each new best and needs video (the episodes to "
                           "record), got video=None")


@dataclass(kw_only=True)
class Run:
    """One run's parts: what it was given, then what each stage adds (``None`` until that stage)."""

    name: str
    config: Any  # the config as given (config.json's); the recipe is built from this rank's copy
    out: Path
    options: RunOptions
    rank: int = 0
    world: int = 1
    resume_from: Path | None = None  # this rank's checkpoint the run continues from (prepare_folder)
    build_config: Any = None  # this rank's config (its own envs and seeds), the recipe built from it (build_on_rank)
    setup: Any = None  # the recipe's build: trainer, to_save, eval_policy, total_frames...
    inference: InferenceState | None = None  # (attach_evaluation_extras)
    validation: ValidationRollout | None = None
    best: SafeCheckpoint | None = None
    early_stop: EarlyStopping | None = None
    videos: VideoRecording | None = None  # (attach_videos)
    to_save: dict[str, Any] = field(default_factory=dict)  # (make_checkpoint)
    checkpoint: SafeCheckpoint | None = None
    resumed_frames: int | None = None  # (resume_from_checkpoint)
    logged_frames: int | None = None  # the frames of metrics.jsonl's last line before the cut (resume_from_checkpoint)
    paused: bool = False  # stopped at until_frames (schedule_checkpoints)
    fresh_env_episodes: str | None = None  # why a resumed run's envs started new episodes (resume_from_checkpoint)

    @property
    def lead(self) -> bool:
        """Rank 0: the rank that writes the run's files."""
        return self.rank == 0

    @property
    def checkpoints(self) -> Path:
        """The run's checkpoint folder (rank 0's)."""
        return self.out / "checkpoints"

    @property
    def own_checkpoints(self) -> Path:
        """This rank's checkpoint folder."""
        return rank_checkpoint_dir(self.checkpoints, self.rank)

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def videos_folder(self) -> Path:
        return self.out / "videos"


def _on_every_rank(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank of the process group (one all-reduce; ``ok`` when alone)."""
    if idist.get_world_size() == 1:
        return ok
    return bool(idist.all_reduce(torch.tensor([int(ok)]), op="MIN").item())


@contextmanager
def locked_run_folder(out_dir: str | Path, name: str, config: Any, resume: bool | str | Path) -> Iterator[Path]:
    """The run folder, checked, created and locked (rank 0) while the ``with`` block runs; the lock
    is released when it ends, also on an error. A rank that cannot start it stops every rank."""
    out, lock, error = Path(out_dir), None, None
    try:
        out, lock = open_run_folder(out_dir, name, config, resume)
    except RunError as err:
        error = err
    if not _on_every_rank(error is None):  # a rank that cannot start stops them all, before any collective
        if lock is not None:
            lock.release()
        raise error or RunError(
            f"--out {out_dir}: another process of this run cannot start it (the first process's error says why)"
        )
    try:
        yield out
    finally:
        if lock is not None:
            lock.release()


def prepare_folder(run: Run) -> None:
    """Find the checkpoint to resume from and remove the partial files of a killed write; a fresh
    run refuses a folder holding checkpoints and writes ``config.json``."""
    if run.options.resume:
        try:
            run.resume_from = resume_path(run.checkpoints, run.options.resume)
        except ValueError as err:
            raise RunError(str(err)) from err
        remove_partial_files(run.own_checkpoints)
        if run.lead:
            remove_partial_files(run.out / "best")
            remove_partial_files(run.videos_folder)
            remove_partial_files(run.out)
    elif latest_checkpoint(run.checkpoints) is not None:
        raise RunError(
            f"{run.out} already holds checkpoints of a run ({latest_checkpoint(run.checkpoints).name}); "
            "continue it with --resume, or use another --out"
        )
    if not run.options.resume and run.lead:
        write_text(run.out / "config.json", json.dumps(config_record(run.name, run.config), indent=2))


def build_on_rank(run: Run, recipe: Any) -> None:
    """Build the recipe from this rank's config (its own envs and seeds), seeding every global
    generator first, so two runs of one config match bit for bit."""
    run.build_config = rank_config(run.config, run.rank) if run.world > 1 else run.config
    seed = getattr(run.build_config, "seed", None)
    if isinstance(seed, int):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
    run.setup = recipe.build(run.build_config)


def attach_bookkeeping(run: Run) -> None:
    """Episode statistics (all-reduced, with the data-parallel wiring, over several ranks),
    throughput, the metrics log (rank 0; a new run starts a new one) and the progress bar."""
    trainer, setup = run.setup.trainer, run.setup
    info_keys = getattr(run.build_config, "info_keys", ())
    if run.world > 1:  # rank 0's weights everywhere; summed frames, averaged gradients, shared scores
        modules = [obj for obj in setup.to_save.values() if isinstance(obj, torch.nn.Module)]
        make_data_parallel(trainer, modules=[*modules, setup.eval_policy])
        AllReducedEpisodeStats(info_keys=info_keys).attach(trainer)
    else:
        EpisodeStats(info_keys=info_keys).attach(trainer)
    Throughput().attach(trainer)
    if run.resume_from is None and run.lead:  # a new run (or one killed before its first checkpoint) starts a new log
        run.metrics_path.unlink(missing_ok=True)
    if run.lead:
        MetricsLogger(run.metrics_path).attach(trainer, every=setup.log_every)
    quiet = not run.options.progress or not run.lead
    FramesProgressBar(setup.total_frames, disable=quiet, desc=run.name).attach(trainer)


def evaluation_score(evaluator: Any) -> float:
    """The best checkpoint's and early stopping's score: the evaluation's mean return, a NaN one
    (an env that returned a NaN reward) as -inf. Ignite compares scores with ``<``, so a NaN best
    score would never be beaten and would keep that policy as the run's best for good.

    Examples:
        >>> from types import SimpleNamespace
        >>> [evaluation_score(SimpleNamespace(state=SimpleNamespace(metrics={"return_mean": r})))
        ...  for r in (12.5, float("nan"))]
        [12.5, -inf]
    """
    score = float(evaluator.state.metrics["return_mean"])
    return -math.inf if math.isnan(score) else score


def attach_evaluation_extras(run: Run) -> None:
    """The inference state; with the recipe's :class:`~handlers.validation.ValidationRollout`, the
    best checkpoint and (with ``patience``) early stopping at its evaluator's ``COMPLETED``."""
    setup, trainer, patience = run.setup, run.setup.trainer, run.options.patience
    run.inference = InferenceState(
        setup.eval_policy, normalizer=getattr(setup, "normalizer", None), recipe=run.name,
        config={k: v for k, v in config_record(run.name, run.config).items() if k != "recipe"},
    )
    run.validation = next((o for o in attached_objects(trainer) if isinstance(o, ValidationRollout)), None)
    if run.validation is not None:
        run.best = SafeCheckpoint(
            {"policy": run.inference}, AtomicDiskSaver(run.out / "best"), filename_prefix="best", n_saved=1,
            score_function=evaluation_score, score_name="eval_return",
            global_step_transform=lambda *_: trainer.state.frames, step_name="frames",
        )
        run.validation.evaluator.add_event_handler(Events.COMPLETED, run.best)
        if patience is not None:
            run.early_stop = EarlyStopping(patience, evaluation_score, trainer)
            run.validation.evaluator.add_event_handler(Events.COMPLETED, run.early_stop)
    elif patience is not None:
        raise RunError(f"train: patience needs evaluations, but recipe {run.name!r} attaches no ValidationRollout")


def attach_videos(run: Run) -> None:
    """With ``video`` (rank 0): a :class:`~handlers.video.VideoRecording` of that many evaluation
    episodes into ``RUN/videos/``, of the final policy and (``video_best``) of each new best, on the
    env evaluation makes (rendering) with the recipe evaluator's policy and device and the config's
    ``eval_seed``. Attached before the checkpoint: its best score is saved, and the final videos
    are recorded before the final checkpoint (a run killed in between records them on resume). A
    fresh run deletes the videos an earlier run left in the folder."""
    evaluator = run.validation.evaluator if run.validation is not None else None
    if run.options.video_best and evaluator is None:  # (on every rank: all stop)
        raise RunError(f"train: video_best needs evaluations, but recipe {run.name!r} attaches no ValidationRollout")
    if run.options.video is None or not run.lead:
        return
    run.videos = VideoRecording(
        recipe_render_env(run.config), evaluator.policy if evaluator is not None else run.setup.eval_policy,
        num_episodes=run.options.video, folder=run.videos_folder, seed=getattr(run.config, "eval_seed", None),
        device=evaluator.device if evaluator is not None else None, best=run.options.video_best,
        score_function=evaluation_score,
    )
    run.videos.attach(run.setup.trainer, evaluator=evaluator if run.options.video_best else None)
    if run.resume_from is None:
        run.videos.drop_after(-1)


def make_checkpoint(run: Run) -> None:
    """The training state (:func:`~engine_rl.run.checkpoint.training_state`: the recipe's objects,
    the handlers attached so far, the best checkpoint) and the checkpoint writing this rank's files."""
    # the best checkpoint under the key it had as a plain Ignite Checkpoint, so older runs resume
    best = {"evaluator.Checkpoint": run.best} if run.best else {}
    run.to_save = training_state(run.setup.trainer, {**run.setup.to_save, **best})
    run.checkpoint = SafeCheckpoint(
        run.to_save, rank_disk_saver(run.checkpoints), n_saved=run.options.n_saved,
        global_step_transform=lambda engine, _: engine.state.frames, step_name="frames",
    )


def resume_from_checkpoint(run: Run) -> None:
    """Restore ``run.resume_from``; cut the metrics log back to its frames, delete the checkpoints
    past them, keep rotating the older ones, drop a best checkpoint the restored state does not track.
    If the collector's env state could not be saved, its envs start new episodes: one line on stderr
    (rank 0) and ``fresh_env_episodes`` in the summary say why."""
    restore(run.to_save, run.resume_from)
    run.resumed_frames = int(run.setup.trainer.state.frames)
    run.fresh_env_episodes = fresh_env_episodes(run.setup.to_save)
    if run.fresh_env_episodes is not None and run.lead:
        print(f"engine-rl: resume: {run.fresh_env_episodes}", file=sys.stderr, flush=True)
    if _not_checkpointed(run):  # a collector on another engine says what its state could not hold
        warnings.warn(f"resuming from {run.resume_from.name}: {_not_checkpointed(run)}", RuntimeWarning, stacklevel=2)
    if run.lead:
        run.logged_frames = truncate_metrics(run.metrics_path, run.resumed_frames)
    drop_newer_checkpoints(run.own_checkpoints, run.resumed_frames)
    # keep pruning what the previous process wrote
    track_files_on_disk(run.checkpoint, run.own_checkpoints, run.options.n_saved)
    if run.best is not None and run.lead:
        drop_untracked_best(run.best)
    if run.videos is not None:  # recorded after the checkpoint, by the run this one replaces
        run.videos.drop_after(run.resumed_frames)


def fresh_env_episodes(to_save: dict[str, Any]) -> str | None:
    """Why a run resumed with the objects ``to_save`` continues with new env episodes (its
    ``"collector"``'s env state cannot be saved: :func:`~engine_rl.collectors.env_state.unsupported_reason`,
    or, for a collector whose envs live in a worker, what its loaded state says), or None when its
    envs continue where the checkpoint left them."""
    collector = to_save.get("collector")
    env = getattr(collector, "env", None)
    reason = unsupported_reason(env) if env is not None else getattr(collector, "env_unsupported", None)
    if reason is None:
        return None
    return (f"the envs start new episodes, not those of the checkpoint ({reason}); training continues "
            "from the checkpoint, not bitwise")


def schedule_checkpoints(run: Run) -> None:
    """A checkpoint every ``checkpoint_every`` batches (default: each Ignite epoch) and at
    ``until_frames``; the last batch's at ``COMPLETED`` (after the final evaluation and videos);
    the pause at ``until_frames``."""
    trainer, setup = run.setup.trainer, run.setup
    checkpoint_every, until_frames = run.options.checkpoint_every, run.options.until_frames

    def checkpoint_due(engine: Any, iteration: int) -> bool:
        if engine.state.frames >= setup.total_frames:
            # the last batch: its checkpoint is the final one, written at COMPLETED after the final
            # evaluation, so a kill during that evaluation resumes from before it and redoes it
            return False
        every = checkpoint_every or engine.state.epoch_length
        return iteration % every == 0 or (until_frames is not None and engine.state.frames >= until_frames)

    trainer.add_event_handler(Events.ITERATION_COMPLETED(event_filter=checkpoint_due), run.checkpoint)
    # the final checkpoint comes after the COMPLETED handlers attached earlier (the final evaluation)
    trainer.add_event_handler(Events.COMPLETED, run.checkpoint)
    if until_frames is not None:

        def pause(engine: Any) -> None:
            if until_frames <= engine.state.frames < setup.total_frames:
                run.paused = True
                engine.terminate(skip_completed=True)  # no final evaluation: the run is not over

        trainer.add_event_handler(Events.ITERATION_COMPLETED, pause)


def attach_live_dashboard(run: Run) -> None:
    """Plot the run live on the ``visdom`` server (rank 0), in a visdom env named after its folder."""
    if run.options.visdom and run.lead:
        from handlers.dashboard import attach_dashboard

        attach_dashboard(run.setup.trainer, env=run.out.resolve().name, server=run.options.visdom,
                         every=run.setup.log_every)


def _stopped_early(run: Run, patience: int | None) -> bool:
    return run.early_stop is not None and run.early_stop.counter >= patience


def run_trainer(run: Run) -> tuple[float, int]:
    """Train, unless the run is finished (or stopped early) already: a finished run resumed;
    close the recipe's resources. Returns the wall time and the frames at the start."""
    trainer = run.setup.trainer
    start, start_frames = time.perf_counter(), int(trainer.state.frames)
    finished = trainer.state.frames >= run.setup.total_frames or _stopped_early(run, run.options.patience)
    try:
        if not finished:
            trainer.run()
    finally:
        run.setup.close()
    return time.perf_counter() - start, start_frames


def write_end_files(run: Run) -> None:
    """Rank 0: ``policy.pt`` (the evaluation policy's state_dict) and ``inference.pt``, from a
    policy without NaN/Inf."""
    if run.lead:
        saver = AtomicDiskSaver(run.out)
        where = f"{run.out / 'inference.pt'} at frames {run.setup.trainer.state.frames}"
        check_finite({"policy": run.inference}, where=where)
        saver(run.setup.eval_policy.state_dict(), "policy.pt")
        saver(run.inference.state_dict(), "inference.pt")


def _not_checkpointed(run: Run) -> str | None:
    """What the trainer's collector says its checkpoints cannot hold (its ``not_checkpointed``), if anything."""
    return getattr(getattr(run.setup.trainer, "collector", None), "not_checkpointed", None)


def write_summary(run: Run, *, wall: float, start_frames: int) -> dict[str, Any]:
    """The run's summary (see :func:`~engine_rl.run.driver.train`), written to ``summary.json`` by rank 0."""
    trainer, frames = run.setup.trainer, int(run.setup.trainer.state.frames)
    # the last evaluation's scores: restored with the validation handler, so a finished run resumed
    # (killed after its final checkpoint) reports them too
    scores = run.validation.last if run.validation is not None else {}
    summary = {
        "recipe": run.name,
        "seed": getattr(run.config, "seed", None),
        "frames": frames,
        "optim_steps": trainer.state.optim_steps,
        # this process's training: a resumed run counts its continuation only
        "wall_time_s": round(wall, 2),
        "fps": round((frames - start_frames) / wall, 1) if frames > start_frames and wall > 0 else None,
        # a NaN evaluation (an env returning NaN rewards) as "NaN": summary.json stays standard JSON
        **{k: json_number(v) if isinstance(v, float) else v for k, v in sorted(scores.items())},
        "paused": run.paused,
        "stopped_early": _stopped_early(run, run.options.patience or 0),
        # the checkpoint the run continued from, while it is on disk (rotation may delete it), and its frames
        "resumed_from": None if run.resume_from is None else existing_or_none(run.resume_from),
        "resumed_from_frames": run.resumed_frames,
        # a resumed run whose env state could not be saved (EnvPool): why its envs started new episodes
        "fresh_env_episodes": run.fresh_env_episodes,
        # with a DiskSaver, Ignite's last_checkpoint is the file's path already (saver folder / file name)
        "checkpoint": existing_or_none(run.checkpoint.last_checkpoint),
        "best_checkpoint": existing_or_none(run.best.last_checkpoint if run.best is not None else None),
        "inference": str(run.out / "inference.pt"),
        "metrics": str(run.metrics_path),
    }
    if run.world > 1:
        summary["nproc"] = run.world
    if _not_checkpointed(run):
        summary["collector_not_checkpointed"] = _not_checkpointed(run)
    if run.options.video is not None:  # the MP4s in RUN/videos, final and best ones, by name
        summary["videos"] = [str(p) for p in sorted(run.videos_folder.glob("*.mp4"))]
    if run.lead:
        write_text(run.out / "summary.json", json.dumps(summary, indent=2, allow_nan=False))
    return summary
