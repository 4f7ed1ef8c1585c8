"""The TorchEnv interface: autoreset, seeding, state_dict resume, sync-free resets, errors."""

import io

import pytest
import torch

from engine_rl.envs import CartPole, Pendulum, TorchEnv, make_torch_env

ENVS = [CartPole, Pendulum]


def random_actions(env: TorchEnv, gen: torch.Generator) -> torch.Tensor:
    return env.action_spec.sample(env.num_envs, generator=gen)


def rollout(env: TorchEnv, steps: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        next_obs, reward, terminated, truncated = env.step(random_actions(env, gen))
        out += [next_obs, reward, terminated, truncated, env.observation]
    return out


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("cls", ENVS)
def test_step_outputs_and_autoreset(cls):
    env = cls(6, max_episode_steps=7)
    obs = env.reset(seed=0)
    assert obs.shape == (6, *env.observation_spec.shape) and obs.dtype == torch.float32
    gen = torch.Generator().manual_seed(0)
    for t in range(7):
        before = env.observation
        next_obs, reward, terminated, truncated = env.step(random_actions(env, gen))
        assert next_obs.shape == before.shape and reward.shape == (6,) and reward.dtype == torch.float32
        assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
        done = terminated | truncated
        # not done: the next observation is what to act on; done: a fresh reset observation
        assert torch.equal(env.observation[~done], next_obs[~done])
        assert not (env.observation[done] == next_obs[done]).all(-1).any()
        assert (env.elapsed_steps[done] == 0).all()
    assert truncated.all()  # 7 steps: every copy still running is truncated now
    # returned tensors are not the env's: modifying them leaves the env alone
    kept = env.observation.clone()
    next_obs.add_(1.0)
    assert torch.equal(env.observation, kept)


@pytest.mark.parametrize("cls", ENVS)
def test_seeding_is_per_env_and_reproducible(cls):
    a, b, c = cls(4), cls(4), cls(9)
    assert torch.equal(a.reset(seed=3), b.reset(seed=3))
    obs_c = c.reset(seed=3)
    assert torch.equal(obs_c[:4], a.observation)  # copy i depends on (seed, i) only
    assert not torch.equal(cls(4).reset(seed=4), a.observation)
    assert not torch.equal(a.reset(), b.observation)  # reset(None) continues the streams
    torch.manual_seed(0)
    first = cls(4).reset()
    torch.manual_seed(0)
    assert torch.equal(cls(4).reset(), first)  # never seeded: seeded from torch's generator


def test_each_env_copy_follows_its_own_stream():
    # the same actions on copies 0..3 give the same resets whatever copies 4..8 do
    small, big = CartPole(4, max_episode_steps=20), CartPole(9, max_episode_steps=20)
    small.reset(seed=1)
    big.reset(seed=1)
    gen = torch.Generator().manual_seed(2)
    for _ in range(100):
        action = torch.randint(2, (9,), generator=gen)
        out_small = small.step(action[:4])
        out_big = big.step(action)
        for x, y in zip(out_small, out_big):
            assert torch.equal(x, y[:4])
        assert torch.equal(small.observation, big.observation[:4])


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sync_free_resets_give_the_same_trajectories(cls, dtype):
    env, free = cls(16, dtype=dtype, max_episode_steps=15), cls(16, dtype=dtype, max_episode_steps=15)
    free.sync_free_reset = True  # the GPU path (torch.where, no host sync), here on the CPU
    env.reset(seed=5)
    free.reset(seed=5)
    assert_same(rollout(env, 60), rollout(free, 60))
    assert torch.equal(env.state, free.state)
    assert torch.equal(env.state_dict()["rng"]["counter"], free.state_dict()["rng"]["counter"])


@pytest.mark.parametrize("cls", ENVS)
def test_state_dict_resumes_exactly_through_weights_only_load(cls):
    env = cls(8, max_episode_steps=25)
    env.reset(seed=7)
    rollout(env, 33, seed=1)  # mid-episode, after some resets
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    expected = rollout(env, 40, seed=2)
    restored = cls(8, max_episode_steps=25)
    restored.load_state_dict(state)
    assert_same(rollout(restored, 40, seed=2), expected)


def test_load_state_dict_checks_keys_shapes_and_dtypes():
    env = CartPole(4)
    env.reset(seed=0)
    state = env.state_dict()
    expected = r"CartPole.load_state_dict: 'state' must be a tensor of shape \(5, 4\).*got \(\(4, 4\)"
    with pytest.raises(ValueError, match=expected):
        CartPole(5).load_state_dict(state)
    with pytest.raises(ValueError, match=r"'state' must be a tensor .* dtype torch.float64"):
        CartPole(4, dtype=torch.float64).load_state_dict(state)
    with pytest.raises(KeyError, match=r"missing key\(s\) \['rng'\]"):
        env.load_state_dict({k: v for k, v in state.items() if k != "rng"})
    fresh = CartPole(4)
    fresh.load_state_dict(CartPole(4).state_dict())  # a never-reset env stays never-reset
    with pytest.raises(RuntimeError, match="call reset"):
        fresh.step(torch.zeros(4, dtype=torch.int64))


def test_argument_and_action_errors():
    with pytest.raises(ValueError, match="CartPole: num_envs must be a positive int, got 0"):
        CartPole(0)
    with pytest.raises(ValueError, match="Pendulum: dtype must be torch.float32 or torch.float64"):
        Pendulum(2, dtype=torch.float16)
    with pytest.raises(ValueError, match="max_episode_steps must be a positive int, got 0"):
        CartPole(2, max_episode_steps=0)
    env = Pendulum(3)
    with pytest.raises(RuntimeError, match=r"Pendulum: call reset\(\) before step\(\)"):
        env.step(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="seed must be an int in"):
        env.reset(seed=-1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"Pendulum.step: action must be a tensor of shape \(3, 1\).*got \(3,\)"):
        env.step(torch.zeros(3))
    with pytest.raises(ValueError, match="action is on meta but the env steps on cpu"):
        env.step(torch.zeros(3, 1, device="meta"))
    with pytest.raises(ValueError, match=r"no torch env for 'Acrobot-v1'; available: \['CartPole-v1', 'Pendulum-v1'\]"):
        make_torch_env("Acrobot-v1")


def test_make_torch_env_passes_options():
    env = make_torch_env("Pendulum-v1", 3, dtype=torch.float64, max_episode_steps=9)
    assert isinstance(env, Pendulum) and env.num_envs == 3 and env.dtype == torch.float64
    assert env.max_episode_steps == 9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("cls", ENVS)
def test_cuda_matches_cpu(cls):
    cpu = cls(64, dtype=torch.float64, max_episode_steps=30)
    gpu = cls(64, dtype=torch.float64, device="cuda", max_episode_steps=30)
    assert gpu.sync_free_reset
    cpu.reset(seed=0)
    gpu.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):
        action = random_actions(cpu, gen)
        out_cpu = cpu.step(action)
        out_gpu = gpu.step(action.cuda())
        assert all(t.device.type == "cuda" for t in out_gpu)
        torch.testing.assert_close(out_gpu[0].cpu(), out_cpu[0], rtol=1e-5, atol=1e-6)
        assert torch.equal(out_gpu[2].cpu(), out_cpu[2]) and torch.equal(out_gpu[3].cpu(), out_cpu[3])
