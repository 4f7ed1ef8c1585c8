"""Run a recipe: attach logging, progress and checkpoints, train, write a summary."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver

from engine_rl.recipes.base import get_recipe
from engine_rl.recipes.config import apply_overrides
from handlers.episodes import EpisodeStats, Throughput
from handlers.metrics_log import MetricsLogger
from handlers.progress import FramesProgressBar

__all__ = ["make_config", "train"]


def make_config(name: str, overrides: list[str] | dict[str, Any] | None = None, **fields: Any) -> Any:
    """The recipe's default config with ``overrides`` (``key=value`` strings or a dict) applied."""
    recipe = get_recipe(name)
    config = recipe.config_cls()
    if overrides:
        config = apply_overrides(config, overrides)
    if fields:
        config = apply_overrides(config, fields)
    return config


def train(
    name: str,
    config: Any,
    out_dir: str | Path,
    *,
    progress: bool = True,
    log_every: int = 1,
    n_saved: int = 2,
) -> dict[str, Any]:
    """Train recipe ``name`` with ``config``; write metrics, checkpoints and a summary to ``out_dir``.

    Files written under ``out_dir``: ``config.json``, ``metrics.jsonl`` (one JSON object per
    line: ``kind`` train/eval, ``frames``, ``optim_steps``, losses, metrics), ``checkpoints/``
    (the latest ``n_saved`` full checkpoints, one per Ignite epoch and one at the end; load
    with ``torch.load(path, weights_only=True)``), ``policy.pt`` (the evaluation policy's
    state_dict) and ``summary.json`` (returned too).
    """
    recipe = get_recipe(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"recipe": name, **dataclasses.asdict(config)}, indent=2))

    setup = recipe.build(config)
    trainer = setup.trainer
    EpisodeStats().attach(trainer)
    Throughput().attach(trainer)
    metrics_path = out / "metrics.jsonl"
    MetricsLogger(metrics_path).attach(trainer, every=log_every)
    FramesProgressBar(setup.total_frames, disable=not progress, desc=name).attach(trainer)
    checkpoint = Checkpoint(
        setup.to_save,
        DiskSaver(str(out / "checkpoints"), require_empty=False, create_dir=True),
        n_saved=n_saved,
        global_step_transform=lambda engine, _: engine.state.frames,
    )
    trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)

    start = time.perf_counter()
    try:
        trainer.run()
    finally:
        setup.close()
    wall = time.perf_counter() - start
    torch.save(setup.eval_policy.state_dict(), out / "policy.pt")

    metrics = trainer.state.metrics
    summary = {
        "recipe": name,
        "seed": getattr(config, "seed", None),
        "frames": trainer.state.frames,
        "optim_steps": trainer.state.optim_steps,
        "wall_time_s": round(wall, 2),
        "fps": round(trainer.state.frames / max(wall, 1e-9), 1),
        **{k: metrics[k] for k in sorted(metrics) if k.startswith("eval_") and k != "eval_frames"},
        "checkpoint": str(checkpoint.last_checkpoint and out / "checkpoints" / checkpoint.last_checkpoint),
        "metrics": str(metrics_path),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
