"""make_encoder: an encoder chosen by the observation space; DictEncoder: one per key, concatenated."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos import make_actor_critic
from engine_rl.algos.encoders import DictEncoder, Flat, NatureCNN, OneHot, make_encoder

SPACE = gym.spaces.Dict({
    "camera": gym.spaces.Box(0, 255, (4, 40, 40), np.uint8),
    "arm": gym.spaces.Dict({"joints": gym.spaces.Box(-1, 1, (2, 3)), "gripper": gym.spaces.MultiBinary(2)}),
    "door": gym.spaces.Discrete(3, start=-1),
    "task": gym.spaces.MultiDiscrete([2, 3]),
})


def obs(batch=(5,)):
    return TensorDict({
        "camera": torch.randint(0, 256, (*batch, 4, 40, 40), dtype=torch.uint8),
        "arm": {"joints": torch.randn(*batch, 2, 3), "gripper": torch.ones(*batch, 2)},
        "door": torch.full(batch, -1, dtype=torch.int64),
        "task": torch.tensor([1, 2]).expand(*batch, 2),
    }, list(batch))


def test_each_key_gets_the_encoder_its_space_calls_for_and_outputs_are_concatenated_in_key_order():
    encoder = DictEncoder(SPACE)
    assert encoder.paths == [("arm", "gripper"), ("arm", "joints"), ("camera",), ("door",), ("task",)]
    assert [type(m) for m in encoder.encoders] == [Flat, Flat, NatureCNN, OneHot, OneHot]
    assert encoder.widths == [2, 6, 512, 3, 5] and encoder.features == 528
    x = obs((2, 7))  # leading batch dimensions [N, T] as collected batches have
    out = encoder(x)
    assert out.shape == (2, 7, 528) and out.dtype == torch.float32
    # the one-hot parts: door -1 is the first of Discrete(3, start=-1); task (1, 2) in nvec (2, 3)
    assert out[0, 0, -8:].tolist() == [1, 0, 0, 0, 1, 0, 0, 1]
    assert out[0, 0, 2:8].tolist() == x["arm", "joints"][0, 0].flatten().tolist()


def test_a_users_encoder_replaces_a_key_and_its_width_is_read_by_a_forward():
    tiny = nn.Sequential(Flat((4, 40, 40)), nn.Linear(4 * 40 * 40, 7))  # no features attribute
    encoder = DictEncoder(SPACE, {"camera": tiny, ("arm", "joints"): Flat((2, 3))})
    assert encoder.widths == [2, 6, 7, 3, 5]
    assert list(encoder.built()) == [encoder.encoders[0], encoder.encoders[3], encoder.encoders[4]]
    assert encoder(obs()).shape == (5, 23)
    with pytest.raises(ValueError, match=r"^demo: encoders given for \['arm.wrist', 'lidar'\], which the observation "
                                         r"does not have; its keys: \['arm.gripper', 'arm.joints', 'camera', 'door', 'task'\]"):
        DictEncoder(SPACE, {"lidar": nn.Identity(), ("arm", "wrist"): nn.Identity()}, owner="demo")
    with pytest.raises(ValueError, match=r"^demo: the encoder for observation key 'camera' fails on zeros of shape "
                                         r"\(1, 4, 40, 40\) and dtype torch.uint8 \(RuntimeError: .*\); it must map"):
        DictEncoder(SPACE, {"camera": nn.Linear(4 * 40 * 40, 7)}, owner="demo")


def test_a_key_without_an_encoder_is_named_in_one_line():
    small = gym.spaces.Dict({"map": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), "pos": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ValueError, match=r"^demo: no encoder for observation key 'map' \(Box\(0, 255, \(7, 7, 3\), uint8\)\): "
                                         r"uint8 images go through the Nature CNN, which needs at least 36x36 pixels; "
                                         r"pass your own \(encoders=\{'map': module\}\) or drop the key"):
        make_encoder(small, owner="demo")
    assert make_encoder(small, encoders={"map": Flat((7, 7, 3))}).features == 149
    with pytest.raises(ValueError, match=r"^demo: encoders per key are for Dict observations, got Discrete\(4\)"):
        make_encoder(gym.spaces.Discrete(4), encoders={"x": nn.Identity()}, owner="demo")


def test_non_dict_spaces():
    assert make_encoder(gym.spaces.Box(-1, 1, (4,))) is None  # the MLP reads a vector as it is
    ram = make_encoder(gym.spaces.Box(0, 255, (128,), np.uint8))  # bytes (Atari RAM), stored as bytes: cast
    assert isinstance(ram, Flat) and ram(torch.full((2, 128), 255, dtype=torch.uint8)).tolist() == [[255.0] * 128] * 2
    assert isinstance(make_encoder(gym.spaces.Box(0, 255, (84, 84), np.uint8)), NatureCNN)
    assert make_encoder(gym.spaces.Box(-1, 1, (3, 4))).features == 12
    assert make_encoder(gym.spaces.MultiBinary(5)).features == 5
    assert OneHot(gym.spaces.Discrete(4))(torch.tensor([3])).tolist() == [[0, 0, 0, 1]]


def test_a_dict_policy_acts_evaluates_and_leaves_the_users_encoder_as_it_was():
    mine = nn.Sequential(Flat((4, 40, 40)), nn.Linear(4 * 40 * 40, 7))
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    policy = make_actor_critic(SPACE, gym.spaces.Discrete(4), encoders={"camera": mine}, seed=0)
    assert all(torch.equal(before[k], v) for k, v in mine.state_dict().items())  # not orthogonally re-initialised
    x = obs()
    td = policy(TensorDict({"observation": x}, [5]))
    assert td["action"].shape == (5,) and policy.value(x).shape == (5,)
    log_prob, entropy, value = policy.evaluate(x, td["action"])
    assert torch.allclose(log_prob, td["log_prob"]) and value.shape == (5,)
    with pytest.raises(ValueError, match=r"^demo: normalize_observations is for 1-D Box observations, got Dict\("):
        make_actor_critic(SPACE, gym.spaces.Discrete(4), normalize_observations=True, owner="demo")
