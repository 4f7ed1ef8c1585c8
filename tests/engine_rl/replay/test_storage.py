import gc
import io

import pytest
import torch
from tensordict import TensorDict

from engine_rl import device as memory
from engine_rl.replay import ReplayBuffer, SharedReplayBuffer, TensorStorage
from engine_rl.replay.storage import batch_rows, flatten_keys, nest_keys


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _rows(start, n):
    values = torch.arange(start, start + n)
    return {
        ("obs",): values.float().unsqueeze(1).expand(n, 4).clone(),
        ("next", "done"): (values % 2 == 0).unsqueeze(1),
        ("pixels",): values.to(torch.uint8).reshape(n, 1, 1, 1).expand(n, 3, 2, 2).clone(),
    }


def test_nest_and_flatten_keys_are_inverse():
    flat = {("a",): 1, ("next", "reward"): 2, ("next", "deep", "x"): 3}
    assert nest_keys(flat) == {"a": 1, "next": {"reward": 2, "deep": {"x": 3}}}
    assert flatten_keys(nest_keys(flat)) == flat


def test_circular_overwrite_order():
    storage = TensorStorage(5)
    assert storage.extend(_rows(0, 3)).tolist() == [0, 1, 2]
    assert storage.extend(_rows(3, 4)).tolist() == [3, 4, 0, 1]  # wraps: rows 5, 6 overwrite 0, 1
    assert len(storage) == 5 and storage.cursor == 2
    assert storage.data[("obs",)][:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert storage.extend(_rows(7, 12)).tolist() == [4, 0, 1, 2, 3]  # 12 rows > capacity: the last 5 kept
    assert storage.data[("obs",)][:, 0].tolist() == [15.0, 16.0, 17.0, 18.0, 14.0]
    assert storage.cursor == 4


def test_shapes_dtypes_and_get():
    storage = TensorStorage(8)
    storage.extend(_rows(0, 6))
    out = storage.get(torch.tensor([5, 0, 5]), extra={"index": torch.tensor([5, 0, 5])})
    assert isinstance(out, TensorDict) and out.batch_size == torch.Size([3])
    assert out["obs"].shape == (3, 4) and out["obs"].dtype == torch.float32
    assert out["next", "done"].dtype == torch.bool and out["next", "done"].squeeze(1).tolist() == [False, True, False]
    assert out["pixels"].shape == (3, 3, 2, 2) and out["pixels"].dtype == torch.uint8
    assert out["pixels"][:, 0, 0, 0].tolist() == [5, 0, 5]
    assert out["index"].tolist() == [5, 0, 5]
    assert out.device == torch.device("cpu")


def test_zero_rows_allocate_without_writing():
    storage = TensorStorage(4)
    assert storage.extend(_rows(0, 0)).tolist() == []
    assert len(storage) == 0 and storage.keys == (("obs",), ("next", "done"), ("pixels",))


def test_key_shape_dtype_mismatch_errors():
    storage = TensorStorage(4, name="ReplayBuffer")
    storage.extend(_rows(0, 2))
    rows = _rows(0, 2)
    del rows[("pixels",)]
    rows[("extra",)] = torch.zeros(2)
    message = r"ReplayBuffer.extend: keys must match.*missing \['pixels'\], unexpected \['extra'\]"
    with pytest.raises(KeyError, match=message):
        storage.extend(rows)
    rows = _rows(0, 2)
    rows[("obs",)] = torch.zeros(2, 5)
    with pytest.raises(ValueError, match=r"key 'obs' expects rows of shape \(4,\) and dtype torch.float32"):
        storage.extend(rows)
    rows = _rows(0, 2)
    rows[("obs",)] = torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="key 'obs' expects"):
        storage.extend(rows)
    with pytest.raises(ValueError, match="same number of rows"):
        storage.extend({("obs",): torch.zeros(2, 4), ("next", "done"): torch.zeros(3, 1, dtype=torch.bool),
                        ("pixels",): torch.zeros(2, 3, 2, 2, dtype=torch.uint8)})
    assert len(storage) == 2  # nothing written by failed calls


@pytest.mark.parametrize("capacity", [0, -1, 1.5])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match="TensorStorage: capacity must be a positive int"):
        TensorStorage(capacity)


def test_get_before_extend():
    with pytest.raises(ValueError, match="TensorStorage.get: nothing stored yet"):
        TensorStorage(3).get(torch.tensor([0]))


def test_memmap_writes_files_in_given_dir(tmp_path):
    storage = TensorStorage(6, memmap=True, memmap_dir=tmp_path)
    storage.extend(_rows(0, 4))
    assert (tmp_path / "obs.memmap").is_file() and (tmp_path / "next" / "done.memmap").is_file()
    assert (tmp_path / "meta.json").is_file()
    assert storage.memmap_dir == tmp_path
    reopened = TensorDict.load_memmap(tmp_path)  # the files are tensordict's memmap format
    assert reopened.batch_size == torch.Size([6])
    assert reopened["obs"][:4, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert reopened["pixels"].dtype == torch.uint8
    assert type(storage.data[("obs",)]) is torch.Tensor  # plain view of the memory map


def test_memmap_temp_dir_removed_with_storage():
    storage = TensorStorage(3, memmap=True)
    storage.extend(_rows(0, 2))
    path = storage.memmap_dir
    assert (path / "obs.memmap").is_file()
    del storage
    gc.collect()
    assert not path.exists()


@pytest.mark.parametrize("memmap", [False, True])
def test_state_dict_round_trip(memmap, tmp_path):
    storage = TensorStorage(5, memmap=memmap, memmap_dir=tmp_path / "a" if memmap else None)
    storage.extend(_rows(0, 7))
    state = storage.state_dict()
    assert state["size"] == 5 and state["cursor"] == 2 and set(state["data"]) == {"obs", "next", "pixels"}
    if memmap:  # no copy: the state holds the memory-mapped tensors themselves
        assert state["data"]["obs"].data_ptr() == storage.data[("obs",)].data_ptr()
    loaded = _roundtrip(state)
    restored = TensorStorage(5, memmap=memmap, memmap_dir=tmp_path / "b" if memmap else None)
    restored.load_state_dict(loaded)
    assert len(restored) == 5 and restored.cursor == 2
    for key in storage.keys:
        assert torch.equal(restored.data[key], storage.data[key])
    assert restored.extend(_rows(7, 1)).tolist() == [2]


def test_state_dict_partial_fill_and_empty():
    storage = TensorStorage(10)
    storage.extend(_rows(0, 3))
    state = _roundtrip(storage.state_dict())
    assert state["data"]["obs"].shape == (3, 4)
    restored = TensorStorage(10)
    restored.load_state_dict(state)
    assert restored.data[("obs",)].shape == (10, 4) and restored.data[("obs",)][:3, 0].tolist() == [0.0, 1.0, 2.0]
    empty = TensorStorage(10)
    empty.load_state_dict(_roundtrip(TensorStorage(10).state_dict()))
    assert len(empty) == 0 and empty.keys == ()
    with pytest.raises(ValueError, match="TensorStorage.load_state_dict: capacity 10"):
        TensorStorage(4).load_state_dict(state)


def test_advance_counts_rows_written_in_place_and_checks_n():
    storage = TensorStorage(4)
    storage.extend({("x",): torch.zeros(3, 1)})
    storage.data[("x",)][3] = 7.0
    storage.data[("x",)][0] = 8.0
    assert storage.advance(2).tolist() == [3, 0]
    assert (len(storage), storage.cursor) == (4, 1)
    assert storage.get(torch.tensor([3, 0]))["x"].squeeze(1).tolist() == [7.0, 8.0]
    with pytest.raises(ValueError, match=r"TensorStorage.advance: n must be an int in \[0, 4\], got 5"):
        storage.advance(5)
    with pytest.raises(ValueError, match="nothing allocated yet"):
        TensorStorage(2).advance(1)


def test_a_storage_over_shared_tensors_writes_what_the_owner_counts_in():
    owner = TensorStorage(4)
    owner.extend({("x",): torch.zeros(3, 2)})
    data = owner.share_memory_().data
    assert data[("x",)].is_shared() and owner.data[("x",)] is data[("x",)]  # in place
    writer = TensorStorage.over(data, cursor=owner.cursor, name="Writer")
    assert (writer.capacity, writer.cursor, len(writer)) == (4, 3, 0)
    assert writer.extend({("x",): torch.ones(2, 2)}).tolist() == [3, 0]
    assert owner.advance(2).tolist() == [3, 0]
    assert owner.get(torch.arange(4))["x"][:, 0].tolist() == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match=r"Writer.extend: key 'x' expects rows of shape \(2,\) and dtype torch.float"):
        writer.extend({("x",): torch.ones(1, 3)})
    with pytest.raises(ValueError, match="Writer: TensorStorage.over needs tensors with one common leading size > 0"):
        TensorStorage.over({("x",): torch.zeros(4), ("y",): torch.zeros(3)}, name="Writer")
    with pytest.raises(ValueError, match=r"needs 0 <= cursor < 4 and 0 <= size <= 4, got cursor 4, size 0"):
        TensorStorage.over(data, cursor=4)


def test_share_memory_and_check_rows_refuse_what_they_cannot_do(tmp_path):
    with pytest.raises(ValueError, match="TensorStorage.share_memory_: nothing allocated yet"):
        TensorStorage(2).share_memory_()
    mapped = TensorStorage(2, memmap=True, memmap_dir=tmp_path)
    mapped.extend({("x",): torch.zeros(1, 1)})
    with pytest.raises(ValueError, match="share_memory_: needs rows in CPU memory, these are in memory-mapped files"):
        mapped.share_memory_()
    with pytest.raises(KeyError, match=r"TensorStorage.probe: keys must match the stored ones; missing \['x'\], "
                                       r"unexpected \['y'\]"):
        mapped.check_rows({("y",): torch.zeros(1, 1)}, where="probe")
    with pytest.raises(ValueError, match="TensorStorage.probe: nothing allocated yet"):
        TensorStorage(2).check_rows({("y",): torch.zeros(1, 1)}, where="probe")


def test_rows_that_need_more_memory_than_there_is_are_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(memory, "total_memory", lambda: 4 * 2**30)
    row = {("observation",): torch.zeros(1, 4), ("action",): torch.zeros(1, dtype=torch.int64)}  # 24 bytes a row
    storage = TensorStorage(10**12)
    with pytest.raises(ValueError) as err:
        storage.extend(row)
    assert str(err.value) == ("TensorStorage: capacity=1000000000000 needs about 21.8 TiB of replay (24 bytes a row) "
                              "but this machine has 4.0 GiB of memory; lower capacity")
    assert storage.data == {} and len(storage) == 0  # nothing allocated; the first rows may come again
    batch = TensorDict({"observation": torch.zeros(2, 4)}, [2])
    for buffer in (ReplayBuffer(10**12, capacity_label="DQNConfig: buffer_size"),
                   SharedReplayBuffer(10**12, capacity_label="DQNConfig: buffer_size")):
        with pytest.raises(ValueError, match=r"^DQNConfig: buffer_size=1000000000000 needs about 14.6 TiB of replay "
                                             r"\(16 bytes a row\) but this machine has 4.0 GiB of memory; lower buffer_size$"):
            buffer.extend(batch)
    mapped = TensorStorage(2**20, memmap=True)  # rows on disk: not memory
    monkeypatch.setattr(memory, "total_memory", lambda: 2**20)
    assert mapped.extend(row).tolist() == [0]


def test_batch_rows_flattens_the_batch_dims_of_every_tensor_leaf():
    td = TensorDict({"a": torch.arange(6).reshape(2, 3), "next": {"b": torch.zeros(2, 3, 4)}}, [2, 3])
    rows = batch_rows(td)
    assert list(rows) == [("a",), ("next", "b")]
    assert rows[("a",)].tolist() == list(range(6)) and rows[("next", "b")].shape == (6, 4)
