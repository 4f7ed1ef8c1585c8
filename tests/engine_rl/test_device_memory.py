"""engine_rl.device, memory: sizes from spaces and widths, the machine's memory, and a refusal naming the field."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl import device as memory
from engine_rl.device import check_fits, device_memory, format_bytes, frame_nbytes, mlp_parameters, space_nbytes


def test_sizes_of_spaces_frames_and_mlps():
    assert space_nbytes(gym.spaces.Box(-1, 1, (4,))) == 16
    assert space_nbytes(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)) == 4 * 84 * 84
    assert space_nbytes(gym.spaces.Discrete(5)) == 8
    assert space_nbytes(gym.spaces.MultiDiscrete([3, 4])) == 16
    assert space_nbytes(gym.spaces.MultiBinary(6)) == 6
    assert space_nbytes(gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Discrete(2)})) == 16
    assert space_nbytes(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))) == 16
    # CartPole: observation and next observation (float32 x 4 each), an int64 action, reward, flags, episode stats
    assert frame_nbytes(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)) == 16 + 16 + 8 + 19 == 59
    assert mlp_parameters(4, 2, (256, 256)) == 5 * 256 + 257 * 256 + 257 * 2
    assert mlp_parameters(3, 1, ()) == 4


def test_bytes_read_in_binary_units():
    assert [format_bytes(n) for n in (0, 59, 1024, 1536, 2**30, 16 * 2**30, 59 * 10**12, 2**60)] == [
        "0 bytes", "59 bytes", "1.0 KiB", "1.5 KiB", "1.0 GiB", "16.0 GiB", "53.7 TiB", "1,024.0 PiB"]


def test_a_size_over_the_limit_is_one_error_naming_the_field():
    limit = (4 * 2**30, "this machine has 4.0 GiB of memory")
    check_fits(4 * 2**30, owner="C", setting="n=1", what="of x", limit=limit)  # exactly what there is: fits
    with pytest.raises(ValueError) as err:
        check_fits(5 * 2**30, owner="DQNConfig", setting="buffer_size=91", what="of replay", each="59 bytes a row",
                   limit=limit)
    assert str(err.value) == ("DQNConfig: buffer_size=91 needs about 5.0 GiB of replay (59 bytes a row) but this "
                              "machine has 4.0 GiB of memory; lower buffer_size")
    with pytest.raises(ValueError, match="; lower hidden or batch_size$"):
        check_fits(5 * 2**30, owner="C", setting="hidden=(9,)", what="for nets", fix="hidden or batch_size", limit=limit)
    check_fits(10**30, owner="C", setting="n=1", what="of x", limit=(None, "unknown"))  # the system does not say


def test_the_machine_memory_is_physical_memory_or_a_lower_cgroup_limit(monkeypatch, tmp_path):
    physical = memory.total_memory()
    assert physical is not None and physical > 2**28  # this Linux machine says
    limit = tmp_path / "memory.max"
    limit.write_text(f"{2**30}\n")
    monkeypatch.setattr(memory, "_CGROUP_LIMITS", (str(limit),))
    assert memory.total_memory() == min(physical, 2**30)
    limit.write_text("max\n")  # no limit
    assert memory.total_memory() == physical
    monkeypatch.setattr(memory, "total_memory", lambda: 3 * 2**30)
    assert device_memory("cpu") == (3 * 2**30, "this machine has 3.0 GiB of memory")


def test_a_cuda_device_is_checked_against_its_own_memory(monkeypatch):
    seen = []

    def mem_get_info(device):
        seen.append(device)
        return 2**30, 80 * 2**30  # (free, total)

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    assert device_memory("cuda:0") == (80 * 2**30, "cuda:0 has 80.0 GiB of memory")
    assert seen == [torch.device("cuda:0")]
    with pytest.raises(ValueError, match="^C: n=2 needs about 96.0 GiB for x but cuda:0 has 80.0 GiB of memory; lower n$"):
        check_fits(96 * 2**30, owner="C", setting="n=2", what="for x", device="cuda:0")
