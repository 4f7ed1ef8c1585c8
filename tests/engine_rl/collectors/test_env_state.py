import io
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers.vector import ClipAction

from engine_rl.collectors import EnvError, GymCollector, make_vec_env
from engine_rl.collectors.env_state import UnsupportedEnvState, get_env_state, set_env_state


def round_trip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def steps(env, actions):
    return [env.step(a)[:4] for a in actions]


def same(a, b):
    return all(all(np.array_equal(x, y) for x, y in zip(s, t)) for s, t in zip(a, b))


@pytest.mark.parametrize(
    "make",
    [
        lambda: make_vec_env("CartPole-v1", 3),  # numpy-batched, next-step autoreset
        lambda: make_vec_env("CartPole-v1", 3, mode="sync", max_episode_steps=20),  # TimeLimit in each copy
        lambda: ClipAction(make_vec_env("Pendulum-v1", 2, mode="sync", max_episode_steps=30)),  # wrapped
        lambda: make_vec_env("MountainCar-v0", 2, max_episode_steps=40),  # state: a tuple of numpy.float64
    ],
    ids=["vector_entry_point", "sync", "wrapped-sync-pendulum", "sync-mountaincar-numpy-scalars"],
)
def test_restored_env_continues_bit_for_bit_in_a_fresh_env(make):
    env = make()
    env.reset(seed=1)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(200)]
    steps(env, actions[:90])  # mid-episode, several resets done
    state = round_trip(get_env_state(env))
    expected = steps(env, actions[90:])
    fresh = make()  # never reset: the state brings everything (np_random, TimeLimit counters, ...)
    set_env_state(fresh, state)
    assert same(steps(fresh, actions[90:]), expected)


def test_state_holds_only_plain_values_and_arrays_come_back_exactly():
    env = make_vec_env("CartPole-v1", 2)
    env.reset(seed=0)
    state = get_env_state(env)
    attrs = state["vector"][0]["attrs"]
    assert {"state", "steps", "prev_done", "_np_random"} <= set(attrs)
    assert state["envs"] is None
    before = env.unwrapped.state.copy()
    env.step(np.array([0, 1]))
    set_env_state(env, round_trip(state))
    assert env.unwrapped.state.dtype == before.dtype and np.array_equal(env.unwrapped.state, before)


def test_mismatched_env_is_rejected_with_the_difference():
    env = make_vec_env("CartPole-v1", 2, mode="sync")
    env.reset(seed=0)
    state = get_env_state(env)
    with pytest.raises(ValueError, match="the env has 3 sub-envs, the state was saved from 2"):
        set_env_state(make_vec_env("CartPole-v1", 3, mode="sync"), state)
    with pytest.raises(ValueError, match=r"vector env layer 0 is a CartPoleVectorEnv, but the state was saved from a SyncVectorEnv"):
        set_env_state(make_vec_env("CartPole-v1", 2), state)


class Rand(torch.nn.Module):
    """A stochastic policy with its own generator that also writes an extra key."""

    def __init__(self):
        super().__init__()
        self.gen = torch.Generator().manual_seed(0)

    def forward(self, td):
        td.set("action", torch.randint(2, td.batch_size, generator=self.gen))
        return td.set("log_prob", torch.rand(td.batch_size, generator=self.gen))


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync"])
def test_collector_resumes_exactly_including_frames_carried_between_batches(mode):
    kwargs = {"autoreset_mode": "NextStep"} if mode == "sync" else {}
    make = lambda: make_vec_env("CartPole-v1", 3, mode=mode, **kwargs)  # noqa: E731
    carried = 0
    for k in range(1, 14):
        policy = Rand()
        collector = GymCollector(make(), policy, frames_per_batch=12, seed=3)
        it = iter(collector)
        for _ in range(k):
            next(it)
        state, policy_state = round_trip(collector.state_dict()), policy.gen.get_state()
        expected = [next(it) for _ in range(2)]
        policy2 = Rand()
        policy2.gen.set_state(policy_state)
        resumed = GymCollector(make(), policy2, frames_per_batch=12, seed=99)
        resumed.load_state_dict(state)
        got = [next(iter(resumed)) for _ in range(2)]
        assert all((a == b).all() for a, b in zip(expected, got)), f"differs after {k} batches"
        assert (resumed.frames, resumed.batches) == (collector.frames, collector.batches)
        carried += state["stepper"]["valid"].shape[0] > 0
    assert carried  # some checkpoints were taken with frames waiting for the next batch


def test_async_env_state_is_unsupported_and_the_collector_falls_back_to_reseeding():
    env = make_vec_env("CartPole-v1", 2, mode="async")
    with pytest.raises(UnsupportedEnvState, match="AsyncVectorEnv runs its envs in subprocesses"):
        get_env_state(env)
    collector = GymCollector(env, Rand(), frames_per_batch=4, seed=0)
    next(iter(collector))
    with pytest.warns(UserWarning, match="not an exact resume"):
        state = collector.state_dict()
    assert state["stepper"] is None and state["batches"] == 1
    collector.shutdown()


class FaultyCartPole(CartPoleEnv):
    """Raises once its own step count reaches ``fail_at`` (copy seeded with ``seed``)."""

    def __init__(self, fail_seed=3, fail_at=25, **kwargs):
        super().__init__(**kwargs)
        self.fail_seed, self.fail_at, self.total_steps = fail_seed, fail_at, 0

    def step(self, action):
        self.total_steps += 1
        if self._np_random_seed == self.fail_seed and self.total_steps >= self.fail_at:
            raise RuntimeError("sensor failure")
        return super().step(action)


gym.register("FaultyCartPoleUnit-v0", entry_point=FaultyCartPole, max_episode_steps=500)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_env_error_names_env_copy_and_vector_step(mode):
    collector = GymCollector(make_vec_env("FaultyCartPoleUnit-v0", 4, mode=mode), Rand(), frames_per_batch=8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's async worker logs the error as warnings
        with pytest.raises(EnvError, match=r"GymCollector: env.step raised RuntimeError: sensor failure -- in env 2 of 4 \(step \d+ of its episode\), at vector step 25") as info:
            for _ in collector:
                pass
    assert (info.value.env_index, info.value.step) == (2, 25)
    assert "sensor failure" in str(info.value.__cause__)
    collector.shutdown()


def test_env_error_of_a_batched_env_says_the_index_is_unknown():
    env = make_vec_env("CartPole-v1", 2)
    collector = GymCollector(env, Rand(), frames_per_batch=4, seed=0)
    next(iter(collector))
    env.step = lambda actions: (_ for _ in ()).throw(FloatingPointError("nan in physics"))
    with pytest.raises(EnvError, match=r"in the vector env \(CartPoleVectorEnv; env index unknown.*at vector step 3") as info:
        next(iter(collector))
    assert info.value.env_index is None


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5"])
def test_mujoco_physics_is_restored_so_the_env_continues_bitwise(env_id):
    pytest.importorskip("mujoco")
    env = make_vec_env(env_id, 2)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, (2, env.single_action_space.shape[0])).astype(np.float32) for _ in range(60)]
    for action in actions[:20]:
        env.step(action)
    state = get_env_state(env)
    assert all("mujoco" in copy[-1] for copy in state["envs"])  # the innermost layer: the MujocoEnv
    expected = [env.step(action)[0] for action in actions[20:]]
    fresh = make_vec_env(env_id, 2)
    set_env_state(fresh, state)
    assert all(np.array_equal(a, b) for a, b in zip(expected, [fresh.step(action)[0] for action in actions[20:]]))
    # without the physics (as before it was saved) the continuation differs
    for copy in state["envs"]:
        copy[-1].pop("mujoco")
    other = make_vec_env(env_id, 2)
    set_env_state(other, state)
    assert not np.array_equal(expected[0], other.step(actions[20])[0])


def test_the_atari_emulator_and_frame_stack_are_restored_so_the_env_continues_bitwise():
    pytest.importorskip("ale_py")
    from engine_rl.collectors.atari import ATARI_WRAPPERS

    env = make_vec_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 4, 2) for _ in range(400)]
    for action in actions[:100]:
        env.step(action)
    buffer = io.BytesIO()
    torch.save(get_env_state(env), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert all("ale" in copy[-1] for copy in state["envs"])
    expected = [env.step(action) for action in actions[100:]]
    assert sum(int(step[2].sum()) for step in expected) >= 2  # episodes end (and restart with no-op starts)
    fresh = make_vec_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS)
    set_env_state(fresh, state)
    for want, step in zip(expected, (fresh.step(action) for action in actions[100:])):
        assert np.array_equal(want[0], step[0]) and np.array_equal(want[1], step[1]) and np.array_equal(want[2], step[2])
