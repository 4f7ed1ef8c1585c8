"""handlers.VideoRecording: final and new-best recordings, VIDEO_SAVED's payload, failures as one
warning, state across a resume."""

import math
import warnings

import pytest
import torch
from ignite.engine import Engine, Events
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.collectors.gym_envs import make_one_env
from engine_rl.events import VideoEvents
from engine_rl.video import Video, VideoWarning
from handlers import VideoRecording

pytest.importorskip("imageio_ffmpeg", reason="the [video] extra is not installed (.ci/install does)")


def push_left(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def cartpole():
    return make_one_env("CartPole-v1", wrappers=("TimeLimit(max_episode_steps=6)",), render_mode="rgb_array")


def trainer_of(batches=2):
    p = torch.nn.Parameter(torch.zeros(()))
    data = [TensorDict({"x": torch.ones(4)}, [4])] * batches
    return create_trainer(data, lambda td: {"loss": (p - td["x"]).pow(2).mean()}, torch.optim.SGD([p], lr=0.1))


def evaluator_of():
    """An engine whose run([score]) is an evaluation scoring ``score``."""
    evaluator = Engine(lambda engine, score: engine.state.metrics.update(return_mean=score))
    return evaluator


def saved_events(trainer):
    seen = []
    trainer.add_event_handler(VideoEvents.VIDEO_SAVED, lambda e: seen.append(
        (e.state.video_kind, e.state.frames, e.state.videos_saved, [v.path.name for v in e.state.videos])))
    return seen


def test_each_new_best_and_the_final_policy_are_recorded_with_the_event_payload(tmp_path):
    trainer, evaluator = trainer_of(), evaluator_of()
    videos = VideoRecording(cartpole, push_left, num_episodes=2, folder=tmp_path, seed=0, best=True)
    videos.attach(trainer, evaluator=evaluator)
    seen = saved_events(trainer)
    for frames, score in ((100, 5.0), (200, 3.0), (300, float("nan")), (400, 5.0), (500, 7.5)):
        trainer.state.frames = frames
        evaluator.run([score])
    assert seen == [("best", 100, 1, ["best_100_ep1.mp4", "best_100_ep2.mp4"]),
                    ("best", 500, 2, ["best_500_ep1.mp4", "best_500_ep2.mp4"])]  # 3, NaN and an equal 5 are no best
    assert videos.best_score == 7.5
    trainer.run(max_epochs=1)  # COMPLETED: the final policy, at the trainer's frames (2 batches of 4)
    assert seen[-1] == ("final", 8, 3, ["final_8_ep1.mp4", "final_8_ep2.mp4"])
    (first, second) = trainer.state.videos
    assert isinstance(first, Video) and (first.episode, second.episode) == (1, 2)
    assert first.length == 6 and first.frames == 7 and first.episode_return == 6.0  # the time limit ends it
    assert first.path == tmp_path / "final_8_ep1.mp4" and first.path.is_file()


def test_a_failed_recording_is_one_warning_no_event_and_training_goes_on(tmp_path):
    (tmp_path / "videos").write_text("not a folder")
    trainer = trainer_of()
    VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path / "videos").attach(trainer)
    seen = saved_events(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.run(max_epochs=1)
    assert [(w.category, str(w.message)) for w in caught] == [(VideoWarning, (
        f"videos of the final policy at frames 8 not recorded (VideoError: videos: folder {tmp_path / 'videos'} "
        f"cannot be made (FileExistsError: [Errno 17] File exists: '{tmp_path / 'videos'}')); the run's other "
        "files are unaffected"))]
    assert seen == [] and trainer.state.frames == 8 and trainer.state.iteration == 2


def test_the_best_score_survives_a_checkpoint_so_a_resume_records_only_a_better_one(tmp_path):
    videos = VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path, best=True)
    assert videos.state_dict() == {"best_score": -math.inf}
    videos.best_score = 9.0
    torch.save(videos.state_dict(), tmp_path / "state.pt")
    resumed = VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path, best=True)
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    trainer, evaluator = trainer_of(), evaluator_of()
    resumed.attach(trainer, evaluator=evaluator)
    seen = saved_events(trainer)
    evaluator.run([8.0])
    evaluator.run([9.5])
    assert [(kind, names) for kind, _, _, names in seen] == [("best", ["best_0_ep1.mp4"])]


def test_drop_after_deletes_the_videos_recorded_past_a_checkpoint(tmp_path):
    for name in ("best_100_ep1.mp4", "best_300_ep1.mp4", "best_300_ep2.mp4", "final_400_ep1.mp4", "mine_900_ep1.mp4"):
        (tmp_path / name).write_bytes(b"")
    videos = VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path)
    assert [p.name for p in videos.drop_after(200)] == ["best_300_ep1.mp4", "best_300_ep2.mp4", "final_400_ep1.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best_100_ep1.mp4", "mine_900_ep1.mp4"]  # others' kept
    assert VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path / "none").drop_after(0) == []


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="VideoRecording: argument num_episodes must be a positive int, got 0"):
        VideoRecording(cartpole, push_left, num_episodes=0, folder=tmp_path)
    with pytest.raises(ValueError, match="best=True records each new best evaluation and needs the evaluator"):
        VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path, best=True).attach(trainer_of())
    with pytest.raises(TypeError, match="argument trainer must be an ignite Engine, got list"):
        VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path).attach([])


def test_the_final_recording_comes_after_handlers_attached_before_it(tmp_path):
    trainer, order = trainer_of(), []
    trainer.add_event_handler(Events.COMPLETED, lambda _: order.append("final evaluation"))
    VideoRecording(cartpole, push_left, num_episodes=1, folder=tmp_path).attach(trainer)
    trainer.add_event_handler(VideoEvents.VIDEO_SAVED, lambda _: order.append("video saved"))
    trainer.add_event_handler(Events.COMPLETED, lambda _: order.append("final checkpoint"))
    trainer.run(max_epochs=1)
    assert order == ["final evaluation", "video saved", "final checkpoint"]
