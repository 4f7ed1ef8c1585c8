"""An Optuna study of a recipe's hyperparameters: each trial is a normal run folder, ``OUT/trial_<n>``,
made by :func:`engine_rl.run.driver.train`; the study lives in ``OUT/study.db`` (SQLite).

:func:`run_study` is ``engine-rl tune``: it checks the request (:class:`TuneSpec`,
:func:`base_config`), locks ``OUT`` (:class:`~engine_rl.run.lock.RunLock`, so one tuner at a time
and a killed one's lock taken over), opens or continues the study, reruns the trials a killed
tuner left running (:func:`recover_interrupted`), and runs ``jobs`` worker processes, each taking
trials until ``trials`` are counted (:func:`claim_trial`: COMPLETE, PRUNED, RUNNING, and FAIL
from an error; a trial interrupted by a kill is not counted, its rerun is).

A trial: the recipe's ``search_space(trial, config)`` samples the fields it tunes; the seed is
``seed + k`` for the trial's index ``k`` (its number, or for a rerun the number of the trial it
reruns), so the study is reproducible with one job; Optuna's sampler is a ``TPESampler`` seeded
the same way for each trial (by the number of trials before it). Pruning: Optuna's
``PyTorchIgnitePruningHandler`` on the recipe's evaluator (:func:`attach_pruning`) reports the
evaluation's mean return at the trainer's epochs (tenths of the run, the same fractions of the
budget in every trial, as rl-zoo's evaluations every ``n_timesteps // n_evaluations``); a pruned
trial's run stops at that evaluation, its folder kept as it was then (no summary). A trial's value
is its final evaluation's mean return (maximized).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import torch
from ignite.engine import Events
from optuna.trial import FrozenTrial, TrialState
from optuna_integration import PyTorchIgnitePruningHandler

from engine_rl.checks import is_int, is_number
from engine_rl.recipes import RECIPES, get_recipe
from engine_rl.recipes.config import apply_overrides
from engine_rl.run.driver import RunError, make_config, train
from engine_rl.run.lock import RunLock

__all__ = [
    "DB_NAME", "STUDY_NAME", "TuneSpec", "attach_pruning", "base_config", "claim_trial", "counted", "make_pruner",
    "open_study", "recover_interrupted", "run_study", "run_trial", "set_list", "trial_config",
]

DB_NAME = "study.db"
STUDY_NAME = "engine-rl"
SQLITE_TIMEOUT_S = 300
"""How long a process waits for SQLite's write lock (other workers writing) before an error."""
# trial user attributes
SET = "set"  # the trial's fields as `--set key=value` texts (the sampled ones and its seed)
RUN = "run"  # its run folder, relative to OUT
SEED_INDEX = "seed_index"  # k in seed + k (a rerun keeps the interrupted trial's)
RERUN_OF = "rerun_of"  # the number of the interrupted trial a rerun replaces
ERROR = "error"  # a failed trial's error, one line

optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "Trial 3 finished ..." log lines: tune prints its own


@dataclass(kw_only=True)
class TuneSpec:
    """What ``engine-rl tune`` was asked: ``trials`` trials of ``recipe`` into ``out``, ``jobs`` at
    a time, each with ``frames`` frames (None: the recipe's ``total_frames``) and the ``overrides``
    (``--set``) on top of the recipe's defaults; trial ``k``'s seed is ``seed + k`` (None: the
    recipe's seed); ``pruner`` as :func:`make_pruner` reads it; ``threads`` torch threads per job.

    Examples:
        >>> TuneSpec(recipe="dqn-cartpole", trials=0, out="x")
        Traceback (most recent call last):
        ...
        ValueError: --trials must be >= 1, got 0
    """

    recipe: str
    trials: int
    out: Path
    jobs: int = 1
    frames: int | None = None
    overrides: Sequence[str] = ()
    seed: int | None = None
    pruner: str = "median"
    threads: int = 1

    def __post_init__(self) -> None:
        self.out, self.overrides = Path(self.out), tuple(self.overrides)
        for name in ("trials", "jobs", "threads", "frames"):
            value = getattr(self, name)
            if (value is not None or name != "frames") and not (is_int(value) and value >= 1):
                raise ValueError(f"--{name} must be >= 1, got {value}")
        if self.seed is not None and not (is_int(self.seed) and self.seed >= 0):
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        make_pruner(self.pruner)

    @property
    def base_overrides(self) -> list[str]:
        """Every trial's ``--set`` before its own fields: the user's, and ``--frames``."""
        return [*self.overrides, *([f"total_frames={self.frames}"] if self.frames is not None else [])]

    def record(self) -> dict[str, Any]:
        """What a study keeps of the command, so that running it again continues the same study."""
        return {"recipe": self.recipe, "frames": self.frames, "set": list(self.overrides), "seed": self.seed,
                "pruner": self.pruner}


def make_pruner(text: str) -> optuna.pruners.BasePruner:
    """The pruner ``--pruner`` names: ``median`` (Optuna's ``MedianPruner``: a trial whose evaluation
    falls below the median of the other trials' at the same epoch, once 5 trials have finished and
    after the first 3 tenths of the run, as rl-zoo waits a third of its evaluations), ``none``, or
    ``below=X`` (``ThresholdPruner``: a trial whose evaluation return falls below ``X``).

    Examples:
        >>> type(make_pruner("below=100")).__name__
        'ThresholdPruner'
        >>> make_pruner("mean")
        Traceback (most recent call last):
        ...
        ValueError: --pruner must be 'median', 'none' or 'below=X' (X a number), got 'mean'
    """
    if text == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=3)
    if text == "none":
        return optuna.pruners.NopPruner()
    if text.startswith("below="):
        with contextlib.suppress(ValueError):
            if math.isfinite(lower := float(text.removeprefix("below="))):
                return optuna.pruners.ThresholdPruner(lower=lower)
    raise ValueError(f"--pruner must be 'median', 'none' or 'below=X' (X a number), got {text!r}")


def _keys(overrides: Sequence[str]) -> list[str]:
    return [text.split("=", 1)[0].strip() for text in overrides]


def base_config(spec: TuneSpec) -> Any:
    """Every trial's config before its own fields, checked: the recipe has a search space, the
    overrides fit it, none sets a field the search space tunes or the seed, and the env can be made.

    Raises:
        ValueError: one line naming the recipe, key or value, and what is accepted.
    """
    recipe = get_recipe(spec.recipe)
    if recipe.search_space is None:
        tunable = ", ".join(sorted(name for name, r in RECIPES.items() if r.search_space is not None))
        raise ValueError(f"tune: recipe {spec.recipe!r} has no search space; recipes with one: {tunable}")
    config = make_config(spec.recipe, spec.base_overrides)
    if "seed" in _keys(spec.overrides):
        raise ValueError("--set seed: a trial's seed is --seed plus its number; use --seed")
    probe = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    tuned = sorted(recipe.search_space(probe, config))
    for key in _keys(spec.overrides):
        if key in tuned:
            raise ValueError(f"--set {key}: {spec.recipe}'s search space tunes {key} (it tunes {', '.join(tuned)}); "
                             "drop it from --set")
    config.check_env()
    return config


def set_text(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` reads it back.

    Examples:
        >>> [set_text(*kv) for kv in (("hidden", (64,)), ("lr", 3e-4), ("double", True), ("target_kl", None))]
        ['hidden=(64,)', 'lr=0.0003', 'double=true', 'target_kl=none']
    """
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "none"
    elif isinstance(value, tuple):
        text = "(" + ",".join(repr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    else:
        text = value if isinstance(value, str) else repr(value)
    return f"{key}={text}"


def set_list(fields: dict[str, Any]) -> list[str]:
    """``fields`` as ``--set`` texts, in their order."""
    return [set_text(key, value) for key, value in fields.items()]


def seed_index(trial: FrozenTrial | optuna.Trial) -> int:
    """``k`` of the trial's seed ``seed + k``: its number, or a rerun's interrupted trial's."""
    return int(trial.user_attrs.get(SEED_INDEX, trial.number))


def trial_config(spec: TuneSpec, trial: optuna.Trial) -> tuple[Any, dict[str, Any]]:
    """The trial's config, and its own fields (those its search space sampled, and its seed)."""
    config = make_config(spec.recipe, spec.base_overrides)
    base_seed = config.seed if spec.seed is None else spec.seed
    fields = {**get_recipe(spec.recipe).search_space(trial, config), "seed": base_seed + seed_index(trial)}
    return apply_overrides(config, fields), fields


def attach_pruning(trial: optuna.Trial, run: Any) -> None:
    """Optuna's ``PyTorchIgnitePruningHandler`` on the run's evaluator, at ``COMPLETED``: it reports
    the evaluation's ``return_mean`` at the trainer's epoch and raises ``optuna.TrialPruned`` when
    the pruner says so. Optuna keeps one value per step, so only the first evaluation of each
    epoch reports (later ones would be dropped with a warning each)."""
    if run.validation is None:
        raise RunError(f"tune: recipe {run.name!r} attaches no ValidationRollout, so its trials have no score")
    trainer, reported = run.setup.trainer, set()

    def first_of_epoch(_evaluator: Any, _event: int) -> bool:
        epoch = int(trainer.state.epoch)
        if epoch in reported:
            return False
        reported.add(epoch)
        return True

    handler = PyTorchIgnitePruningHandler(trial, "return_mean", trainer)
    run.validation.evaluator.add_event_handler(Events.COMPLETED(event_filter=first_of_epoch), handler)


def _rdb_storage(path: Path) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT_S}})


def open_study(spec: TuneSpec) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    """The study in ``spec.out/study.db`` (created, or continued if ``spec`` asks for the same one).

    Raises:
        ValueError: the file holds a study of another command (recipe, frames, overrides, seed, pruner).
    """
    path = (spec.out / DB_NAME).resolve()
    if not path.exists():  # made whole under another name, then renamed: a reader never sees it half made
        partial = path.with_name(f"{DB_NAME}.partial")
        partial.unlink(missing_ok=True)
        _rdb_storage(partial).engine.dispose()  # Optuna's tables and schema version
        os.replace(partial, path)
    storage = _rdb_storage(path)
    study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction="maximize",
                                pruner=make_pruner(spec.pruner), load_if_exists=True)
    saved = study.user_attrs.get("engine_rl")
    if saved is None:
        study.set_user_attr("engine_rl", spec.record())
    elif saved != spec.record():
        raise ValueError(f"--out {spec.out}: its {DB_NAME} is a study of {saved}, not of {spec.record()}; run that "
                         "command again to continue it, or use another --out")
    return study, storage


def recover_interrupted(study: optuna.Study) -> list[int]:
    """Rerun the trials a killed tuner left RUNNING (the caller holds ``OUT``'s lock, so no live
    tuner runs them): each is enqueued again with its parameters and seed, then marked FAIL; the
    rerun is a new trial (the next number, its own folder) carrying ``rerun_of``. Returns their numbers."""
    trials = study.get_trials(deepcopy=False)
    rerun = {t.user_attrs.get(RERUN_OF) for t in trials}
    stale = [t for t in trials if t.state == TrialState.RUNNING]
    for trial in stale:
        if trial.number not in rerun:  # enqueued before a kill during this recovery
            study.enqueue_trial(trial.params, user_attrs={SEED_INDEX: seed_index(trial), RERUN_OF: trial.number})
        study.tell(trial.number, state=TrialState.FAIL)
    return [t.number for t in stale]


def counted(trials: Sequence[FrozenTrial]) -> int:
    """Trials that count towards ``--trials``: finished (COMPLETE, PRUNED, FAIL from an error) or
    RUNNING; not one that a kill interrupted (its rerun counts) nor one still WAITING.

    Examples:
        >>> from optuna.trial import create_trial
        >>> done = create_trial(value=1.0)
        >>> killed = create_trial(state=TrialState.FAIL)
        >>> rerun = create_trial(state=TrialState.WAITING, user_attrs={RERUN_OF: 1})
        >>> killed.number, rerun.number = 1, 2
        >>> counted([done, killed]), counted([done, killed, rerun])
        (2, 1)
    """
    interrupted = {t.user_attrs[RERUN_OF] for t in trials if RERUN_OF in t.user_attrs}
    return sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        or (t.state == TrialState.FAIL and t.number not in interrupted)
        for t in trials
    )


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` while the block runs (between the tuner's processes)."""
    with open(path, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def claim_trial(study: optuna.Study, spec: TuneSpec) -> optuna.Trial | None:
    """The next trial to run (a rerun first), or None once ``spec.trials`` are counted; counting
    and asking hold a lock, so that ``jobs`` processes never start more trials than asked."""
    with _exclusive(spec.out / "claim.lock"):
        trials = study.get_trials(deepcopy=False)
        if counted(trials) >= spec.trials:
            return None
        seed = make_config(spec.recipe).seed if spec.seed is None else spec.seed
        study.sampler = optuna.samplers.TPESampler(seed=seed + len(trials))
        return study.ask()


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    message = lines[0] if lines else ""
    return message if isinstance(err, ValueError) and message else f"{type(err).__name__}: {message}".rstrip(": ")


def run_trial(study: optuna.Study, trial: optuna.Trial, spec: TuneSpec) -> FrozenTrial:
    """Run ``trial`` in ``OUT/trial_<number>`` and tell the study how it ended: its final
    evaluation's mean return (COMPLETE), PRUNED, or FAIL with the error (a config the space made
    that the recipe refuses, a NaN...). A ``KeyboardInterrupt`` leaves it RUNNING (rerun later)."""
    out = spec.out / f"trial_{trial.number}"
    trial.set_user_attr(RUN, out.name)
    try:
        config, fields = trial_config(spec, trial)
        trial.set_user_attr(SET, set_list(fields))
        summary = train(spec.recipe, config, out, progress=False, attach=partial(attach_pruning, trial))
        value = summary.get("eval_return_mean")
        if not (is_number(value) and math.isfinite(value)):
            raise RunError(f"the final evaluation's mean return is {value!r}")
    except optuna.TrialPruned:
        return study.tell(trial, state=TrialState.PRUNED)
    except Exception as err:  # the trial failed, the study goes on
        trial.set_user_attr(ERROR, _first_line(err))
        return study.tell(trial, state=TrialState.FAIL)
    return study.tell(trial, float(value))


def progress_line(trial: FrozenTrial, study: optuna.Study, spec: TuneSpec) -> str:
    """One line per finished trial: how it ended and how far the study is."""
    if trial.state == TrialState.COMPLETE:
        how = f"COMPLETE, eval return {trial.value:.4g}"
    elif trial.state == TrialState.PRUNED:
        step = trial.last_step
        how = f"PRUNED at epoch {step}, eval return {trial.intermediate_values[step]:.4g}"
    else:
        how = f"{trial.state.name}: {trial.user_attrs.get(ERROR, '')}"
    rerun = f" (rerun of trial {trial.user_attrs[RERUN_OF]})" if RERUN_OF in trial.user_attrs else ""
    done = counted([t for t in study.get_trials(deepcopy=False) if t.state != TrialState.RUNNING])
    return f"engine-rl tune: trial {trial.number}{rerun} {how}; {done} of {spec.trials} done"


def work(spec: TuneSpec) -> None:
    """One job: take trials and run them until ``spec.trials`` are counted, a line for each."""
    torch.set_num_threads(spec.threads)
    study, storage = open_study(spec)
    try:
        while (trial := claim_trial(study, spec)) is not None:
            print(progress_line(run_trial(study, trial, spec), study, spec), flush=True)
    finally:
        storage.engine.dispose()


def _exit_with(parent: int) -> None:
    """End this worker once its parent is gone (killed): its trial is rerun by the next tuner."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _job(spec: TuneSpec, parent: int) -> None:
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    work(spec)


def run_study(spec: TuneSpec) -> optuna.Study:
    """Run or continue the study ``spec`` asks for (see the module's docstring); return it.

    ``jobs`` > 1 forks that many worker processes (so recipes registered in this process, a
    test's among them, are theirs too); with 1 the trials run in this process.

    Raises:
        ValueError: a bad request (:func:`base_config`), or ``out`` holding another study.
        RunError: ``out`` is in use by another tuner, or cannot be made.
        RuntimeError: a worker process died (the study continues when the command runs again).
    """
    base_config(spec)
    if spec.out.exists() and not spec.out.is_dir():
        raise RunError(f"--out {spec.out} is a file; tune needs a folder")
    spec.out.mkdir(parents=True, exist_ok=True)
    with RunLock(spec.out):
        study, storage = open_study(spec)
        for number in recover_interrupted(study):
            print(f"engine-rl tune: trial {number} was interrupted; it runs again as a new trial", flush=True)
        storage.engine.dispose()  # no connection shared with the forked jobs
        if spec.jobs == 1:
            work(spec)
        else:
            context = multiprocessing.get_context("fork")
            jobs = [context.Process(target=_job, args=(spec, os.getpid()), daemon=False) for _ in range(spec.jobs)]
            for job in jobs:
                job.start()
            for job in jobs:
                job.join()
            failed = [job.exitcode for job in jobs if job.exitcode]
            if failed:
                raise RuntimeError(f"tune: {len(failed)} of {spec.jobs} job processes failed (exit status "
                                   f"{failed[0]}); run the same command again to continue the study")
        return optuna.load_study(study_name=STUDY_NAME, storage=storage)
