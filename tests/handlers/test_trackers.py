import json
import warnings

import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers import MetricsLogger, TrackerHandler
from handlers.trackers import TrackerWarning
from support.tracker_readers import tensorboard_scalars

pytest.importorskip("tensorboard")
from ignite.handlers.tensorboard_logger import TensorboardLogger  # noqa: E402


def tiny_trainer(batches=6):
    p = torch.nn.Parameter(torch.zeros(()))
    optimizer = torch.optim.SGD([p], lr=0.1)
    data = [TensorDict({"x": torch.ones(4)}, [4])] * batches
    return create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, optimizer), optimizer


def test_a_tracker_needs_the_metrics_logger_whose_lines_it_sends(tmp_path):
    trainer, _ = tiny_trainer()
    with pytest.raises(ValueError, match=r"^TrackerHandler.attach: the engine has no handlers.MetricsLogger; attach one "
                                         r"first \(the tracker logs the lines it writes to metrics.jsonl\)$"):
        TrackerHandler(TensorboardLogger(log_dir=str(tmp_path / "tb"))).attach(trainer)


def test_only_ignite_tracker_loggers_are_accepted():
    with pytest.raises(TypeError, match="dict is not Ignite's TensorboardLogger, MLflowLogger or WandBLogger"):
        TrackerHandler({})


def test_a_tracker_that_fails_mid_run_is_one_warning_and_training_goes_on(tmp_path):
    trainer, _ = tiny_trainer()
    MetricsLogger(tmp_path / "metrics.jsonl").attach(trainer)
    logger = TensorboardLogger(log_dir=str(tmp_path / "tb"))
    sent = []
    real = logger.writer.add_scalar

    def disk_full_after_three_lines(tag, value, step):
        if len({s for s in sent}) == 3 and step not in sent:
            raise OSError(28, "No space left on device")
        sent.append(step)
        return real(tag, value, step)

    logger.writer.add_scalar = disk_full_after_three_lines
    tracker = TrackerHandler(logger).attach(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.run(max_epochs=1)
    tracker.close()
    mine = [w for w in caught if issubclass(w.category, TrackerWarning)]
    assert [str(w.message) for w in mine] == [
        "TensorboardLogger failed at frames 16 (OSError: [Errno 28] No space left on device); it logs nothing more "
        "in this run, metrics.jsonl keeps every line"]
    assert [json.loads(line)["frames"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        4, 8, 12, 16, 20, 24]
    assert [step for step, _ in tensorboard_scalars(tmp_path / "tb")["train/loss"]] == [4, 8, 12]


def test_after_frames_sends_only_what_follows(tmp_path):
    trainer, optimizer = tiny_trainer()
    MetricsLogger(tmp_path / "metrics.jsonl").attach(trainer, every=2)
    tracker = TrackerHandler(TensorboardLogger(log_dir=str(tmp_path / "tb")), optimizers={"sgd": optimizer},
                             after_frames=8).attach(trainer)
    trainer.run(max_epochs=1)
    tracker.close()
    scalars = tensorboard_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["train/loss"]] == [16, 24]
    assert [step for step, _ in scalars["sgd/lr/group_0"]] == [16, 24]
