"""The study's bookkeeping without a tuner process: trials counted, a killed tuner's RUNNING trials
rerun once with their parameters and seed, claims stopping at ``--trials``, ``--set`` texts that
read back, the checks of a request, a pruned trial in one process."""

import optuna
import pytest
from optuna.trial import TrialState

from engine_rl.recipes import RECIPES
from engine_rl.recipes.config import apply_overrides
from engine_rl.run.driver import make_config
from engine_rl.tune.study import (
    RERUN_OF,
    RUN,
    SEED_INDEX,
    SET,
    TuneSpec,
    base_config,
    claim_trial,
    counted,
    open_study,
    recover_interrupted,
    run_study,
    set_list,
    trial_config,
)
from support.scores import scored_by
from support.seeds import seed

FAST = ["num_envs=4", "learning_starts=1500", "eval_every=20", "eval_episodes=2"]


def spec(tmp_path, **fields):
    return TuneSpec(**{"recipe": "dqn-cartpole", "trials": 3, "out": tmp_path, "frames": 2000, "overrides": FAST,
                       "seed": seed(0), **fields})


def test_a_killed_tuners_trials_are_rerun_once_with_their_params_and_seed(tmp_path):
    request = spec(tmp_path)
    study, _ = open_study(request)
    done = claim_trial(study, request)
    trial_config(request, done)
    study.tell(done, 5.0)
    killed = claim_trial(study, request)  # RUNNING, as a killed tuner leaves it
    _, fields = trial_config(request, killed)
    assert fields["seed"] == seed(0) + 1

    assert recover_interrupted(study) == [1]
    assert recover_interrupted(study) == []  # nothing RUNNING any more: no second rerun
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert trials[2].user_attrs == {SEED_INDEX: 1, RERUN_OF: 1}
    assert counted(trials) == 1  # the killed one does not count, the waiting rerun not yet

    rerun = claim_trial(study, request)  # the rerun first, with the killed trial's parameters and seed
    assert rerun.number == 2
    _, again = trial_config(request, rerun)
    assert again == fields and rerun.params == killed.params
    third = claim_trial(study, request)
    assert third.number == 3 and claim_trial(study, request) is None  # 3 counted: 2 RUNNING, 1 COMPLETE


def test_set_list_reads_back_as_the_same_config(tmp_path):
    request = spec(tmp_path)
    for number in range(5):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=number)).ask()
        config, fields = trial_config(request, trial)
        assert apply_overrides(make_config("dqn-cartpole", [*FAST, "total_frames=2000"]), set_list(fields)) == config


@pytest.mark.parametrize("name", ["dqn-cartpole", "ppo-cartpole", "sac-pendulum", "td3-pendulum"])
def test_each_search_space_makes_configs_its_recipe_accepts(name):
    space, base = RECIPES[name].search_space, make_config(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed(0)))
    for _ in range(50):
        trial = study.ask()
        config = apply_overrides(base, space(trial, base))  # the config's checks pass
        study.tell(trial, 0.0)
        assert config.hidden in ((64,), (64, 64), (256, 256), (400, 300))
        if name == "ppo-cartpole":  # a minibatch of the batch, at most all of it
            assert config.batch_size <= config.frames_per_batch
        assert 0.97 <= config.gamma <= 0.9999


@pytest.mark.parametrize(("fields", "message"), [
    ({"recipe": "sac-mujoco"}, "tune: recipe 'sac-mujoco' has no search space; recipes with one: dqn-cartpole, "
                               "ppo-cartpole, sac-pendulum, td3-pendulum"),
    ({"trials": 0}, "--trials must be >= 1, got 0"),
    ({"frames": 0}, "--frames must be >= 1, got 0"),
    ({"overrides": ["seed=3"]}, "--set seed: a trial's seed is --seed plus its number; use --seed"),
    ({"overrides": ["hidden=(8,)"]}, "--set hidden: dqn-cartpole's search space tunes hidden"),
    ({"overrides": ["lrr=1"]}, "DQNConfig: unknown key 'lrr'"),
    ({"pruner": "below=x"}, "--pruner must be 'median', 'none' or 'below=X' (X a number), got 'below=x'"),
])
def test_bad_requests_are_refused(tmp_path, fields, message):
    with pytest.raises(ValueError) as err:
        base_config(spec(tmp_path / "out", **fields))
    assert str(err.value).startswith(message)
    assert not (tmp_path / "out").exists()


def test_another_command_does_not_continue_a_study(tmp_path):
    open_study(spec(tmp_path))
    with pytest.raises(ValueError, match="its study.db is a study of .* run that command again to continue it"):
        open_study(spec(tmp_path, frames=4000))


def test_a_new_study_db_appears_whole_so_a_reader_never_meets_it_half_made(tmp_path, monkeypatch):
    """A reader opening study.db (the tests' polls, optuna-dashboard) while the tuner creates it once made both
    insert Optuna's schema version: the tuner failed with "UNIQUE constraint failed: alembic_version"."""
    import engine_rl.tune.study as study_module

    made = []
    real = study_module._rdb_storage

    def recording(path):
        made.append((path.name, (tmp_path / "study.db").exists()))
        return real(path)

    monkeypatch.setattr(study_module, "_rdb_storage", recording)
    open_study(spec(tmp_path))
    # the schema is written to study.db.partial while no study.db exists; then study.db is opened, whole
    assert made == [("study.db.partial", False), ("study.db", True)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db"]
    open_study(spec(tmp_path))  # an existing study.db is opened in place
    assert made[2:] == [("study.db", True)]


def test_one_job_prunes_and_completes(tmp_path, monkeypatch):
    # evaluation returns set by seed: an odd one falls below the pruner's 50 at its first evaluation
    monkeypatch.setitem(RECIPES, "dqn-cartpole", scored_by("dqn-cartpole", lambda config, _: 100.0 * (1 - config.seed % 2)))
    study = run_study(spec(tmp_path, trials=2, pruner="below=50"))
    trials = study.get_trials()
    by_seed = {int(t.user_attrs[SET][-1].removeprefix("seed=")): t for t in trials}
    assert sorted(by_seed) == [seed(0), seed(0) + 1]
    for value, trial in by_seed.items():
        pruned = value % 2 == 1
        assert trial.state == (TrialState.PRUNED if pruned else TrialState.COMPLETE)
        folder = tmp_path / trial.user_attrs[RUN]
        assert (folder / "summary.json").exists() != pruned and (folder / "metrics.jsonl").exists()
        assert not (folder / "run.lock").exists()  # a pruned run releases its folder
    assert not (tmp_path / "run.lock").exists()
