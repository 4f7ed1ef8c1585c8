import io

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from engine_rl.keys import MASK_KEY
from engine_rl.replay import PrioritizedSampler, ReplayBuffer, UniformSampler


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _transitions(start, *batch):
    """CartPole-like transitions whose observation[..., 0] counts up from ``start`` (row-major)."""
    n = int(np.prod(batch))
    count = torch.arange(start, start + n, dtype=torch.float32).reshape(*batch, 1)
    flags = torch.zeros(*batch, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": count.expand(*batch, 4).clone(),
            "action": torch.arange(start, start + n).reshape(*batch),
            "next": {
                "observation": count.expand(*batch, 4) + 1,
                "reward": torch.ones(*batch, 1),
                "done": flags,
                "terminated": flags.clone(),
                "truncated": flags.clone(),
            },
        },
        batch_size=list(batch),
    )


def _stored_counts(buf):
    return buf.storage.data[("observation",)][: len(buf), 0].tolist()


def test_extend_flattens_and_overwrites_oldest_first():
    buf = ReplayBuffer(5, seed=0)
    assert len(buf) == 0 and buf.capacity == 5
    assert buf.extend(_transitions(0, 2, 2)).tolist() == [0, 1, 2, 3]  # [envs, T] flattened row-major
    assert _stored_counts(buf) == [0.0, 1.0, 2.0, 3.0]
    assert buf.extend(_transitions(4, 3)).tolist() == [4, 0, 1]
    assert _stored_counts(buf) == [5.0, 6.0, 2.0, 3.0, 4.0] and len(buf) == 5
    assert buf.extend(_transitions(7, 1)).tolist() == [2]


def test_single_transition_without_batch_dims():
    buf = ReplayBuffer(3, seed=0)
    assert buf.extend(_transitions(9, 1)[0]).tolist() == [0]
    assert buf.sample(2)["action"].tolist() == [9, 9]


def test_mask_keeps_only_valid_rows_and_is_not_stored():
    buf = ReplayBuffer(10, seed=0)
    td = _transitions(0, 2, 3)
    td["collector", "mask"] = torch.tensor([[True, False, True], [False, True, True]])
    td["collector", "traj_ids"] = torch.tensor([[0, 0, 0], [1, 1, 1]])
    assert buf.extend(td).tolist() == [0, 1, 2, 3]
    assert _stored_counts(buf) == [0.0, 2.0, 4.0, 5.0]
    assert buf.storage.data[("collector", "traj_ids")][:4].tolist() == [0, 0, 1, 1]
    sample = buf.sample(4)
    assert ("collector", "mask") not in sample.keys(include_nested=True)
    assert ("collector", "traj_ids") in sample.keys(include_nested=True)
    td["collector", "mask"] = torch.zeros(2, 3, dtype=torch.bool)
    assert buf.extend(td).tolist() == [] and len(buf) == 4
    td["collector", "mask"] = torch.ones(2, 3, 1, dtype=torch.bool)  # trailing singleton dim is fine
    assert buf.extend(td).tolist() == [4, 5, 6, 7, 8, 9]
    td["collector", "mask"] = torch.ones(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="'collector.mask' must be a bool tensor shaped like the batch"):
        buf.extend(td)


def test_sample_keys_shapes_dtypes_and_consistency():
    buf = ReplayBuffer(100, seed=0)
    buf.extend(_transitions(0, 4, 25))
    sample = buf.sample(32)
    assert sample.batch_size == torch.Size([32]) and sample.device == torch.device("cpu")
    assert set(sample.keys(include_nested=True, leaves_only=True)) == {
        "observation", "action", "index", "weight",
        ("next", "observation"), ("next", "reward"), ("next", "done"), ("next", "terminated"), ("next", "truncated"),
    }
    assert sample["observation"].shape == (32, 4) and sample["observation"].dtype == torch.float32
    assert sample["action"].shape == (32,) and sample["action"].dtype == torch.int64
    assert sample["next", "done"].shape == (32, 1) and sample["next", "done"].dtype == torch.bool
    assert sample["index"].dtype == torch.int64 and sample["weight"].dtype == torch.float32
    assert torch.equal(sample["weight"], torch.ones(32))
    assert torch.equal(sample["action"], sample["index"])  # row i holds action i
    assert torch.equal(sample["next", "observation"], sample["observation"] + 1)


def test_uniform_sample_covers_only_filled_rows():
    buf = ReplayBuffer(1000, seed=1)
    buf.extend(_transitions(0, 10))
    index = torch.cat([buf.sample(500)["index"] for _ in range(4)])
    assert index.min() == 0 and index.max() == 9
    assert np.bincount(index.numpy(), minlength=10).min() > 150  # 200 expected per row


def test_prioritized_buffer_frequencies_weights_and_updates():
    buf = ReplayBuffer(16, sampler=PrioritizedSampler(alpha=1.0, beta=1.0, eps=1e-6), seed=0)
    buf.extend(_transitions(0, 8))
    sample = buf.sample(64)
    assert torch.equal(sample["weight"], torch.ones(64))
    buf.update_priority(torch.arange(8), torch.tensor([1.0, 1, 1, 1, 1, 1, 1, 8]))
    counts = np.zeros(8)
    for _ in range(20):
        sample = buf.sample(500)
        counts += np.bincount(sample["index"].numpy(), minlength=8)
    p = np.array([1.0] * 7 + [8.0]) + 1e-6
    np.testing.assert_allclose(counts / counts.sum(), p / p.sum(), rtol=0.03)
    expected_weight = (8 * p / p.sum()) ** -1.0 / ((8 * p / p.sum()) ** -1.0).max()
    np.testing.assert_allclose(sample["weight"].numpy(), expected_weight[sample["index"].numpy()], rtol=1e-5)
    buf.extend(_transitions(8, 2))  # new rows get the max priority (8)
    assert buf.sampler.tree[[8, 9]].tolist() == pytest.approx([8.0 + 1e-6] * 2)
    buf.update_priority(sample["index"], sample["weight"].double())  # any float dtype
    UniformSampler().update_priority(torch.tensor([0]), torch.tensor([1.0]))  # no-op


def test_device_argument():
    buf = ReplayBuffer(10, device="cpu", seed=0)
    buf.extend(_transitions(0, 5))
    assert buf.device == torch.device("cpu") and buf.sample(3).device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_cuda_device(storage):
    buf = ReplayBuffer(10, device="cuda", storage=storage, sampler=PrioritizedSampler(), seed=0)
    buf.extend(_transitions(0, 5).to("cuda"))
    sample = buf.sample(4)
    assert sample.device.type == "cuda"
    assert all(t.device.type == "cuda" for t in sample.values(include_nested=True, leaves_only=True))
    assert torch.equal(sample["action"], sample["index"])
    buf.update_priority(sample["index"], torch.rand(4, device="cuda"))
    restored = ReplayBuffer(10, device="cuda", storage=storage, sampler=PrioritizedSampler())
    restored.load_state_dict(_roundtrip(buf.state_dict()))
    assert torch.equal(restored.sample(8)["index"], buf.sample(8)["index"])


def test_memmap_storage_writes_files_and_round_trips(tmp_path):
    buf = ReplayBuffer(8, storage="memmap", memmap_dir=tmp_path / "buf", seed=3)
    buf.extend(_transitions(0, 6))
    assert (tmp_path / "buf" / "observation.memmap").is_file()
    assert (tmp_path / "buf" / "next" / "reward.memmap").is_file()
    state = buf.state_dict()
    assert state["storage"]["data"]["observation"].data_ptr() == buf.storage.data[("observation",)].data_ptr()
    restored = ReplayBuffer(8, storage="memmap", memmap_dir=tmp_path / "restored", seed=99)
    restored.load_state_dict(_roundtrip(state))
    assert (tmp_path / "restored" / "action.memmap").is_file()
    assert (restored.sample(16) == buf.sample(16)).all()
    in_memory = ReplayBuffer(8)
    in_memory.load_state_dict(_roundtrip(buf.state_dict()))  # memmap -> memory works too
    assert (in_memory.sample(5) == buf.sample(5)).all()


@pytest.mark.parametrize("prioritized", [False, True])
def test_state_dict_round_trip_gives_identical_samples(prioritized):
    def make(seed):
        sampler = PrioritizedSampler(beta_annealing_steps=5) if prioritized else None
        return ReplayBuffer(20, sampler=sampler, seed=seed)

    buf = make(0)
    buf.extend(_transitions(0, 25))
    for _ in range(2):
        sample = buf.sample(8)
        buf.update_priority(sample["index"], torch.rand(8))
    state = _roundtrip(buf.state_dict())
    restored = make(123)
    restored.load_state_dict(state)
    assert len(restored) == 20 and restored.storage.cursor == 5
    for _ in range(3):
        a, b = buf.sample(16), restored.sample(16)
        assert (a == b).all()
        buf.update_priority(a["index"], a["observation"][:, 0])
        restored.update_priority(b["index"], b["observation"][:, 0])
    assert buf.extend(_transitions(50, 2)).tolist() == restored.extend(_transitions(50, 2)).tolist() == [5, 6]


def test_seed_none_follows_global_rng():
    samples = []
    for _ in range(2):
        torch.manual_seed(7)
        buf = ReplayBuffer(10)
        buf.extend(_transitions(0, 10))
        samples.append(buf.sample(10)["index"])
    assert torch.equal(*samples)


@pytest.mark.parametrize("capacity", [0, -5, 2.0])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match="ReplayBuffer: capacity must be a positive int"):
        ReplayBuffer(capacity)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="ReplayBuffer: storage must be 'memory' or 'memmap', got 'disk'"):
        ReplayBuffer(4, storage="disk")
    with pytest.raises(ValueError, match="ReplayBuffer: memmap_dir is only used with storage='memmap'"):
        ReplayBuffer(4, memmap_dir="/tmp/x")
    with pytest.raises(ValueError, match="ReplayBuffer: seed must be an int"):
        ReplayBuffer(4, seed=1.5)
    with pytest.raises(ValueError, match="PrioritizedSampler: alpha must be >= 0"):
        ReplayBuffer(4, sampler=PrioritizedSampler(alpha=-1.0))
    with pytest.raises(ValueError, match="PrioritizedSampler: eps must be > 0"):
        ReplayBuffer(4, sampler=PrioritizedSampler(eps=0.0))


def test_bad_sample_calls():
    buf = ReplayBuffer(4, sampler=PrioritizedSampler())
    with pytest.raises(ValueError, match="ReplayBuffer.sample: the buffer is empty; call extend"):
        buf.sample(2)
    buf.extend(_transitions(0, 2))
    for batch_size in (0, -1, 2.0):
        with pytest.raises(ValueError, match="ReplayBuffer.sample: batch_size must be a positive int"):
            buf.sample(batch_size)


def test_bad_extend_calls():
    buf = ReplayBuffer(10)
    with pytest.raises(TypeError, match="ReplayBuffer.extend: td must be a TensorDict, got dict"):
        buf.extend({"observation": torch.zeros(2)})
    with pytest.raises(KeyError, match=r"ReplayBuffer.extend: keys \['index'\] are added by sample"):
        buf.extend(TensorDict({"index": torch.zeros(2), "x": torch.zeros(2)}, batch_size=[2]))
    buf.extend(_transitions(0, 3))
    td = _transitions(3, 2)
    del td["next", "reward"]
    td["extra"] = torch.zeros(2)
    message = r"ReplayBuffer.extend: keys must match.*missing \['next.reward'\], unexpected \['extra'\]"
    with pytest.raises(KeyError, match=message):
        buf.extend(td)
    td = _transitions(3, 2)
    td["observation"] = torch.zeros(2, 5)
    with pytest.raises(ValueError, match=r"ReplayBuffer.extend: key 'observation' expects rows of shape \(4,\)"):
        buf.extend(td)
    with pytest.raises(IndexError, match="update_priority: index must point at stored items"):
        ReplayBuffer(4, sampler=PrioritizedSampler()).update_priority(torch.tensor([0]), torch.ones(1))
    assert len(buf) == 3
