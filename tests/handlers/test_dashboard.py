"""attach_dashboard against a real visdom server: windows read back through visdom's client API,
and a server that is missing, killed mid-run or hung never hurts training."""

import json
import os
import signal
import socket
import time
import warnings

import pytest
import torch
from ignite.engine import Engine, Events
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.dashboard import DashboardWarning, VisdomServer, count_points, make_client, read_metrics
from handlers.dashboard import DashboardLogger, attach_dashboard
from handlers.metrics_log import MetricsLogger

visdom = pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with VisdomServer(port=0, env_path=tmp_path_factory.mktemp("visdom-envs")) as srv:
        yield srv


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _points(client, env, win):
    """Points per trace of window ``win``, read back from the server."""
    data = json.loads(client.get_window_data(win, env=env))
    return [len(trace["x"]) for trace in data["content"]["data"]], data


def _trainer(n, *, sleep=0.0):
    p = torch.nn.Parameter(torch.zeros(()))
    data = [TensorDict({"x": torch.ones(4)}, [4])] * n
    trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, torch.optim.SGD([p], lr=0.1))

    @trainer.on(Events.ITERATION_COMPLETED)
    def _metrics(engine):
        engine.state.metrics["fps"] = 1000.0 + engine.state.iteration
        if engine.state.iteration % 5 == 0:
            engine.state.metrics.update(eval_return_mean=float(engine.state.iteration), eval_return_std=1.0,
                                        eval_return_min=0.0, eval_return_max=50.0, eval_frames=engine.state.frames)
        if sleep:
            time.sleep(sleep)

    return trainer


def _assert_complete(client, env, metrics_path):
    """Every window the metrics file implies exists on the server with exactly its points."""
    expected = count_points(read_metrics(metrics_path))
    assert expected
    for win, n in expected.items():
        assert client.win_exists(win, env=env), win
        counts, _ = _points(client, env, win)
        assert counts and all(c == n for c in counts), (win, counts, n)
    return expected


def test_recipe_run_plots_every_logged_point(server, tmp_path, capsys):
    from engine_rl.cli import main

    out = tmp_path / f"dash-{tmp_path.name}"
    rc = main(["train", "dqn-cartpole", "--frames", "2048", "--seed", "1", "--out", str(out), "--no-progress",
               "--set", "learning_starts=512", "--set", "optim_steps_per_batch=8", "--set", "eval_every=2",
               "--set", "eval_episodes=2", "--visdom", server.url])
    assert rc == 0
    capsys.readouterr()
    client = make_client(server.url, env=out.name)
    expected = _assert_complete(client, out.name, out / "metrics.jsonl")
    assert set(json.loads(client.get_window_data(None, env=out.name))) == set(expected) | {"lr"}  # nothing else
    for win in ("loss", "grad_norm", "fps", "optim_steps_per_s", "utd", "replay_size", "train_return",
                "train_length_mean", "eval_return", "eval_length_mean"):
        assert win in expected, win
    assert expected["loss"] == 7 and expected["eval_return"] == 4  # learning from batch 2 of 8; eval every 2
    counts, data = _points(client, out.name, "eval_return")
    assert [t["name"] for t in data["content"]["data"]] == ["min", "max", "mean - std", "mean ± std", "mean"]
    assert data["content"]["layout"]["xaxis"]["title"] in ("frames", {"text": "frames"})
    eval_lines = [r for r in read_metrics(out) if r["kind"] == "eval"]
    assert data["content"]["data"][4]["y"] == [r["eval_return_mean"] for r in eval_lines]
    assert data["content"]["data"][4]["x"] == [r["frames"] for r in eval_lines]
    # the learning rate is not in metrics.jsonl but is plotted live, once per train line
    lr_counts, lr_data = _points(client, out.name, "lr")
    assert lr_counts == [8] and lr_data["content"]["data"][0]["y"][0] == pytest.approx(2.3e-3)


def test_ignite_handlers_attach_to_the_dashboard_logger(server):
    from ignite.handlers.visdom_logger import OutputHandler, VisdomLogger

    trainer = _trainer(12)
    logger = DashboardLogger(server.url, env="ignite-handlers", interval=0.05)
    assert isinstance(logger, VisdomLogger)
    logger.attach(trainer, OutputHandler(tag="training", output_transform=lambda out: out),
                  Events.ITERATION_COMPLETED)
    trainer.run(max_epochs=1)
    assert logger.close(timeout=20)
    client = make_client(server.url, env="ignite-handlers")
    counts, data = _points(client, "ignite-handlers", "training_loss")  # window id from ignite's title
    assert counts == [12] and data["content"]["data"][0]["x"] == list(range(1, 13))  # ignite's x: iterations


def test_no_server_warns_once_and_training_is_unaffected(tmp_path):
    trainer = _trainer(30)
    MetricsLogger(tmp_path / "metrics.jsonl").attach(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dashboard = attach_dashboard(trainer, env="nobody", server=f"http://127.0.0.1:{_free_port()}",
                                     interval=0.01, timeout=1.0, flush_timeout=5.0)
        start = time.perf_counter()
        trainer.run(max_epochs=1)
        elapsed = time.perf_counter() - start
        assert dashboard.close(timeout=5) is False  # nothing could be posted
    ours = [w for w in caught if issubclass(w.category, DashboardWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "training continues" in str(ours[0].message) and "--replay" in str(ours[0].message)
    assert dashboard.executor.failures >= 1 and not dashboard.executor.alive
    assert len(list(read_metrics(tmp_path))) == 30 + 6  # 30 train lines, 6 eval lines
    assert elapsed < 10


def test_server_killed_mid_run_then_back_gets_every_point(tmp_path):
    envs = tmp_path / "envs"
    port = _free_port()
    srv = VisdomServer(port=port, env_path=envs).start()
    try:
        trainer = _trainer(40, sleep=0.01)
        MetricsLogger(tmp_path / "metrics.jsonl").attach(trainer)
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=15), lambda _: srv.kill())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dashboard = attach_dashboard(trainer, env="killed", server=srv.url, interval=0.02, timeout=1.0,
                                         flush_timeout=3.0)
            trainer.run(max_epochs=1)
            assert trainer.state.iteration == 40 and not srv.running
            ours = [w for w in caught if issubclass(w.category, DashboardWarning)]
            assert len(ours) == 1, [str(w.message) for w in ours]
            assert len(list(read_metrics(tmp_path))) == 40 + 8  # metrics complete
            # the server comes back (same port): the plots catch up, whole
            with VisdomServer(port=port, env_path=envs) as again:
                assert dashboard.flush(timeout=30)
                _assert_complete(make_client(again.url, env="killed"), "killed", tmp_path)
                assert dashboard.close(timeout=10)
            assert len([w for w in caught if issubclass(w.category, DashboardWarning)]) == 1
    finally:
        srv.stop()


def test_hung_server_does_not_slow_training_and_nothing_is_lost(tmp_path):
    with VisdomServer(port=0, env_path=tmp_path / "envs") as srv:
        trainer = _trainer(60)
        MetricsLogger(tmp_path / "metrics.jsonl").attach(trainer)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dashboard = attach_dashboard(trainer, env="hung", server=srv.url, interval=0.01, timeout=0.5,
                                         flush_timeout=0.1)
            os.kill(srv.pid, signal.SIGSTOP)
            try:
                start = time.perf_counter()
                trainer.run(max_epochs=1)
                elapsed = time.perf_counter() - start
                time.sleep(0.6)  # let a post time out
            finally:
                os.kill(srv.pid, signal.SIGCONT)
            assert dashboard.flush(timeout=30)
            assert dashboard.close(timeout=10)
        # each request waits 0.5 s on the hung server; the 60 iterations did not
        assert elapsed < 3.0
        assert len([w for w in caught if issubclass(w.category, DashboardWarning)]) == 1
        _assert_complete(make_client(srv.url, env="hung"), "hung", tmp_path)  # no point lost or doubled


def test_evaluator_scores_plotted_at_trainer_frames():
    class Recorder:
        def __init__(self):
            self.rows = []

        def line(self, X, Y, win, **kwargs):
            self.rows += [(win, x, tuple(y)) for x, y in zip(X.tolist(), Y.tolist())]

        def save(self, envs):
            pass

    trainer = create_trainer([TensorDict({"x": torch.ones(4)}, [4])] * 6,
                             lambda td: {"loss": td["x"].sum() * torch.zeros((), requires_grad=True)},
                             torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=0.1))
    evaluator = Engine(lambda e, b: None)

    @evaluator.on(Events.COMPLETED)
    def _scores(engine):
        engine.state.metrics.update(return_mean=10.0, return_std=2.0, eval_length_mean=7.0)

    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=3), lambda _: evaluator.run([0], max_epochs=1))
    client = Recorder()
    dashboard = attach_dashboard(trainer, evaluator, env="e", client=client, interval=0.01)
    trainer.run(max_epochs=1)
    assert dashboard.close(timeout=10)
    evals = [r for r in client.rows if r[0] == "eval_return"]
    assert evals == [("eval_return", 12.0, (10.0, 10.0, 8.0, 12.0, 10.0)), ("eval_return", 24.0, (10.0, 10.0, 8.0, 12.0, 10.0))]
    assert [r[1] for r in client.rows if r[0] == "eval_length_mean"] == [12.0, 24.0]


def test_bad_arguments_are_named():
    trainer = _trainer(1)
    with pytest.raises(TypeError, match="attach_dashboard: argument trainer must be an ignite Engine"):
        attach_dashboard(object())
    with pytest.raises(ValueError, match="attach_dashboard: argument every must be a positive int, got 0"):
        attach_dashboard(trainer, every=0)
    with pytest.raises(ValueError, match="server URL must look like"):
        attach_dashboard(trainer, server="ftp://x")
    with pytest.raises(ValueError, match="DashboardLogger: argument env must be a non-empty string"):
        DashboardLogger(env="")
