"""SharedReplayBuffer and SharedWriter in one process: commits, wrap-around, priorities, a racing writer.

The worker process that writes it in practice is tested in tests/engine_rl/collectors/test_async_collector.py.
"""

import threading
import time

import pytest
import torch
from tensordict import TensorDict

from engine_rl.replay import PrioritizedSampler, SharedReplayBuffer, SharedWriter
from engine_rl.replay.shared import _SEQ, _WRITING_END


def rows(values, *, width=3):
    """Rows whose every entry equals the row's value: a half-written row shows up as a mismatch."""
    v = torch.as_tensor(values, dtype=torch.float32)
    return TensorDict(
        {"observation": v[:, None].expand(-1, width).clone(), "action": v.long(), ("next", "reward"): v.clone()},
        [len(v)],
    )


def consistent(td):
    obs = td["observation"]
    return bool((obs == obs[:, :1]).all() and (obs[:, 0] == td["action"].float()).all()
                and (obs[:, 0] == td["next", "reward"]).all())


def test_written_rows_become_sampleable_only_once_committed():
    buffer = SharedReplayBuffer(16, seed=0)
    buffer.extend(rows([0.0, 0.0]))
    writer = buffer.writer()
    assert writer.write(rows([1.0, 1.0, 1.0])) == 3
    assert buffer.pending == 3 and len(buffer) == 2
    assert set(buffer.sample(64)["action"].tolist()) == {0}
    index, writes = buffer.commit()
    assert index.tolist() == [2, 3, 4] and writes == 1 and len(buffer) == 5 and buffer.pending == 0
    assert set(buffer.sample(256)["action"].tolist()) == {0, 1}
    assert buffer.commit()[1] == 0  # nothing new


def test_commit_wraps_and_gives_new_rows_the_top_priority():
    buffer = SharedReplayBuffer(4, sampler=PrioritizedSampler(alpha=1.0), seed=0)
    buffer.extend(rows([0.0, 0.0, 0.0]))
    buffer.update_priority(torch.tensor([0, 1, 2]), torch.tensor([5.0, 0.0, 0.0]))
    writer = buffer.writer()
    writer.write(rows([1.0, 2.0]))  # positions 3, 0
    writer.write(rows([3.0]))  # position 1
    index, writes = buffer.commit()
    assert index.tolist() == [3, 0, 1] and writes == 2 and buffer.storage.cursor == 2
    leaves = buffer.sampler.tree.leaves[:4]
    assert leaves[[3, 0, 1]].tolist() == pytest.approx([5.0] * 3, rel=1e-5)  # the max seen so far
    assert buffer.storage.get(torch.tensor([0, 1, 3]))["action"].tolist() == [2, 3, 1]


def test_sample_redraws_rows_a_write_in_progress_touches():
    """A sample taken while a write runs never returns the rows that write is overwriting."""
    buffer = SharedReplayBuffer(8, seed=0)
    buffer.extend(rows(range(8)))  # full: cursor 0, the writer's next rows are the oldest ones
    writer = buffer.writer()
    writer._np = writer._counters.numpy()
    counters = writer._np
    counters[_WRITING_END] = 3  # a write of rows 0..2 (positions 0, 1, 2) in progress ...
    counters[_SEQ] += 1  # ... (odd sequence number)
    for _ in range(20):
        assert not set(buffer.sample(8)["index"].tolist()) & {0, 1, 2}
    counters[_SEQ] += 1
    assert set().union(*(buffer.sample(8)["index"].tolist() for _ in range(20))) >= {0, 1, 2}


def test_no_half_written_row_is_ever_sampled_under_a_racing_writer():
    """A thread rewrites the oldest rows as fast as it can while samples are checked row by row."""
    buffer = SharedReplayBuffer(64, seed=0)
    buffer.extend(rows([0.0] * 64, width=4096))  # wide rows: a write takes long enough to race
    writer = buffer.writer()
    stop = threading.Event()

    def write():
        value = 1.0
        while not stop.is_set():
            writer.write(rows([value] * 8, width=4096))
            value += 1.0

    thread = threading.Thread(target=write)
    thread.start()
    try:
        checked = 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert consistent(buffer.sample(32))
            checked += 1
    finally:
        stop.set()
        thread.join()
    assert checked > 10 and writer.written > 64


def test_writer_and_buffer_refuse_misuse_with_clear_errors():
    buffer = SharedReplayBuffer(8, seed=0)
    with pytest.raises(ValueError, match="SharedReplayBuffer.writer: nothing allocated yet; extend"):
        buffer.writer()
    buffer.extend(rows([0.0]))
    writer = buffer.writer()
    with pytest.raises(RuntimeError, match="a writer is already out"):
        buffer.writer()
    with pytest.raises(RuntimeError, match="SharedReplayBuffer.extend: a writer is out"):
        buffer.extend(rows([1.0]))
    with pytest.raises(KeyError, match=r"SharedWriter.write: keys must match the stored ones; missing \['next.rew"):
        writer.write(rows([1.0]).exclude(("next", "reward")))
    with pytest.raises(ValueError, match="key 'observation' expects rows of shape \\(3,\\)"):
        writer.write(rows([1.0], width=2))
    with pytest.raises(ValueError, match="a batch of 9 rows does not fit in the buffer's capacity 8"):
        writer.write(rows([1.0] * 9))
    mask = rows([1.0]).set(("collector", "mask"), torch.ones(1, dtype=torch.bool))
    with pytest.raises(ValueError, match="'collector.mask' mask cannot be written"):
        writer.write(mask)
    assert writer.written == 0 and buffer.state_dict()["storage"]["size"] == 1  # refused: no write in progress
    writer.write(rows([1.0, 1.0]))
    assert buffer.close_writer() == 2  # written, never committed
    buffer.extend(rows([2.0]))  # the buffer is its own again


def test_state_dict_while_a_writer_is_out_copies_and_round_trips_weights_only(tmp_path):
    buffer = SharedReplayBuffer(8, sampler=PrioritizedSampler(), seed=0)
    buffer.extend(rows([0.0, 1.0]))
    writer = buffer.writer()
    writer.write(rows([2.0, 3.0, 4.0]))
    buffer.commit()
    writer.write(rows([5.0]))  # not committed: not in the state
    state = buffer.state_dict()
    assert state["storage"]["size"] == 5
    assert state["storage"]["data"]["action"].data_ptr() != buffer.storage.data[("action",)].data_ptr()
    torch.save(state, tmp_path / "buffer.pt")
    loaded = SharedReplayBuffer(8, sampler=PrioritizedSampler(), seed=1)
    loaded.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=True))
    assert len(loaded) == 5 and loaded.storage.get(torch.arange(5))["action"].tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(loaded.sample(16)["index"], buffer.sample(16)["index"])  # same sampler state
    with pytest.raises(RuntimeError, match="load_state_dict: a writer is out"):
        buffer.load_state_dict(state)


def test_a_writer_rebuilt_from_its_parts_goes_on_where_it_stopped():
    """What the collector's worker does: rebuild the writer from plain tensors and an int."""
    buffer = SharedReplayBuffer(4, seed=0)
    buffer.extend(rows([0.0, 0.0, 0.0]))
    first = buffer.writer()
    first.write(rows([1.0]))  # position 3
    data, counters, cursor = first.parts
    assert cursor == 0 and all(t.is_shared() for t in data.values())
    again = SharedWriter(data, counters, cursor=cursor)
    assert again.written == 1
    again.write(rows([2.0, 3.0]))  # positions 0, 1
    index, writes = buffer.commit()
    assert index.tolist() == [3, 0, 1] and writes == 2 and len(buffer) == 4
    assert buffer.storage.get(torch.arange(4))["action"].tolist() == [2, 3, 0, 1]
