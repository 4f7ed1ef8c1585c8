import importlib.util

import pytest

from engine_rl.trackers import TrackerError, TrackerSpec, hyperparameters, open_tracker


def test_a_tracker_whose_package_is_missing_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(TrackerError, match=r"^--logger mlflow needs the 'mlflow' package, which is not installed: "
                                           r"pip install 'engine_rl\[mlflow\]'$"):
        TrackerSpec.parse("mlflow")


@pytest.mark.parametrize("text, name, target", [("tensorboard", "tensorboard", None), (" WandB = my-project ", "wandb", "my-project"),
                                                ("mlflow=sqlite:///x.db", "mlflow", "sqlite:///x.db")])
def test_specs(text, name, target):
    assert TrackerSpec.parse(text) == TrackerSpec(name, target)


def test_hyperparameters_keep_numbers_and_cut_long_text():
    params = hyperparameters({"lr": 3e-4, "wrappers": ["TimeLimit(max_episode_steps=10)"] * 40, "seed": 0})
    assert (params["lr"], params["seed"], len(params["wrappers"])) == (3e-4, 0, 500)


def test_an_mlflow_uri_no_store_takes_is_one_line(tmp_path):
    pytest.importorskip("mlflow")
    with pytest.raises(TrackerError) as err:
        open_tracker(TrackerSpec("mlflow", "bogus://nowhere"), tmp_path, experiment="e", run_name="r", params={})
    message = str(err.value)
    assert message.startswith("--logger mlflow: cannot open it at bogus://nowhere: ") and "\n" not in message
    assert "bogus" in message.split(": ", 3)[-1]


def test_an_mlflow_server_that_does_not_answer_is_one_line_in_seconds(tmp_path, monkeypatch):
    """MLflow's own HTTP defaults retry for about 4 minutes (measured here) before giving up."""
    pytest.importorskip("mlflow")
    import time

    from engine_rl.trackers import _MLFLOW_HTTP

    for name in _MLFLOW_HTTP:  # unset, and restored as they were after the test
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    start = time.monotonic()
    with pytest.raises(TrackerError, match=r"^--logger mlflow: cannot open it at http://127.0.0.1:1: MlflowException: "):
        open_tracker(TrackerSpec("mlflow", "http://127.0.0.1:1"), tmp_path, experiment="e", run_name="r", params={})
    assert time.monotonic() - start < 60
