import pytest
import torch
from tensordict import TensorDict

from engine_rl import MASK_KEY, create_trainer
from handlers.episodes import EpisodeStats, Throughput, finished_episodes


def _batch(done, ret, length, mask=None):
    td = TensorDict({("next", "done"): torch.tensor(done), ("next", "episode_return"): torch.tensor(ret),
                     ("next", "episode_length"): torch.tensor(length), "x": torch.zeros(len(done))}, [len(done)])
    if mask is not None:
        td[MASK_KEY] = torch.tensor(mask)
    return td


def test_finished_episodes_respects_mask():
    b = _batch([True, True, False], [3.0, 4.0, 9.0], [3, 4, 9], mask=[True, False, True])
    r, n = finished_episodes(b)
    assert r.tolist() == [3.0] and n.tolist() == [3]


def test_episode_stats_metrics_and_counts():
    p = torch.nn.Parameter(torch.zeros(()))
    data = [_batch([False, True, True], [1.0, 2.0, 4.0], [1, 2, 4]), _batch([False] * 3, [1.0] * 3, [1] * 3)]
    trainer = create_trainer(data, lambda td: {"loss": p * 1.0}, torch.optim.SGD([p], lr=0.1))
    stats = EpisodeStats().attach(trainer)
    Throughput().attach(trainer)
    trainer.run(max_epochs=1)
    m = trainer.state.metrics
    assert (m["train_return_mean"], m["train_return_std"], m["train_length_mean"], m["episodes"]) == (3.0, 1.0, 3.0, 2)
    assert stats.state_dict() == {"episodes": 2}
    assert m["fps"] > 0 and m["utd"] == pytest.approx(2 / 6)


def test_missing_keys_name_the_handler():
    with pytest.raises(KeyError, match=r"EpisodeStats needs key\(s\) \['next.done', 'next.episode_return'"):
        finished_episodes(TensorDict({"x": torch.zeros(2)}, [2]))
