"""Run a recipe: attach logging, progress, evaluation checkpoints; train or resume; write a summary."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Events
from ignite.handlers import EarlyStopping

from engine_rl.recipes.base import get_recipe
from engine_rl.recipes.config import apply_overrides
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
    read_config_json,
    track_files_on_disk,
    truncate_metrics,
    write_text,
)
from engine_rl.run.launch import rank_config
from engine_rl.run.rank_checkpoints import rank_checkpoint_dir, rank_disk_saver, resume_path
from engine_rl.run.stored_config import CODE_FIELDS, check_stored_code, named_fields
from handlers.distributed import AllReducedEpisodeStats, make_data_parallel
from handlers.episodes import EpisodeStats, Throughput
from handlers.metrics_log import MetricsLogger, json_number
from handlers.progress import FramesProgressBar
from handlers.validation import ValidationRollout

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


def _check_options(**options: Any) -> None:
    for arg, value in options.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RunError(f"train: {arg} must be a positive int or None, got {value!r}")


def train(
    name: str,
    config: Any,
    out_dir: str | Path,
    *,
    progress: bool = True,
    n_saved: int = 2,
    visdom: str | None = None,
    resume: bool | str | Path = False,
    checkpoint_every: int | None = None,
    until_frames: int | None = None,
    patience: int | None = None,
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
    ``wall_time_s`` and ``fps`` count this call's training only (``fps`` is null if it collected
    no frames: a finished run resumed).
    With ``visdom`` (a server URL), the run is also plotted live there, in a visdom env named
    after ``out_dir``.

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

    Raises:
        RunError: before training: ``out_dir`` is empty, a file, or cannot be written; another run
            holds its lock; nothing to resume or a changed config; a fresh run into a folder with
            checkpoints; a bad option. Also a run file (``summary.json``...) that cannot be written.
        ValueError: before anything is written: the config's env cannot be made or its spaces do
            not suit the recipe (``config.check_env()``).
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
    _check_options(checkpoint_every=checkpoint_every, until_frames=until_frames, patience=patience)
    config.check_env()  # its env and spaces, before anything is written to out_dir
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
        return _train(
            recipe, name, config, out, progress=progress, n_saved=n_saved, visdom=visdom,
            resume=resume, checkpoint_every=checkpoint_every, until_frames=until_frames, patience=patience,
        )
    finally:
        if lock is not None:
            lock.release()


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


def _on_every_rank(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank of the process group (one all-reduce; ``ok`` when alone)."""
    if idist.get_world_size() == 1:
        return ok
    return bool(idist.all_reduce(torch.tensor([int(ok)]), op="MIN").item())


def _train(
    recipe: Any,
    name: str,
    config: Any,
    out: Path,
    *,
    progress: bool,
    n_saved: int,
    visdom: str | None,
    resume: bool | str | Path,
    checkpoint_every: int | None,
    until_frames: int | None,
    patience: int | None,
) -> dict[str, Any]:
    """:func:`train` once the folder is checked and locked."""
    rank, world = idist.get_rank(), idist.get_world_size()
    lead = rank == 0
    ckpt_dir = out / "checkpoints"
    own_ckpt_dir = rank_checkpoint_dir(ckpt_dir, rank)
    resume_from: Path | None = None
    if resume:
        try:
            resume_from = resume_path(ckpt_dir, resume)
        except ValueError as err:
            raise RunError(str(err)) from err
        remove_partial_files(own_ckpt_dir)
        if lead:
            remove_partial_files(out / "best")
            remove_partial_files(out)
    elif latest_checkpoint(ckpt_dir) is not None:
        raise RunError(
            f"{out} already holds checkpoints of a run ({latest_checkpoint(ckpt_dir).name}); "
            "continue it with --resume, or use another --out"
        )
    if not resume and lead:
        write_text(out / "config.json", json.dumps(config_record(name, config), indent=2))

    build_config = rank_config(config, rank) if world > 1 else config  # each rank its own envs and seeds
    seed = getattr(build_config, "seed", None)
    if isinstance(seed, int):  # every global generator, so two runs of one config match bit for bit
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
    setup = recipe.build(build_config)
    trainer = setup.trainer
    info_keys = getattr(build_config, "info_keys", ())
    if world > 1:  # rank 0's weights everywhere; summed frames, averaged gradients, shared scores
        modules = [obj for obj in setup.to_save.values() if isinstance(obj, torch.nn.Module)]
        make_data_parallel(trainer, modules=[*modules, setup.eval_policy])
        AllReducedEpisodeStats(info_keys=info_keys).attach(trainer)
    else:
        EpisodeStats(info_keys=info_keys).attach(trainer)
    Throughput().attach(trainer)
    metrics_path = out / "metrics.jsonl"
    if resume_from is None and lead:  # a new run (or one killed before its first checkpoint) starts a new log
        metrics_path.unlink(missing_ok=True)
    if lead:
        MetricsLogger(metrics_path).attach(trainer, every=setup.log_every)
    FramesProgressBar(setup.total_frames, disable=not progress or not lead, desc=name).attach(trainer)

    inference = InferenceState(
        setup.eval_policy, normalizer=getattr(setup, "normalizer", None), recipe=name,
        config={k: v for k, v in config_record(name, config).items() if k != "recipe"},
    )
    validation = next((o for o in attached_objects(trainer) if isinstance(o, ValidationRollout)), None)
    best: SafeCheckpoint | None = None
    early_stop: EarlyStopping | None = None
    if validation is not None:
        best = SafeCheckpoint(
            {"policy": inference}, AtomicDiskSaver(out / "best"), filename_prefix="best", n_saved=1,
            score_function=evaluation_score, score_name="eval_return",
            global_step_transform=lambda *_: trainer.state.frames, step_name="frames",
        )
        validation.evaluator.add_event_handler(Events.COMPLETED, best)
        if patience is not None:
            early_stop = EarlyStopping(patience, evaluation_score, trainer)
            validation.evaluator.add_event_handler(Events.COMPLETED, early_stop)
    elif patience is not None:
        raise RunError(f"train: patience needs evaluations, but recipe {name!r} attaches no ValidationRollout")

    # the best checkpoint under the key it had as a plain Ignite Checkpoint, so older runs resume
    to_save = training_state(trainer, {**setup.to_save, **({"evaluator.Checkpoint": best} if best else {})})
    checkpoint = SafeCheckpoint(
        to_save, rank_disk_saver(ckpt_dir), n_saved=n_saved,
        global_step_transform=lambda engine, _: engine.state.frames, step_name="frames",
    )
    if resume_from is not None:
        restore(to_save, resume_from)
        resumed_frames = int(trainer.state.frames)
        if lead:
            truncate_metrics(metrics_path, resumed_frames)
        drop_newer_checkpoints(own_ckpt_dir, resumed_frames)
        track_files_on_disk(checkpoint, own_ckpt_dir, n_saved)  # keep pruning what the previous process wrote
        if best is not None and lead:
            drop_untracked_best(best)

    def checkpoint_due(engine: Any, iteration: int) -> bool:
        if engine.state.frames >= setup.total_frames:
            # the last batch: its checkpoint is the final one, written at COMPLETED after the final
            # evaluation, so a kill during that evaluation resumes from before it and redoes it
            return False
        every = checkpoint_every or engine.state.epoch_length
        return iteration % every == 0 or (until_frames is not None and engine.state.frames >= until_frames)

    trainer.add_event_handler(Events.ITERATION_COMPLETED(event_filter=checkpoint_due), checkpoint)
    # the final checkpoint comes after the COMPLETED handlers attached earlier (the final evaluation)
    trainer.add_event_handler(Events.COMPLETED, checkpoint)
    paused = False
    if until_frames is not None:

        def pause(engine: Any) -> None:
            nonlocal paused
            if until_frames <= engine.state.frames < setup.total_frames:
                paused = True
                engine.terminate(skip_completed=True)  # no final evaluation: the run is not over

        trainer.add_event_handler(Events.ITERATION_COMPLETED, pause)
    if visdom and lead:
        from handlers.dashboard import attach_dashboard

        attach_dashboard(trainer, env=out.resolve().name, server=visdom, every=setup.log_every)

    start, start_frames = time.perf_counter(), int(trainer.state.frames)
    finished = trainer.state.frames >= setup.total_frames or (early_stop is not None and early_stop.counter >= patience)
    try:
        if not finished:  # a finished (or early-stopped) run resumed: nothing to do
            trainer.run()
    finally:
        setup.close()
    wall = time.perf_counter() - start
    if lead:
        saver = AtomicDiskSaver(out)
        check_finite({"policy": inference}, where=f"{out / 'inference.pt'} at frames {trainer.state.frames}")
        saver(setup.eval_policy.state_dict(), "policy.pt")
        saver(inference.state_dict(), "inference.pt")

    frames = int(trainer.state.frames)
    # the last evaluation's scores: restored with the validation handler, so a finished run resumed
    # (killed after its final checkpoint) reports them too
    scores = validation.last if validation is not None else {}
    summary = {
        "recipe": name,
        "seed": getattr(config, "seed", None),
        "frames": frames,
        "optim_steps": trainer.state.optim_steps,
        # this process's training: a resumed run counts its continuation only
        "wall_time_s": round(wall, 2),
        "fps": round((frames - start_frames) / wall, 1) if frames > start_frames and wall > 0 else None,
        # a NaN evaluation (an env returning NaN rewards) as "NaN": summary.json stays standard JSON
        **{k: json_number(v) if isinstance(v, float) else v for k, v in sorted(scores.items())},
        "paused": paused,
        "stopped_early": early_stop is not None and early_stop.counter >= (patience or 0),
        # the checkpoint the run continued from, while it is on disk (rotation may delete it), and its frames
        "resumed_from": None if resume_from is None else existing_or_none(resume_from),
        "resumed_from_frames": None if resume_from is None else resumed_frames,
        # with a DiskSaver, Ignite's last_checkpoint is the file's path already (saver folder / file name)
        "checkpoint": existing_or_none(checkpoint.last_checkpoint),
        "best_checkpoint": existing_or_none(best.last_checkpoint if best is not None else None),
        "inference": str(out / "inference.pt"),
        "metrics": str(metrics_path),
    }
    if world > 1:
        summary["nproc"] = world
    if lead:
        write_text(out / "summary.json", json.dumps(summary, indent=2, allow_nan=False))
    return summary
