"""``engine-rl tune RECIPE --trials N``: search a recipe's hyperparameters with Optuna.

The study is ``--out DIR/study.db`` (SQLite; default ``DIR`` = ``runs/tune-RECIPE``) and each
trial a normal run folder, ``DIR/trial_<n>`` (``engine-rl eval DIR/trial_<n>`` evaluates it).
``--jobs J`` runs J trials at a time, as processes; ``--frames`` and ``--set`` apply to every
trial (a field the recipe's search space tunes cannot be set); trial ``k``'s seed is ``--seed``
plus ``k``. A pruned trial stops at an evaluation (``--pruner``). Killing the command and running
it again continues the study: finished trials are kept, an interrupted one runs again. At the
end: a table of the trials, the best trial's ``--set`` list and ``engine-rl train`` command,
``DIR/best.json``, and the plots ``DIR/optimization_history.png`` and ``DIR/param_importances.png``.
The machinery is :mod:`engine_rl.tune`, which needs the ``[tune]`` extra.
"""

from __future__ import annotations

import argparse

from engine_rl.recipes import get_recipe

EXTRA = "tune needs the [tune] extra: pip install 'engine_rl[tune]' (optuna, optuna-integration, matplotlib)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tune", help="search a recipe's hyperparameters with Optuna; each trial a run folder")
    t.add_argument("recipe", help="recipe name (one with a search space: see `engine-rl recipes`)")
    t.add_argument("--trials", type=int, required=True, metavar="N",
                   help="trials in the study (pruned ones count; one interrupted by a kill does not, its rerun does)")
    t.add_argument("--jobs", type=int, default=1, metavar="J", help="trials at a time, each in its own process")
    t.add_argument("--frames", type=int, default=None, metavar="F", help="frames per trial (default: the recipe's)")
    t.add_argument("--out", default=None, metavar="DIR", help="study folder (default: runs/tune-RECIPE)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config field for every trial (not one the search space tunes); repeatable")
    t.add_argument("--seed", type=int, default=None, help="trial k's seed is this plus k (default: the recipe's seed)")
    t.add_argument("--pruner", default="median", metavar="median|none|below=X",
                   help="median (default): below the other trials' median at the same tenth of the run; "
                        "none; below=X: an evaluation return below X")
    t.add_argument("--threads", type=int, default=1, help="torch threads per job (default 1)")


def run(args: argparse.Namespace) -> int:
    """Run or continue the study; print the trials, the best one, and where the files are."""
    get_recipe(args.recipe)
    try:
        import matplotlib  # noqa: F401
        import optuna_integration  # noqa: F401
    except ImportError as err:
        raise ValueError(f"{EXTRA}; {err}") from None
    from engine_rl.tune import TuneSpec, best_record, run_study, save_plots, trials_table, write_best

    spec = TuneSpec(recipe=args.recipe, trials=args.trials, out=args.out or f"runs/tune-{args.recipe}",
                    jobs=args.jobs, frames=args.frames, overrides=args.overrides, seed=args.seed,
                    pruner=args.pruner, threads=args.threads)
    study = run_study(spec)
    print(trials_table(study))
    best = best_record(study, recipe=spec.recipe, frames=spec.frames, overrides=spec.overrides)
    if best is None:
        print("no trial completed: no best trial")
    else:
        print(f"best: trial {best['trial']}, eval return {best['value']:.6g} ({spec.out / best['run']})")
        print("  " + " ".join(f"--set {text}" for text in best["set"]))
        print(f"  {best['command']}")
        print(f"  {write_best(spec.out, best)}")
    written, skipped = save_plots(study, spec.out)
    for line in [*(str(path) for path in written), *skipped]:
        print(f"plot: {line}")
    return 0
