import sys

import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import create_trainer
from handlers.progress import FramesProgressBar


def test_bar_counts_frames_and_shows_postfix(capsys):
    p = torch.nn.Parameter(torch.zeros(()))
    data = [TensorDict({"x": torch.ones(4)}, [4])] * 5
    trainer = create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, torch.optim.SGD([p], lr=0.1))
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda e: e.state.metrics.update(eval_return_mean=42.0)
    )
    bar = FramesProgressBar(20, file=sys.stderr, mininterval=0).attach(trainer)
    trainer.run(max_epochs=1)
    err = capsys.readouterr().err
    assert bar.frames == 20
    assert "20.0/20.0" in err and "eval=42.0" in err and "loss=" in err and "fps=" in err


def test_bad_every():
    with pytest.raises(ValueError, match="every must be a positive int"):
        FramesProgressBar(10, every=0)
