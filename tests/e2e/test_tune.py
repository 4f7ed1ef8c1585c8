"""``engine-rl tune``: 4 trials of dqn-cartpole on a small budget, two jobs; the tuner and its jobs
SIGKILLed mid-study, then the same command finishes it with no trial lost or counted twice.

What is pruned must not depend on what a network learns (that differs between CPUs and seeds):
each evaluation's return is set from the trial's seed (``support.scores.scored_by``): 100 for an
even seed, 0 for an odd one, and ``--pruner below=50`` prunes a trial at its first evaluation
under 50. Trial ``k``'s seed is ``--seed`` plus ``k``, so of 4 trials (whatever the seed offset)
two are pruned and two complete with 100; a trial rerun after the kill keeps its seed.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from engine_rl.cli import main
from engine_rl.tune.study import DB_NAME, RERUN_OF, RUN, SET, STUDY_NAME
from support.seeds import seed, seed_arg

TESTS = str(Path(__file__).resolve().parents[1])  # support/, for the processes the tests start
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}
SCORE = "lambda config, frames: 100.0 if config.seed % 2 == 0 else 0.0"
CLI = f"""
from engine_rl.recipes import RECIPES
from support.scores import scored_by
RECIPES["dqn-cartpole"] = scored_by("dqn-cartpole", {SCORE})
import sys
from engine_rl.cli import main
sys.exit(main(sys.argv[1:]))
"""
# a few seconds a trial: 3,000 frames of 4 env copies, short evaluations every 20 batches
ARGS = ["--trials", "4", "--jobs", "2", "--frames", "3000", "--seed", seed_arg(0), "--pruner", "below=50",
        "--set", "num_envs=4", "--set", "learning_starts=2000", "--set", "eval_every=20", "--set", "eval_episodes=2"]


def tune(out, *extra, **kwargs):
    return subprocess.Popen([sys.executable, "-c", CLI, "tune", "dqn-cartpole", "--out", str(out), *ARGS, *extra],
                            env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def trials(out):
    return optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / DB_NAME}").get_trials()


def kill_mid_study(out, process, timeout=240):
    """SIGKILL the tuner and its jobs (its process group) once a trial has finished and another is
    training (its metrics.jsonl written); return the trials as they were then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if (out / DB_NAME).exists():
            try:
                now = trials(out)
            except Exception:  # noqa: BLE001  (the study is being created)
                now = []
            finished = [t for t in now if t.state.is_finished()]
            training = [t for t in now if t.state == TrialState.RUNNING
                        and (out / t.user_attrs.get(RUN, "-") / "metrics.jsonl").exists()]
            if finished and training:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                return trials(out)
        time.sleep(0.2)
    raise AssertionError("no trial finished while another trained")


def test_tune_killed_then_continued(tmp_path):
    out = tmp_path / "study"
    before = kill_mid_study(out, tune(out))
    interrupted = {t.number for t in before if t.state == TrialState.RUNNING}
    finished = {t.number: t for t in before if t.state.is_finished()}
    assert interrupted and finished

    again = tune(out)
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stderr
    after = {t.number: t for t in trials(out)}

    # finished trials kept as they were; the interrupted ones FAIL, each rerun once with its params and seed
    for number, trial in finished.items():
        assert (after[number].state, after[number].value, after[number].params) == (trial.state, trial.value,
                                                                                     trial.params)
    assert {n for n, t in after.items() if t.state == TrialState.FAIL} == interrupted
    reruns = {t.user_attrs[RERUN_OF]: t for t in after.values() if RERUN_OF in t.user_attrs}
    assert sorted(reruns) == sorted(interrupted)
    for number, rerun in reruns.items():
        # the parameters sampled before the kill (some or none if it came while sampling), the same seed
        assert rerun.params.items() >= after[number].params.items()
        assert rerun.user_attrs[SET][-1] == f"seed={seed(0) + number}"
        if SET in after[number].user_attrs:  # sampled in full before the kill: the same config
            assert rerun.user_attrs[SET] == after[number].user_attrs[SET]
        assert rerun.state in (TrialState.COMPLETE, TrialState.PRUNED)
        assert f"trial {number} was interrupted; it runs again as a new trial" in stdout

    # 4 trials counted, none twice; trial k's seed is --seed + k (a rerun's k: the interrupted trial's
    # number), the odd ones pruned at their first evaluation; trials 0 and 1 (or their reruns) among them
    counted = [t for t in after.values() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(counted) == 4
    index = {t.number: t.user_attrs.get(RERUN_OF, t.number) for t in counted}
    assert len(set(index.values())) == 4 and {0, 1} <= set(index.values())
    for trial in counted:
        assert trial.user_attrs[SET][-1] == f"seed={seed(0) + index[trial.number]}"
        odd = (seed(0) + index[trial.number]) % 2
        assert trial.state == (TrialState.PRUNED if odd else TrialState.COMPLETE)
        assert trial.value == (0.0 if odd else 100.0)  # a pruned trial's: its last reported
        assert list(trial.intermediate_values.values())[:1] == ([0.0] if odd else [100.0])
    assert {t.state for t in counted} == {TrialState.PRUNED, TrialState.COMPLETE}
    assert sorted(t.user_attrs[RUN] for t in after.values()) == sorted(f"trial_{n}" for n in after)
    folders = {p.name for p in out.iterdir() if p.name.startswith("trial_")}
    # one folder per trial, the interrupted ones' kept: but a trial killed before its run made its folder has none
    assert {f"trial_{t.number}" for t in counted} <= folders <= {f"trial_{n}" for n in after}
    assert folders >= {f"trial_{n}" for n in after if n not in interrupted}
    summaries = sorted(p.parent.name for p in out.glob("trial_*/summary.json"))
    assert summaries == sorted(t.user_attrs[RUN] for t in counted if t.state == TrialState.COMPLETE)
    locked = sorted(p.parent.name for p in out.glob("trial_*/run.lock"))  # left by the kill: only there
    assert set(locked) <= {f"trial_{n}" for n in interrupted} and not (out / "run.lock").exists()

    # the end: a table of every trial, the best trial's --set list, best.json and the plots
    best = json.loads((out / "best.json").read_text())
    winner = after[best["trial"]]
    assert winner.state == TrialState.COMPLETE and best["value"] == 100.0 and best["run"] == f"trial_{winner.number}"
    assert best["set"] == [a for pair in zip(ARGS[::2], ARGS[1::2]) if pair[0] == "--set" for a in pair[1:]] + \
        winner.user_attrs[SET]
    assert " ".join(f"--set {text}" for text in best["set"]) in stdout
    table = stdout[stdout.index("trial  state"):].splitlines()
    assert [row.split()[:2] for row in table[1:len(after) + 1]] == [[str(n), after[n].state.name] for n in sorted(after)]
    assert (out / "optimization_history.png").stat().st_size > 0 and (out / "param_importances.png").stat().st_size > 0

    # the same command once more: nothing left to run
    done = tune(out)
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr
    assert len(trials(out)) == len(after) and "trial_" in stdout


@pytest.mark.parametrize(("argv", "line"), [
    (["tune", "ppo-atari", "--trials", "2"], "engine-rl: error: tune: recipe 'ppo-atari' has no search space; "
                                             "recipes with one: dqn-cartpole, ppo-cartpole, sac-pendulum, td3-pendulum"),
    (["tune", "dqn-cartpole", "--trials", "0"], "engine-rl: error: --trials must be >= 1, got 0"),
    (["tune", "dqn-cartpole", "--trials", "2", "--jobs", "0"], "engine-rl: error: --jobs must be >= 1, got 0"),
    (["tune", "dqn-cartpole", "--trials", "2", "--set", "lr=0.1"],
     "engine-rl: error: --set lr: dqn-cartpole's search space tunes lr (it tunes batch_size, eps_end, eps_frames, "
     "frames_per_batch, gamma, hidden, lr, optim_steps_per_batch, target_update_every); drop it from --set"),
    (["tune", "dqn-cartpole", "--trials", "2", "--pruner", "mean"],
     "engine-rl: error: --pruner must be 'median', 'none' or 'below=X' (X a number), got 'mean'"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, line):
    out = tmp_path / "study"
    assert main([*argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""
    assert not out.exists()  # refused before anything was written
