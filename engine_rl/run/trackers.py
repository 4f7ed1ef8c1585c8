"""The run's trackers (``engine-rl train --logger NAME[=TARGET]``): a stage of :mod:`engine_rl.run.stages`.

:func:`attach_trackers` opens each tracker (:func:`engine_rl.trackers.open_tracker`) and feeds it
every ``metrics.jsonl`` line (:class:`handlers.TrackerHandler`). ``RUN/trackers.json`` records what
reopens the same tracker runs (the directory, the MLflow and W&B run ids): ``--resume`` continues
them, with or without ``--logger`` again. A resumed run adds no point twice: TensorBoard hides what
the previous process logged after the checkpoint (``purge_step``); MLflow and W&B cannot, so they
get nothing at or before the last line that process logged (the values of a bitwise resume are the
same; ``time`` and ``fps`` there are the first process's).
"""

from __future__ import annotations

import json
from typing import Any

import torch

from engine_rl.run.folder import RunError, config_record, write_text
from engine_rl.run.stages import Run
from engine_rl.trackers import TrackerError, TrackerSpec, hyperparameters, open_tracker, same_target
from handlers.trackers import TrackerHandler

__all__ = ["attach_trackers", "read_trackers", "tracker_specs"]

TRACKERS_FILE = "trackers.json"


def read_trackers(run: Run) -> dict[str, dict[str, Any]]:
    """The tracker runs a previous process of this run opened (``trackers.json``; empty if none)."""
    path = run.out / TRACKERS_FILE
    if not path.is_file():
        return {}
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunError(f"--resume: {path} cannot be read ({err}); delete it to start new tracker runs") from err
    if not isinstance(saved, dict) or not all(isinstance(v, dict) for v in saved.values()):
        raise RunError(f"--resume: {path} is not a trackers record; delete it to start new tracker runs")
    return saved


def tracker_specs(saved: dict[str, dict[str, Any]], loggers: tuple[str, ...]) -> list[TrackerSpec]:
    """The trackers of this process: those ``saved`` (continued) and those of ``--logger``.

    Raises:
        TrackerError: a ``--logger`` spec that is not valid, or that names another target than the
            tracker run it would continue.
    """
    specs = {name: TrackerSpec.parse(name) for name in saved}
    for text in loggers:
        spec = TrackerSpec.parse(text)
        before = saved.get(spec.name, {}).get("target")
        if before is not None and spec.target is not None and not same_target(spec.name, spec.target, before):
            raise TrackerError(f"--logger {text}: this run logs to {spec.name} at {before} ({TRACKERS_FILE}); "
                               f"resume with --logger {spec.name} (or the same target), or train into another --out")
        specs[spec.name] = spec if spec.target is not None or spec.name not in specs else specs[spec.name]
    return list(specs.values())


def attach_trackers(run: Run) -> None:
    """Rank 0: open the run's trackers, feed them the metrics log, close them when the run ends;
    write ``trackers.json``. A tracker that cannot be opened stops the run before it trains."""
    if not run.lead:
        return
    saved = read_trackers(run) if run.options.resume else {}
    try:
        specs = tracker_specs(saved, run.options.loggers)
    except TrackerError as err:
        raise RunError(str(err)) from err
    if not specs:
        return
    params = hyperparameters(config_record(run.name, run.config))
    optimizers = {k: v for k, v in run.setup.to_save.items() if isinstance(v, torch.optim.Optimizer)}
    opened, record = [], {}
    try:
        for spec in specs:
            previous = saved.get(spec.name)
            logger, record[spec.name] = open_tracker(
                spec, run.out, experiment=run.name, run_name=run.out.resolve().name, params=params,
                previous=previous, resumed_frames=run.resumed_frames)
            # MLflow and W&B keep what the previous process sent: start after its last line
            after = run.logged_frames if previous is not None and spec.name != "tensorboard" else None
            opened.append(TrackerHandler(logger, optimizers=optimizers, after_frames=after))
    except TrackerError as err:
        for handler in opened:
            handler.close()
        raise RunError(str(err)) from err
    for handler in opened:
        handler.attach(run.setup.trainer)
        run.setup.closers.append(handler.close)
    write_text(run.out / TRACKERS_FILE, json.dumps(record, indent=2))
