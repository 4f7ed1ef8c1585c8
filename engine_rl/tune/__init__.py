"""``engine-rl tune``: an Optuna study of a recipe's hyperparameters (its ``search_space``), each
trial a run folder; :mod:`engine_rl.tune.study` runs it, :mod:`engine_rl.tune.report` shows it.
Needs the ``[tune]`` extra (optuna, optuna-integration, matplotlib)."""

from engine_rl.tune.report import best_record, save_plots, trials_table, write_best
from engine_rl.tune.study import TuneSpec, run_study

__all__ = ["TuneSpec", "best_record", "run_study", "save_plots", "trials_table", "write_best"]
