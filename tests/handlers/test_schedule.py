import pytest
import torch
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer
from handlers.schedule import FrameSchedule


class Loss:
    clip_epsilon = 0.2

    def __init__(self, w):
        self.w = w

    def __call__(self, td):
        return {"loss": self.w * 0.0}


def test_lr_and_attribute_follow_frames_like_sb3_progress():
    w = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.Adam([w], lr=1.0)
    loss = Loss(w)
    data = [TensorDict({"x": torch.zeros(32)}, [32])] * 5  # 160 frames, total_frames 128
    trainer = create_trainer(data, loss, opt)
    FrameSchedule(opt, "lr", start=1e-3, end=0.0, total_frames=128, metric="lr").attach(trainer)
    FrameSchedule(loss, "clip_epsilon", start=0.2, end=0.0, total_frames=128).attach(trainer)
    seen = []
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE,
                              lambda e: seen.append((opt.param_groups[0]["lr"], loss.clip_epsilon)))
    trainer.run(max_epochs=1)
    # progress counts the batch just collected: 32, 64, 96, 128, 160 frames
    expected = [(1e-3 * (1 - f / 128), 0.2 * (1 - f / 128)) for f in (32, 64, 96, 128)] + [(0.0, 0.0)]
    assert seen == [pytest.approx(e) for e in expected]
    assert trainer.state.metrics["lr"] == 0.0


def test_all_param_groups_are_set():
    a, b = torch.nn.Parameter(torch.zeros(())), torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 5.0}], lr=1.0)
    assert FrameSchedule(opt, "lr", start=2.0, end=0.0, total_frames=10).apply(5) == 1.0
    assert [g["lr"] for g in opt.param_groups] == [1.0, 1.0]


def test_errors():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=1.0)
    with pytest.raises(ValueError, match="FrameSchedule: the optimizer's param groups have no 'beta' entry"):
        FrameSchedule(opt, "beta", start=1, end=0, total_frames=10)
    with pytest.raises(ValueError, match="FrameSchedule: argument target \\(Loss\\) has no attribute 'eps'"):
        FrameSchedule(Loss(None), "eps", start=1, end=0, total_frames=10)
    with pytest.raises(ValueError, match="FrameSchedule: argument total_frames must be a positive int, got 0"):
        FrameSchedule(opt, "lr", start=1, end=0, total_frames=0)
