"""Run a recipe: attach logging, progress, evaluation checkpoints; train or resume; write a summary."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint, EarlyStopping

from engine_rl.checkpoint import (
    AtomicDiskSaver,
    InferenceState,
    attached_objects,
    latest_checkpoint,
    list_checkpoints,
    remove_partial_files,
    restore,
    training_state,
)
from engine_rl.distributed import rank_checkpoint_dir, rank_config, rank_disk_saver, resume_path
from engine_rl.recipes.base import get_recipe
from engine_rl.recipes.config import apply_overrides
from handlers.distributed import AllReducedEpisodeStats, make_data_parallel
from handlers.episodes import EpisodeStats, Throughput
from handlers.metrics_log import MetricsLogger
from handlers.progress import FramesProgressBar
from handlers.validation import ValidationRollout

__all__ = ["RunError", "load_run_config", "make_config", "train"]


class RunError(ValueError):
    """The run cannot start as asked (nothing to resume, a changed config, a folder in use)."""


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


def load_run_config(out_dir: str | Path, name: str | None = None) -> Any:
    """The config a run in ``out_dir`` was started with (its ``config.json``), for ``--resume``."""
    path = Path(out_dir) / "config.json"
    if not path.is_file():
        raise RunError(f"--resume: {out_dir} holds no run to resume (no config.json)")
    saved = json.loads(path.read_text())
    recipe = saved.pop("recipe", None)
    if name is not None and recipe != name:
        raise RunError(f"--resume: {out_dir} holds a {recipe!r} run, not {name!r}")
    return make_config(recipe, {k: _plain(v) for k, v in saved.items()})


def _config_record(name: str, config: Any) -> dict[str, Any]:
    return json.loads(json.dumps({"recipe": name, **dataclasses.asdict(config)}))


def _check_same_config(out: Path, name: str, config: Any) -> None:
    path = out / "config.json"
    if not path.is_file():
        raise RunError(f"--resume: {out} holds no run to resume (no config.json)")
    saved, now = json.loads(path.read_text()), _config_record(name, config)
    diff = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    if diff:
        changes = ", ".join(f"{k} ({saved.get(k)!r} -> {now.get(k)!r})" for k in diff)
        raise RunError(
            f"--resume: the config differs from {path}: {changes}; resume with the saved config "
            "(drop --frames/--seed/--set) or start a new run in another --out"
        )


def _path_or_none(path: str | Path | None) -> str | None:
    """``path`` as a string for ``summary.json``; ``None`` (JSON null) stays ``None``."""
    return None if path is None else str(path)


def _truncate_metrics(path: Path, frames: int) -> None:
    """Keep the lines logged up to ``frames`` (what the checkpoint saw): the resumed run logs the rest."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut off by the kill
        if int(record.get("frames", 0)) <= frames:
            keep.append(line + "\n")
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, path)


def train(
    name: str,
    config: Any,
    out_dir: str | Path,
    *,
    progress: bool = True,
    log_every: int = 1,
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
    :func:`engine_rl.checkpoint.training_state`, written atomically; load with
    ``torch.load(path, weights_only=True)``), ``best/`` (an inference checkpoint of the policy
    with the best evaluation return so far, ``best_policy_<frames>_eval_return=<score>.pt``),
    ``inference.pt`` (inference checkpoint of the final policy: ``engine-rl eval`` reads it),
    ``policy.pt`` (the evaluation policy's state_dict) and ``summary.json`` (returned too). The
    summary's paths (``checkpoint``, ``best_checkpoint``, ``inference``, ``metrics``,
    ``resumed_from``) are ``out_dir``'s files as ``out_dir`` was given (relative to the working
    directory if it is relative), or null where there is none (no evaluation yet: no best);
    ``resumed_from``, the checkpoint the run started from, may since have been pruned
    (``n_saved``).
    With ``visdom`` (a server URL), the run is also plotted live there, in a visdom env named
    after ``out_dir``.

    Args:
        resume: continue the run in ``out_dir`` from its newest checkpoint (``True``) or from
            the given checkpoint file. ``config`` must equal the saved ``config.json`` (see
            :func:`load_run_config`). ``metrics.jsonl`` is cut back to the checkpoint's frames.
            With no checkpoint yet (killed before the first), the run starts over.
        checkpoint_every: batches between full checkpoints (default: each Ignite epoch).
        until_frames: pause once this many frames are collected: checkpoint and return (the
            summary says ``"paused": true``); ``resume`` continues.
        patience: stop when the evaluation return has not improved for this many evaluations
            (Ignite's ``EarlyStopping`` on the recipe's evaluator).

    Distributed: called in every process of an ``ignite.distributed`` group (``engine-rl train
    --nproc N``, see :mod:`engine_rl.distributed`), each rank builds the recipe with its own
    seeds and trains data-parallel (:func:`handlers.distributed.make_data_parallel`); the
    config's ``total_frames`` counts the frames of all ranks. Rank 0 alone writes
    ``config.json``, metrics, the best and inference checkpoints, ``policy.pt``, the summary and
    the dashboard; every rank writes its own full checkpoints (rank 0 in ``checkpoints/``, rank
    ``r`` in ``checkpoints/rank<r>/``, at the same steps) and resumes from its own file.
    """
    recipe = get_recipe(name)
    rank, world = idist.get_rank(), idist.get_world_size()
    lead = rank == 0  # writes the run's files
    out = Path(out_dir)
    ckpt_dir = out / "checkpoints"
    own_ckpt_dir = rank_checkpoint_dir(ckpt_dir, rank)
    resume_from: Path | None = None
    if resume:
        if lead:  # (other ranks may run on machines without config.json; a failure here stops them)
            _check_same_config(out, name, config)
        try:
            resume_from = resume_path(ckpt_dir, resume)
        except ValueError as err:
            raise RunError(str(err)) from err
        remove_partial_files(own_ckpt_dir)
        if lead:
            remove_partial_files(out / "best")
    elif latest_checkpoint(ckpt_dir) is not None:
        raise RunError(
            f"{out} already holds checkpoints of a run ({latest_checkpoint(ckpt_dir).name}); "
            "continue it with --resume, or use another --out"
        )
    for arg, value in (("checkpoint_every", checkpoint_every), ("until_frames", until_frames), ("patience", patience)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RunError(f"train: {arg} must be a positive int or None, got {value!r}")
    out.mkdir(parents=True, exist_ok=True)
    if not resume and lead:
        (out / "config.json").write_text(json.dumps(_config_record(name, config), indent=2))

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
        MetricsLogger(metrics_path).attach(trainer, every=log_every)
    FramesProgressBar(setup.total_frames, disable=not progress or not lead, desc=name).attach(trainer)

    inference = InferenceState(
        setup.eval_policy, normalizer=getattr(setup, "normalizer", None), recipe=name,
        config=dataclasses.asdict(config),
    )
    validation = next((o for o in attached_objects(trainer) if isinstance(o, ValidationRollout)), None)
    best: Checkpoint | None = None
    early_stop: EarlyStopping | None = None
    if validation is not None:
        best = Checkpoint(
            {"policy": inference}, AtomicDiskSaver(out / "best"), filename_prefix="best", n_saved=1,
            score_function=lambda evaluator: evaluator.state.metrics["return_mean"], score_name="eval_return",
            global_step_transform=lambda *_: trainer.state.frames,
        )
        validation.evaluator.add_event_handler(Events.COMPLETED, best)
        if patience is not None:
            early_stop = EarlyStopping(patience, lambda evaluator: evaluator.state.metrics["return_mean"], trainer)
            validation.evaluator.add_event_handler(Events.COMPLETED, early_stop)
    elif patience is not None:
        raise RunError(f"train: patience needs evaluations, but recipe {name!r} attaches no ValidationRollout")

    to_save = training_state(trainer, setup.to_save)
    if resume_from is not None:
        restore(to_save, resume_from)
        if lead:
            _truncate_metrics(metrics_path, int(trainer.state.frames))

    checkpoint = Checkpoint(
        to_save, rank_disk_saver(ckpt_dir), n_saved=n_saved,
        global_step_transform=lambda engine, _: engine.state.frames,
    )
    if resume_from is not None:  # keep pruning the files the previous process wrote
        older = list_checkpoints(own_ckpt_dir)
        checkpoint.load_state_dict({"_saved": [(int(p.stem.rsplit("_", 1)[1]), p.name) for p in older]})

    def checkpoint_due(engine: Any, iteration: int) -> bool:
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

        attach_dashboard(trainer, env=out.resolve().name, server=visdom, every=log_every)

    start = time.perf_counter()
    finished = trainer.state.frames >= setup.total_frames or (early_stop is not None and early_stop.counter >= patience)
    try:
        if not finished:  # a finished (or early-stopped) run resumed: nothing to do
            trainer.run()
    finally:
        setup.close()
    wall = time.perf_counter() - start
    if lead:
        torch.save(setup.eval_policy.state_dict(), out / "policy.pt")
        AtomicDiskSaver(out)(inference.state_dict(), "inference.pt")

    metrics = trainer.state.metrics
    summary = {
        "recipe": name,
        "seed": getattr(config, "seed", None),
        "frames": trainer.state.frames,
        "optim_steps": trainer.state.optim_steps,
        "wall_time_s": round(wall, 2),
        "fps": round(trainer.state.frames / max(wall, 1e-9), 1),
        **{k: metrics[k] for k in sorted(metrics) if k.startswith("eval_") and k != "eval_frames"},
        "paused": paused,
        "stopped_early": early_stop is not None and early_stop.counter >= (patience or 0),
        "resumed_from": None if resume_from is None else str(resume_from),
        # with a DiskSaver, Ignite's last_checkpoint is the file's path already (saver folder / file name)
        "checkpoint": _path_or_none(checkpoint.last_checkpoint),
        "best_checkpoint": _path_or_none(best.last_checkpoint if best is not None else None),
        "inference": str(out / "inference.pt"),
        "metrics": str(metrics_path),
    }
    if world > 1:
        summary["nproc"] = world
    if lead:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
