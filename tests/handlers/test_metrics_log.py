import json

import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers.metrics_log import MetricsLogger


def _trainer(n=6):
    p = torch.nn.Parameter(torch.zeros(()))
    data = [TensorDict({"x": torch.ones(4)}, [4])] * n
    return create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, torch.optim.SGD([p], lr=0.1))


def _fake_eval(engine):
    engine.state.metrics.update(eval_return_mean=float(engine.state.iteration), eval_return_std=0.5,
                                eval_frames=engine.state.frames)


def test_train_and_eval_lines(tmp_path):
    trainer = _trainer()
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: e.state.metrics.__setitem__("fps", 10.0))
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=3), _fake_eval)
    path = tmp_path / "sub" / "metrics.jsonl"
    MetricsLogger(path).attach(trainer, every=2)
    trainer.run(max_epochs=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    train = [r for r in lines if r["kind"] == "train"]
    evals = [r for r in lines if r["kind"] == "eval"]
    assert [r["frames"] for r in train] == [8, 16, 24]
    assert [r["optim_steps"] for r in train] == [2, 4, 6]
    assert all("loss" in r and r["fps"] == 10.0 and "eval_return_mean" not in r for r in train)
    assert [(r["frames"], r["eval_return_mean"], r["eval_return_std"]) for r in evals] == [(12, 3.0, 0.5), (24, 6.0, 0.5)]


def test_appends_on_a_second_run_and_state_dict(tmp_path):
    path = tmp_path / "m.jsonl"
    for _ in range(2):
        trainer = _trainer(2)
        MetricsLogger(path).attach(trainer)
        trainer.run(max_epochs=1)
    assert len(path.read_text().splitlines()) == 4
    logger = MetricsLogger(path)
    logger.load_state_dict({"last_eval_frames": 12})
    assert logger.state_dict() == {"last_eval_frames": 12}


def test_lines_survive_a_crash(tmp_path):
    trainer = _trainer(5)
    path = tmp_path / "m.jsonl"
    MetricsLogger(path).attach(trainer)

    def boom(engine):
        if engine.state.iteration == 3:
            raise RuntimeError("env exploded")

    trainer.add_event_handler(Events.ITERATION_COMPLETED, boom)
    try:
        trainer.run(max_epochs=1)
    except RuntimeError:
        pass
    assert [json.loads(x)["iteration"] for x in path.read_text().splitlines()] == [1, 2, 3]


def test_non_finite_values_are_written_as_strings_in_standard_json(tmp_path):
    from engine_rl.dashboard.layout import plot_rows
    from engine_rl.dashboard.replay import read_metrics

    p = torch.nn.Parameter(torch.zeros(()))
    data = [TensorDict({"x": torch.ones(4)}, [4])] * 2
    trainer = create_trainer(data, lambda td: {"loss": p * float("nan")}, torch.optim.SGD([p], lr=0.1))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: e.state.metrics.update(
        grad_norm=float("inf"), low=torch.tensor(float("-inf")), fps=10.0))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: e.state.metrics.update(
        eval_return_mean=float("nan"), eval_frames=e.state.frames))
    path = tmp_path / "metrics.jsonl"
    MetricsLogger(path).attach(trainer)
    trainer.run(max_epochs=1)

    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")

    lines = [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]
    train = [r for r in lines if r["kind"] == "train"]
    evals = [r for r in lines if r["kind"] == "eval"]
    assert [(r["loss"], r["grad_norm"], r["low"], r["fps"]) for r in train] == [("NaN", "Infinity", "-Infinity", 10.0)] * 2
    assert [r["eval_return_mean"] for r in evals] == ["NaN", "NaN"]
    assert [float(train[0][k]) for k in ("grad_norm", "low")] == [float("inf"), float("-inf")]
    # the project's readers: dashboard replay reads every line and plots only the finite numbers
    assert list(read_metrics(path)) == lines
    assert [row[0] for row in plot_rows(train[0])] == ["fps"]


def test_attaching_the_same_logger_twice_is_refused_and_lines_are_written_once(tmp_path):
    trainer = _trainer(2)
    path = tmp_path / "m.jsonl"
    logger = MetricsLogger(path).attach(trainer)
    with pytest.raises(ValueError, match=r"MetricsLogger\.attach: this MetricsLogger is already attached to this "
                                         r"engine \(every line would be written twice\)"):
        logger.attach(trainer)
    trainer.run(max_epochs=1)
    assert [json.loads(line)["frames"] for line in path.read_text().splitlines()] == [4, 8]


def _episodes_ended_at(*iterations):
    def publish(engine):  # as EpisodeStats does on every batch
        ended = 2 if engine.state.iteration in iterations else 0
        engine.state.metrics["episodes_ended"] = ended
        engine.state.metrics["episodes"] = engine.state.metrics.get("episodes", 0) + ended
    return publish


def test_with_every_above_one_an_iteration_where_episodes_ended_is_logged_too(tmp_path):
    trainer = _trainer(n=10)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, _episodes_ended_at(2, 4, 7))
    MetricsLogger(tmp_path / "m.jsonl").attach(trainer, every=4)
    trainer.run(max_epochs=1)
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    # every 4th iteration, and those where episodes ended: iteration 4 is both, written once
    assert [(r["iteration"], r["episodes"], r["episodes_ended"]) for r in lines] == [
        (2, 2, 2), (4, 4, 2), (7, 6, 2), (8, 6, 0)]


def test_episode_ends_can_be_left_out(tmp_path):
    trainer = _trainer(n=10)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, _episodes_ended_at(2, 4, 7))
    MetricsLogger(tmp_path / "m.jsonl").attach(trainer, every=4, episode_ends=False)
    trainer.run(max_epochs=1)
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [4, 8]


# -- one writer per file ---------------------------------------------------------------------------
def _lines(path):
    return [(r["kind"], r["iteration"]) for r in map(json.loads, path.read_text().splitlines())]


def test_a_second_logger_on_the_same_file_and_engine_is_refused_and_lines_are_written_once(tmp_path):
    trainer = _trainer(2)
    path = tmp_path / "m.jsonl"
    MetricsLogger(path).attach(trainer)
    (tmp_path / "link").symlink_to(tmp_path)
    same = tmp_path / "link" / "m.jsonl"  # the same file, by another name
    with pytest.raises(ValueError, match=rf"^MetricsLogger\.attach: another MetricsLogger attached to this engine "
                                         rf"writes {same} \(every line would be written twice\); attach one logger "
                                         rf"per file, or give this one another path$"):
        MetricsLogger(same).attach(trainer, every=2)
    MetricsLogger(tmp_path / "other.jsonl").attach(trainer)  # another file: fine
    trainer.run(max_epochs=1)
    assert _lines(path) == [("train", 1), ("train", 2)]


@pytest.mark.parametrize("end", ["completed", "paused", "raised", "never started"])
def test_a_new_trainer_continues_the_file_once_the_first_run_has_ended(tmp_path, end):
    """A notebook: a trainer's run ends (or is stopped, or raises), a new trainer logs on to the same file."""
    path = tmp_path / "m.jsonl"
    first = _trainer(3)
    logger = MetricsLogger(path).attach(first)

    def stop(engine):
        if engine.state.iteration == 2 and end == "paused":
            engine.terminate(skip_completed=True)
        if engine.state.iteration == 2 and end == "raised":
            raise KeyboardInterrupt  # a notebook's interrupt button

    first.add_event_handler(Events.ITERATION_COMPLETED, stop)
    if end != "never started":
        try:
            first.run(max_epochs=1)
        except KeyboardInterrupt:
            pass
    second = _trainer(2)
    MetricsLogger(path).attach(second)
    second.run(max_epochs=1)
    ran = {"completed": 3, "paused": 2, "raised": 2, "never started": 0}[end]
    assert _lines(path) == [("train", i) for i in range(1, ran + 1)] + [("train", 1), ("train", 2)]
    assert logger is not None  # the first logger is alive (and attached) throughout
