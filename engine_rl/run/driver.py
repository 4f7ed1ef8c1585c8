"""Run a recipe: attach logging, progress, evaluation checkpoints; train or resume; write a summary.

:func:`train` is the entry point (``engine-rl train``); the run's stages, in order, are in
:mod:`engine_rl.run.stages`. :func:`make_config` and :func:`load_run_config` make the config it takes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ignite.distributed as idist

from engine_rl.recipes.base import get_recipe
from engine_rl.recipes.config import apply_overrides
from engine_rl.recipes.env_source import check_recipe_renders
from engine_rl.run.folder import RunError, read_config_json
from engine_rl.run.stages import (
    Run,
    RunOptions,
    attach_bookkeeping,
    attach_evaluation_extras,
    attach_live_dashboard,
    attach_videos,
    build_on_rank,
    locked_run_folder,
    make_checkpoint,
    prepare_folder,
    resume_from_checkpoint,
    run_trainer,
    schedule_checkpoints,
    write_end_files,
    write_summary,
)
from engine_rl.run.stored_config import CODE_FIELDS, check_stored_code, named_fields
from engine_rl.run.trackers import attach_trackers

__all__ = ["RunError", "load_run_config", "make_config", "train"]


def make_config(name: str, overrides: list[str] | dict[str, Any] | None = None, **fields: Any) -> Any:
    """The recipe's default config with ``overrides`` (``key=value`` strings or a dict) applied."""
    recipe = get_recipe(name)
    config = recipe.config_cls()
    if overrides:
        config = apply_overrides(config, overrides)
    if fields:
        config = apply_overrides(config, fields)
    return config


def _plain(value: Any) -> Any:
    """JSON-read values back to config values (JSON has no tuples)."""
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return value


def load_run_config(
    out_dir: str | Path,
    name: str | None = None,
    *,
    overrides: list[str] | dict[str, Any] | None = None,
    trust_config: bool = False,
) -> Any:
    """The config a run in ``out_dir`` was started with (its ``config.json``), for ``--resume``,
    with ``overrides`` (``--set``, ``--frames``...: :func:`train` refuses any that change it).

    ``config.json`` is data: a ``make_env`` or a module-prefixed ``env_id`` in it (code to
    import and call) is refused before anything is made from it, unless ``overrides`` names that
    field again or ``trust_config`` (``--trust-config``) says the folder is trusted
    (:mod:`engine_rl.run.stored_config`).

    Raises:
        RunError: no ``config.json``, or one that cannot be read (naming the file and what is
            wrong), or one of another recipe than ``name``.
        ValueError: the config names code that the user did not name again; a field that does
            not fit the recipe.
    """
    out = Path(out_dir)
    saved = read_config_json(out)
    recipe = saved.pop("recipe", None)
    if not isinstance(recipe, str):
        raise RunError(f"--resume: {out / 'config.json'} names no recipe (its 'recipe' entry is {recipe!r})")
    if name is not None and recipe != name:
        raise RunError(f"--resume: {out_dir} holds a {recipe!r} run, not {name!r}")
    named = named_fields(overrides)
    check_stored_code(saved, source=f"--resume: {out / 'config.json'}", owner=get_recipe(recipe).config_cls.__name__,
                      named=named, trusted=trust_config, again="--set")
    fields = {k: _plain(v) for k, v in saved.items()}
    fields.update({k: named[k] for k in CODE_FIELDS if k in named})  # the user's code, never the file's
    config = make_config(recipe, fields)
    return apply_overrides(config, overrides) if overrides else config


def train(
    name: str, config: Any, out_dir: str | Path,
    *,
    progress: bool = True,
    n_saved: int = 2,
    visdom: str | None = None,
    resume: bool | str | Path = False,
    checkpoint_every: int | None = None,
    until_frames: int | None = None,
    patience: int | None = None,
    video: int | None = None,
    video_best: bool = False,
    loggers: tuple[str, ...] | list[str] = (),
    attach: Callable[[Run], None] | None = None,
) -> dict[str, Any]:
    """Train recipe ``name`` with ``config``; write metrics, checkpoints and a summary to ``out_dir``.

    Files written under ``out_dir``: ``config.json``, ``metrics.jsonl`` (one JSON object per
    line: ``kind`` train/eval, ``frames``, ``optim_steps``, losses, metrics), ``checkpoints/``
    (the latest ``n_saved`` full checkpoints ``checkpoint_<frames>.pt``: every Ignite epoch or
    every ``checkpoint_every`` batches, and at the end; the complete state of
    :func:`engine_rl.run.checkpoint.training_state`, written atomically, the oldest deleted only
    after the new one is in place; load with ``torch.load(path, weights_only=True)``), ``best/``
    (an inference checkpoint of the policy with the best evaluation return so far,
    ``best_policy_<frames>_eval_return=<score>.pt``), ``inference.pt`` (inference checkpoint of
    the final policy: ``engine-rl eval`` reads it), ``policy.pt`` (the evaluation policy's
    state_dict) and ``summary.json`` (returned too). The summary's paths (``checkpoint``,
    ``best_checkpoint``, ``inference``, ``metrics``, ``resumed_from``) are ``out_dir``'s files as
    ``out_dir`` was given (relative to the working directory if it is relative), or null where
    there is none (no evaluation yet: no best; ``resumed_from``, the checkpoint the run continued
    from, once the rotation of ``n_saved`` deleted it: ``resumed_from_frames`` still says which).
    ``fresh_env_episodes`` is null, or for a resumed run whose env state could not be saved
    (``env_backend='envpool'``) why its envs started new episodes (also said on stderr).
    ``wall_time_s`` and ``fps`` count this call's training only (``fps`` is null if it collected
    no frames: a finished run resumed).
    With ``visdom`` (a server URL), the run is also plotted live there, in a visdom env named
    after ``out_dir``. With ``video``, ``videos/`` holds MP4s of that many evaluation episodes of
    the final policy, ``final_<frames>_ep<k>.mp4`` (and with ``video_best`` of each new best,
    ``best_<frames>_ep<k>.mp4``; :class:`handlers.VideoRecording`), listed in the summary's
    ``videos``, posted to the visdom env too; one that cannot be written is a warning.
    With ``loggers`` (``"tensorboard"``, ``"mlflow"``, ``"wandb"``, each
    optionally ``NAME=TARGET``), every ``metrics.jsonl`` line also goes to those trackers
    (:mod:`engine_rl.run.trackers`; ``trackers.json`` lets a resume continue the same tracker runs).

    While it runs, ``out_dir/run.lock`` (:class:`engine_rl.run.lock.RunLock`) keeps a second run
    out of the folder; it is released when the run ends, also on an error, and a lock left by a
    killed run is taken over with a warning. No checkpoint is written from a network or optimizer
    holding NaN/Inf, and a failed write (full disk, permission) leaves the previous checkpoint
    intact: both raise :class:`~engine_rl.run.checkpoint.CheckpointError`, and the run resumes later.

    Args:
        resume: continue the run in ``out_dir`` from its newest checkpoint (``True``) or from
            the given checkpoint file, which must be one of ``out_dir/checkpoints``. ``config``
            must equal the saved ``config.json`` (see :func:`load_run_config`). Once the
            checkpoint is loaded, ``metrics.jsonl`` is cut back to its frames and the checkpoints
            past them are deleted (resuming from an older file replaces what followed it). With
            no checkpoint yet (killed before the first), the run starts over, unless the folder
            holds results that would be replaced (:func:`~engine_rl.run.folder.check_resume_source`).
            A run killed after its last batch's frames but before its final evaluation, best
            policy, inference files or summary were written finishes them on resume: its final
            checkpoint is written after the final evaluation.
        checkpoint_every: batches between full checkpoints (default: each Ignite epoch).
        until_frames: pause once this many frames are collected: checkpoint and return (the
            summary says ``"paused": true``); ``resume`` continues.
        patience: stop when the evaluation return has not improved for this many evaluations
            (Ignite's ``EarlyStopping`` on the recipe's evaluator).
        video: record this many evaluation episodes of the final policy as MP4s (rank 0; the env
            is checked to render before anything is written: :mod:`engine_rl.video`).
        video_best: with ``video``, also record each policy that evaluates better than all before.
        attach: called with the :class:`~engine_rl.run.stages.Run` once the run's own handlers
            are attached (after the best checkpoint and early stopping, before the checkpoint is
            made, so a stateful handler it attaches is saved too), to attach more handlers to
            ``run.setup.trainer`` or to the evaluator, ``run.validation.evaluator``
            (``engine-rl tune`` attaches its pruning there). An exception they raise ends the
            run as any handler's does: the lock released, no summary written.

    Raises:
        RunError: before training: ``out_dir`` is empty, a file, or cannot be written; another run
            holds its lock; nothing to resume or a changed config; a fresh run into a folder with
            checkpoints; a bad option. Also a run file (``summary.json``...) that cannot be written.
        ValueError: before anything is written: the config's env cannot be made or its spaces do
            not suit the recipe (``config.check_env()``), or cannot render with ``video``.
        CheckpointError: a checkpoint cannot be read, or cannot be written (its message names the
            file, the reason and the previous checkpoint, which is intact).

    Distributed: called in every process of an ``ignite.distributed`` group (``engine-rl train
    --nproc N``, see :mod:`engine_rl.distributed`), each rank builds the recipe with its own
    seeds and trains data-parallel (:func:`handlers.distributed.make_data_parallel`); the
    config's ``total_frames`` counts the frames of all ranks. Rank 0 alone holds the lock and
    writes ``config.json``, metrics, the best and inference checkpoints, ``policy.pt``, the summary and
    the dashboard; every rank writes its own full checkpoints (rank 0 in ``checkpoints/``, rank
    ``r`` in ``checkpoints/rank<r>/``, at the same steps) and resumes from its own file.
    """
    recipe = get_recipe(name)
    options = RunOptions(progress=progress, n_saved=n_saved, visdom=visdom, resume=resume,  # checked here
                         checkpoint_every=checkpoint_every, until_frames=until_frames, patience=patience,
                         loggers=tuple(loggers), video=video, video_best=video_best)
    config.check_env()  # its env and spaces, before anything is written to out_dir
    if video is not None:
        check_recipe_renders(config, owner=f"train: video={video}")
    with locked_run_folder(out_dir, name, config, resume) as out:
        return _train(recipe, Run(name=name, config=config, out=out, options=options,
                                  rank=idist.get_rank(), world=idist.get_world_size()), attach)


def _train(recipe: Any, run: Run, attach: Callable[[Run], None] | None = None) -> dict[str, Any]:
    """:func:`train` once the folder is checked and locked: the stages of :mod:`engine_rl.run.stages`."""
    prepare_folder(run)  # the checkpoint to resume from; a fresh run's config.json
    build_on_rank(run, recipe)  # this rank's seeds and envs
    attach_bookkeeping(run)  # episode stats, throughput, metrics log, progress bar
    attach_evaluation_extras(run)  # best checkpoint, early stopping
    attach_videos(run)  # final (and best) videos, recorded before the final checkpoint
    if attach is not None:
        attach(run)  # the caller's handlers (engine-rl tune's pruning)
    make_checkpoint(run)
    if run.resume_from is not None:
        resume_from_checkpoint(run)  # restore; cut the log back; rotate; drop an untracked best
    schedule_checkpoints(run)  # the last batch's checkpoint at COMPLETED, after the final evaluation
    attach_live_dashboard(run)
    attach_trackers(run)  # TensorBoard, MLflow, W&B: every metrics.jsonl line
    wall, start_frames = run_trainer(run)
    write_end_files(run)
    return write_summary(run, wall=wall, start_frames=start_frames)
