"""The fault-injection script runs and reports: one killed dqn-cartpole run resumes to the
straight run's final checkpoint (the full figures, 20 trials per recipe, are in the README).
The recipes' seeds and the kill times' seed are shifted by the suite's seed offset."""

import json

import pytest

from faults import kill_resume
from support.seeds import seed_arg, shift_seed_args


@pytest.fixture(autouse=True)
def shifted_seeds(monkeypatch):
    """The script's runs on the recipes' seeds plus the suite's seed offset (``support.seeds``)."""
    for recipe, args in list(kill_resume.ARGS.items()):
        monkeypatch.setitem(kill_resume.ARGS, recipe, shift_seed_args(args))


def test_one_trial_resumes_and_matches_the_straight_run(capsys, tmp_path):
    assert kill_resume.main(["--recipes", "dqn-cartpole", "--trials", "1", "--seed", seed_arg(0),
                             "--keep", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["recipe"] for r in rows] == ["dqn-cartpole", "all"]
    row = rows[0]
    assert row["trials"] == 1 and row["resumed"] == 1 and row["matched"] == 1 and row["failures"] == []
    assert sum(row["kills_by_phase"].values()) == 1
    assert (tmp_path / "dqn-cartpole" / "trial00" / "summary.json").is_file()


def test_bad_counts_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        kill_resume.main(["--trials", "0"])
    assert exit_.value.code == 2
    assert "--trials, --kills and --jobs must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("phase", ["final-evaluation", "after-final-checkpoint"])
def test_a_kill_at_the_end_of_the_run_resumes_to_the_same_end(phase, capsys, tmp_path):
    """Killed inside the final evaluation or before the end-of-run files: the resumed run ends
    with the straight run's final checkpoint, log (final eval line included), scores and best policy."""
    assert kill_resume.main(["--recipes", "dqn-cartpole", "--trials", "1", "--phase", phase,
                             "--keep", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["phase"] == phase and row["kills_by_phase"] == {phase: 1}
    assert row["resumed"] == 1 and row["matched"] == 1 and row["failures"] == []
