"""Dict observations reach batches and replay as nested TensorDict keys, in their own dtypes.

The env is ``support.user_envs.DoorRoom``: a 40x40 uint8 ``camera``, a Discrete ``door`` and a Box
``clock``, truncated after 5 steps (so same-step autoreset hands the final observation in the info).
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from engine_rl.collectors import GymCollector, make_vec_env
from engine_rl.collectors.gym_envs import vec_env_spec
from engine_rl.collectors.observations import observation_fields
from engine_rl.replay import ReplayBuffer

ROOM = "support.user_envs:engine_rl_tests/DoorRoom-v0"


def knock_first(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def test_fields_name_each_leaf_of_nested_dicts_with_its_stored_dtype():
    space = gym.spaces.Dict({
        "arm": gym.spaces.Dict({"joints": gym.spaces.Box(-1, 1, (3,)), "gripper": gym.spaces.MultiBinary(2)}),
        "camera": gym.spaces.Box(0, 255, (3, 40, 40), np.uint8),
        "task": gym.spaces.MultiDiscrete([4, 2]),
        "ram": gym.spaces.Box(0, 255, (128,), np.uint8),
    })
    assert [(f.path, f.shape, f.dtype) for f in observation_fields(space)] == [
        (("arm", "gripper"), (2,), torch.float32), (("arm", "joints"), (3,), torch.float32),
        (("camera",), (3, 40, 40), torch.uint8), (("ram",), (128,), torch.uint8), (("task",), (2,), torch.int64),
    ]
    with pytest.raises(ValueError, match=r"^demo: observation key 'arm.notes' is Sequence\(Discrete\(3\), "
                                         r"stack=False\), which cannot be stored; each leaf must be a Box"):
        observation_fields(gym.spaces.Dict({"arm": gym.spaces.Dict({"notes": gym.spaces.Sequence(gym.spaces.Discrete(3))})}),
                           owner="demo")


def test_a_dict_env_batch_holds_each_key_in_its_dtype_and_the_true_final_observation():
    env = make_vec_env(ROOM, 2)
    assert vec_env_spec(env).observation_shape is None
    with GymCollector(env, knock_first, frames_per_batch=16, seed=3) as collector:
        batch = next(iter(collector))
    assert batch.batch_size == (2, 8)
    obs, nxt = batch["observation"], batch["next", "observation"]
    assert sorted(obs.keys()) == ["camera", "clock", "door"]
    assert (obs["camera"].dtype, obs["camera"].shape) == (torch.uint8, (2, 8, 40, 40))
    assert (obs["door"].dtype, obs["door"].shape) == (torch.int64, (2, 8))
    assert (obs["clock"].dtype, obs["clock"].shape) == (torch.float32, (2, 8, 1))
    # the clock counts 0..4 and restarts; the step that truncates holds the true final clock, 5
    assert obs["clock"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert nxt["clock"][0, :, 0].tolist() == [1, 2, 3, 4, 5, 1, 2, 3]
    assert batch["next", "truncated"][0].tolist() == [False] * 4 + [True] + [False] * 3
    # the camera lights the open door's third; the reward is for knocking on door 0
    lit = obs["camera"][..., 0, ::13][..., :3].argmax(-1)
    assert torch.equal(lit, obs["door"])
    assert torch.equal(batch["next", "reward"], (obs["door"] == 0).float())
    # within an episode, the next observation is the following step's observation
    for key in ("camera", "door", "clock"):
        assert torch.equal(nxt[key][:, :4], obs[key][:, 1:5]) and torch.equal(nxt[key][:, 5:7], obs[key][:, 6:8])


def test_a_loaded_collector_continues_a_dict_env_exactly():
    def collect(collector, n):
        return [collector.collect() for _ in range(n)]

    a = GymCollector(make_vec_env(ROOM, 2), knock_first, frames_per_batch=6, seed=1)
    collect(a, 2)
    state = a.state_dict()
    assert sorted(state["stepper"]["obs"]) == ["camera", "clock", "door"]  # the current observation, by key
    b = GymCollector(make_vec_env(ROOM, 2), knock_first, frames_per_batch=6, seed=99)
    b.load_state_dict(state)
    for x, y in zip(collect(a, 3), collect(b, 3), strict=True):
        assert (x == y).all()


def test_replay_keeps_camera_bytes_a_quarter_of_float32():
    with GymCollector(make_vec_env(ROOM, 2), knock_first, frames_per_batch=20, seed=0) as collector:
        batch = next(iter(collector))
    buffer = ReplayBuffer(40, seed=0)
    buffer.extend(batch.reshape(-1))
    sample = buffer.sample(8)
    assert sample["observation", "camera"].dtype == torch.uint8
    assert sample["next", "observation", "door"].dtype == torch.int64
    # the storage holds 40 rows of 40x40 bytes for each of the observation and the next observation
    cameras = {key: t for key, t in buffer.storage.data.items() if "camera" in key}
    assert sorted(cameras) == [("next", "observation", "camera"), ("observation", "camera")]
    assert all(t.dtype == torch.uint8 and t.numel() * t.element_size() == 40 * 40 * 40 for t in cameras.values())
