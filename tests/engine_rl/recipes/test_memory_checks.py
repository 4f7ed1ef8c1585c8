"""A recipe refuses a batch or networks larger than the machine's memory before it makes envs or
networks, naming the field (its replay refuses at its first rows, naming buffer_size); a build that
makes many env copies or long batches says so first."""

import gymnasium as gym
import pytest

import engine_rl.recipes.dqn_cartpole as dqn_module
import engine_rl.recipes.ppo_cartpole as ppo_module
import engine_rl.recipes.sac_pendulum as sac_module
from engine_rl import device as memory
from engine_rl.recipes.dqn_cartpole import DQNConfig, build_dqn
from engine_rl.recipes.memory_checks import announce_long_batches, check_sizes
from engine_rl.recipes.ppo_cartpole import PPOConfig, build_ppo
from engine_rl.recipes.sac_pendulum import SACConfig, build_sac

BOX4, TWO = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
LIMIT = (4 * 2**30, "this machine has 4.0 GiB of memory")


def refusal(cfg, **kwargs):
    options = {"device": "cpu", "networks": 1, "target": True, "limit": LIMIT}
    with pytest.raises(ValueError) as err:
        check_sizes(cfg, kwargs.pop("observation_space", BOX4), kwargs.pop("action_space", TWO), **{**options, **kwargs})
    return str(err.value)


def test_the_batch_and_the_networks_are_checked_in_that_order():
    assert refusal(DQNConfig(num_envs=1, frames_per_batch=2**40, hidden=(10**7,))) == (
        "DQNConfig: frames_per_batch=1099511627776 needs about 59.0 TiB to collect a batch (59 bytes a frame) but this "
        "machine has 4.0 GiB of memory; lower frames_per_batch")
    assert refusal(DQNConfig(hidden=(10**7,))) == (
        "DQNConfig: hidden=(10000000,) needs about 6.1 GiB for the networks' updates (1 network of 70,000,002 "
        "parameters with gradients, Adam's moments and a target copy; activations of 64-row batches) but this machine "
        "has 4.0 GiB of memory; lower hidden or batch_size")
    check_sizes(DQNConfig(), BOX4, TWO, device="cpu", networks=1, target=True, limit=LIMIT)  # the defaults pass
    check_sizes(DQNConfig(buffer_size=10**12), BOX4, TWO, device="cpu", networks=1, target=True, limit=LIMIT)


def test_ppo_names_the_fields_its_batch_comes_from():
    assert refusal(PPOConfig(steps_per_env=2**37), networks=2, target=False) == (
        "PPOConfig: num_envs * steps_per_env=1099511627776 needs about 59.0 TiB to collect a batch (59 bytes a frame) "
        "but this machine has 4.0 GiB of memory; lower num_envs or steps_per_env")
    assert refusal(PPOConfig(hidden=(10**7,)), networks=2, target=False).startswith(
        "PPOConfig: hidden=(10000000,) needs about 40.2 GiB for the networks' updates (2 networks of 70,000,002 "
        "parameters with gradients, Adam's moments; activations of 256-row batches)")


def test_observations_made_large_by_wrappers_are_named_by_shape_with_the_wrappers():
    stacked = gym.spaces.Box(-1, 1, (10**7, 4))
    cfg = DQNConfig(wrappers=("FrameStackObservation(stack_size=10000000)",))
    assert refusal(cfg, observation_space=stacked) == (
        "DQNConfig: frames_per_batch=256 needs about 76.3 GiB to collect a batch (305.2 MiB a frame: observations of "
        "shape (10000000, 4) float32 after wrappers FrameStackObservation(stack_size=10000000)) but this machine has "
        "4.0 GiB of memory; lower frames_per_batch or the observations the wrappers make")


@pytest.mark.parametrize("cfg, line", [
    (PPOConfig(num_envs=10_000, steps_per_env=1, batch_size=256),
     "engine-rl: PPOConfig: making 10,000 copies of CartPole-v1 (num_envs) for batches of 10,000 frames "
     "(about 576.2 KiB each); the progress bar moves once a batch\n"),
    (PPOConfig(num_envs=100_000),
     "engine-rl: PPOConfig: making 100,000 copies of CartPole-v1 (num_envs) for batches of 3,200,000 frames "
     "(about 180.1 MiB each); the progress bar moves once a batch\n"),
    (DQNConfig(num_envs=8, frames_per_batch=1_000_000),
     "engine-rl: DQNConfig: batches of 1,000,000 frames (about 56.3 MiB each); the progress bar moves once a batch\n"),
    (PPOConfig(env_backend="torch", num_envs=100_000), "engine-rl: PPOConfig: batches of 3,200,000 frames "
                                                        "(about 180.1 MiB each); the progress bar moves once a batch\n"),
    (PPOConfig(num_envs=9_999, steps_per_env=100), ""),  # 999,900 frames
    (PPOConfig(env_backend="torch", num_envs=4096), ""),  # one batched torch env: no copies to make
    (DQNConfig(), ""),
])
def test_many_env_copies_or_long_batches_are_announced(cfg, line, capsys):
    announce_long_batches(cfg, BOX4, TWO)
    assert capsys.readouterr().err == line


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(memory, "total_memory", lambda: 4 * 2**30)


def test_each_build_refuses_before_it_makes_envs_or_networks(small_machine, monkeypatch):
    def made(*args, **kwargs):
        raise AssertionError("an env or network was made")

    for module, names in ((ppo_module, ("_make_env", "make_actor_critic")), (dqn_module, ("recipe_env", "mlp")),
                          (sac_module, ("recipe_env", "QEnsemble"))):
        for name in names:
            monkeypatch.setattr(module, name, made)
    with pytest.raises(ValueError, match="^PPOConfig: num_envs \\* steps_per_env=1099511627776 needs about 59.0 TiB"):
        build_ppo(PPOConfig(steps_per_env=2**37, device="cpu"))
    with pytest.raises(ValueError, match="^DQNConfig: hidden=\\(10000000,\\) needs about 6.1 GiB .* has 4.0 GiB"):
        build_dqn(DQNConfig(hidden=(10**7,), device="cpu"))
    with pytest.raises(ValueError, match="^SACConfig: hidden=\\(10000000,\\) needs about 60.0 GiB .*\\(3 networks"):
        build_sac(SACConfig(hidden=(10**7,), device="cpu"))
    with pytest.raises(AssertionError, match="an env or network was made"):  # the replay is checked when it fills
        build_dqn(DQNConfig(buffer_size=10**12, device="cpu"))
