"""What ``engine-rl tune`` shows at the end of a study: a table of its trials, the best trial's
``--set`` list and ``engine-rl train`` command, ``OUT/best.json``, and two plots in ``OUT``:
``optimization_history.png`` and ``param_importances.png`` (Optuna's matplotlib plots).

Examples:
    >>> import optuna
    >>> from optuna.trial import create_trial
    >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
    >>> study = optuna.create_study(direction="maximize")
    >>> study.add_trial(create_trial(value=9.5, user_attrs={"set": ["lr=0.001", "seed=0"], "run": "trial_0"}))
    >>> print(trials_table(study))
    trial  state     value  run      set
    0      COMPLETE  9.5    trial_0  lr=0.001 seed=0
    >>> best_record(study, recipe="dqn-cartpole", frames=4096, overrides=["num_envs=4"])["command"]
    'engine-rl train dqn-cartpole --frames 4096 --set num_envs=4 --set lr=0.001 --set seed=0'
"""

from __future__ import annotations

import json
import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from engine_rl.tune.study import ERROR, RERUN_OF, RUN, SET

__all__ = ["PLOTS", "best_record", "save_plots", "trials_table", "write_best"]

#: The plots :func:`save_plots` writes, by file name.
PLOTS = ("optimization_history.png", "param_importances.png")


def _value(trial: optuna.trial.FrozenTrial) -> str:
    if trial.state == TrialState.COMPLETE:
        return f"{trial.value:.6g}"
    if trial.state == TrialState.PRUNED and trial.intermediate_values:
        return f"{trial.intermediate_values[trial.last_step]:.6g} @{trial.last_step}"
    return "-"


def _note(trial: optuna.trial.FrozenTrial, reruns: dict[int, int]) -> str:
    if trial.number in reruns:
        return f"interrupted, rerun as trial {reruns[trial.number]}"
    return trial.user_attrs.get(ERROR, "")


def trials_table(study: optuna.Study) -> str:
    """One row per trial: number, state, value (a pruned trial's last reported value ``@epoch``),
    run folder, its fields as ``--set`` texts (or what happened to it)."""
    trials = study.get_trials(deepcopy=False)
    reruns = {t.user_attrs[RERUN_OF]: t.number for t in trials if RERUN_OF in t.user_attrs}
    rows = [("trial", "state", "value", "run", "set")]
    for t in trials:
        fields = " ".join(t.user_attrs.get(SET, [])) or " ".join(f"{k}={v}" for k, v in t.params.items())
        note = _note(t, reruns)
        rows.append((str(t.number), t.state.name, _value(t), t.user_attrs.get(RUN, "-"),
                     f"{fields}  [{note}]" if note else fields))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[4]]).rstrip() for row in rows)


def best_record(
    study: optuna.Study, *, recipe: str, frames: int | None, overrides: Sequence[str] = ()
) -> dict[str, Any] | None:
    """The best COMPLETE trial: its number, value, run folder, Optuna parameters, ``set`` (its
    fields as ``--set`` texts, the study's own ``--set`` first) and the ``engine-rl train`` command
    that repeats it; None if no trial completed."""
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return None
    best = study.best_trial
    sets = [*overrides, *best.user_attrs.get(SET, [])]
    command = ["engine-rl", "train", recipe, *(["--frames", str(frames)] if frames is not None else [])]
    for text in sets:
        command += ["--set", text]
    return {"recipe": recipe, "trial": best.number, "value": best.value, "run": best.user_attrs.get(RUN),
            "params": best.params, "set": sets, "command": shlex.join(command)}


def write_best(out: str | Path, record: dict[str, Any]) -> Path:
    """``record`` to ``out/best.json``."""
    path = Path(out) / "best.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def save_plots(study: optuna.Study, out: str | Path) -> tuple[list[Path], list[str]]:
    """Optuna's optimization history and parameter importances (fANOVA) as PNGs in ``out``.
    Returns the files written and, for a plot that cannot be made (importances need two
    completed trials whose parameters differ), one line saying why."""
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written, skipped = [], []
    for name, plot in zip(PLOTS, (optuna_plots.plot_optimization_history, optuna_plots.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                axes = plot(study)
        except (ValueError, RuntimeError) as err:
            skipped.append(f"{name}: not made ({str(err).splitlines()[0] if str(err) else type(err).__name__})")
            continue
        path = Path(out) / name
        axes.figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(axes.figure)
        written.append(path)
    return written, skipped
