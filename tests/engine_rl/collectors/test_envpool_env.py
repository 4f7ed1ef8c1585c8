"""EnvPool behind the gymnasium collector (``env_backend='envpool'``): the same batches as the
gymnasium path on the same game (keys, dtypes, shapes, episode accounting, the true final
observation, terminated vs truncated, unclipped game scores), the same Atari game frame for frame,
same-step autoreset, MuJoCo's v5 and v4 ids, seeds, and a state that is refused rather than half
saved."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from engine_rl.collectors import GymCollector, make_vec_env, run_episodes
from engine_rl.collectors.atari import ATARI_WRAPPERS, FireOnLifeStart
from engine_rl.collectors.env_state import UnsupportedEnvState, get_env_state, unsupported_reason

pytest.importorskip("envpool")
pytest.importorskip("ale_py")

from engine_rl.collectors.envpool_env import ATARI_OPTIONS, envpool_options, make_envpool_env  # noqa: E402


class Random(nn.Module):
    """Seeded uniform actions of a Discrete(n) or Box space."""

    def __init__(self, n=None, shape=None, seed=0):
        super().__init__()
        self.n, self.shape, self.gen = n, shape, torch.Generator().manual_seed(seed)

    def forward(self, td):
        if self.n is not None:
            return td.set("action", torch.randint(self.n, td.batch_size, generator=self.gen))
        return td.set("action", torch.rand((*td.batch_size, *self.shape), generator=self.gen) * 2 - 1)


class Noop(nn.Module):
    def forward(self, td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def collect(env, policy, frames, seed=0):
    with GymCollector(env, policy, frames_per_batch=frames, seed=seed) as collector:
        return next(iter(collector))


def layout(batch):
    return {key: (value.dtype, tuple(value.shape)) for key, value in batch.items(True, True)}


def check_episode_accounting(batch):
    """Each env row: lengths count 1, 2, ... and returns sum the rewards within each episode; at a
    done the next observation is the true final one (the next row starts the new episode)."""
    done, reward = batch["next", "done"], batch["next", "reward"]
    assert torch.equal(done, batch["next", "terminated"] | batch["next", "truncated"])
    obs, nxt = batch["observation"], batch["next", "observation"]
    for row in range(batch.shape[0]):
        length, total = 0, 0.0
        for t in range(batch.shape[1]):
            length, total = length + 1, total + float(reward[row, t])
            assert int(batch["next", "episode_length"][row, t]) == length
            assert float(batch["next", "episode_return"][row, t]) == pytest.approx(total)
            if t + 1 < batch.shape[1]:
                continues = torch.equal(nxt[row, t], obs[row, t + 1])
                assert continues != bool(done[row, t]), (row, t)
            if done[row, t]:
                length, total = 0, 0.0


def test_breakout_batches_match_the_gymnasium_atari_path():
    gym_batch = collect(make_vec_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS), Random(4), 600)
    pool_batch = collect(make_envpool_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS), Random(4), 600)
    assert layout(pool_batch) == layout(gym_batch)
    assert pool_batch["observation"].dtype == torch.uint8 and pool_batch["observation"].shape[2:] == (4, 84, 84)
    assert pool_batch["next", "done"].any()  # random Breakout loses its 5 lives in a few hundred steps
    check_episode_accounting(pool_batch)
    check_episode_accounting(gym_batch)


def test_fire_after_a_lost_life_ends_noop_episodes_as_the_gymnasium_path_does():
    # FireOnLifeStart launches each life's ball; without FIRE after a lost life a NOOP policy stalls
    # until the 27,000-step limit
    gym_batch = collect(make_vec_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS), Noop(), 600)
    pool_batch = collect(make_envpool_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS), Noop(), 600)
    lengths = [b["next", "episode_length"][b["next", "done"]].tolist() for b in (gym_batch, pool_batch)]
    assert lengths[1] and lengths[0] == lengths[1]
    assert pool_batch["next", "terminated"][pool_batch["next", "done"]].all()


@pytest.mark.parametrize("actions_seed", [2, 7])
def test_breakout_is_the_gymnasium_paths_game_frame_for_frame(actions_seed):
    # the same start on both (noop_max=1: one no-op frame, then FireOnLifeStart's FIRE step), then the
    # same random actions to the end of the game: every observation's newest frame (but the final one,
    # pooled from other frames when the game ends within a frame skip), reward, life count and end are
    # the gymnasium path's, FIRE after each lost life included; the whole stack too from the third step
    # to the first lost life (EnvPool stacks the lost life's frame before FIRE's, the gymnasium path
    # only FIRE's)
    pool = make_envpool_env("BreakoutNoFrameskip-v4", 1, wrappers=ATARI_WRAPPERS)
    pool.options["noop_max"] = 1
    obs, pool_info = pool.reset(seed=0)
    env = gym.wrappers.FrameStackObservation(
        FireOnLifeStart(gym.wrappers.AtariPreprocessing(gym.make("BreakoutNoFrameskip-v4"), noop_max=1)), 4)
    frames, info = env.reset(seed=0)
    assert np.array_equal(obs[0][-1], frames[-1]) and pool_info["lives"][0] == info["lives"] == 5
    steps, score = 0, 0.0
    for action in np.random.default_rng(actions_seed).integers(0, 4, 2000):
        frames, reward, terminated, truncated, info = env.step(int(action))
        obs, pool_reward, pool_terminated, pool_truncated, pool_info = pool.step(np.array([action]))
        if pool_terminated[0]:  # same-step autoreset: the final observation and info are kept aside
            obs, pool_info = pool_info["final_obs"], pool_info["final_info"]
        steps, score = steps + 1, score + reward
        assert np.array_equal(obs[0][-1], frames[-1]) or terminated, steps
        assert np.array_equal(obs[0], frames) or steps < 3 or info["lives"] < 5, steps
        assert (pool_reward[0], pool_info["lives"][0], pool_terminated[0]) == (reward, info["lives"], terminated)
        if terminated:
            break
    assert terminated and not truncated and steps > 150 and score >= 2  # lives lost, bricks hit, game over


def test_an_ended_copy_starts_its_next_episode_in_the_same_step():
    env = make_envpool_env("CartPole-v1", 3)
    obs, _ = env.reset(seed=0)
    assert env.metadata["autoreset_mode"].name == "SAME_STEP"
    for _ in range(200):
        before = obs.copy()
        obs, _, terminated, truncated, info = env.step(np.zeros(3, dtype=np.int64))
        if terminated.any():
            break
    ended = terminated | truncated
    assert ended.any() and np.array_equal(info["_final_obs"], ended)
    i = int(np.flatnonzero(ended)[0])
    assert np.abs(info["final_obs"][i] - before[i]).max() < 0.5  # the last step's result, not a new start
    assert np.abs(obs[i]).max() <= 0.05  # CartPole starts within +-0.05
    assert info["final_info"]["_elapsed_step"][i] and info["final_info"]["elapsed_step"][i] > 0
    assert info["elapsed_step"][i] == 0  # the new episode's info


def test_a_dict_observation_env_resets_entry_by_entry():
    # dm_control's CheetahRun-v1 observes {"position", "velocity"}; 15-step episodes
    env = make_envpool_env("CheetahRun-v1", 2, env_kwargs={"max_episode_steps": 15})
    batch = collect(env, Random(shape=(6,)), 60)
    assert set(batch["observation"].keys()) == {"position", "velocity"}
    assert batch["next", "truncated"].sum() == 4 and not batch["next", "terminated"].any()
    assert batch["next", "episode_length"][0].tolist() == [*range(1, 16), *range(1, 16)]
    for key in ("position", "velocity"):
        obs, nxt = batch["observation", key][0], batch["next", "observation", key][0]
        continues = [torch.equal(nxt[t], obs[t + 1]) for t in range(29)]
        assert continues == [t != 14 for t in range(29)]


def test_episode_returns_are_the_unclipped_game_score():
    batch = collect(make_envpool_env("SpaceInvadersNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS), Random(6), 400)
    reward = batch["next", "reward"]
    assert reward.max() > 1  # an alien is worth 5 to 30 points
    assert set(reward.unique().tolist()) <= {0, 5, 10, 15, 20, 25, 30, 200}
    check_episode_accounting(batch)


def test_the_time_limit_truncates_with_the_true_final_observation():
    # EnvPool counts its steps, the FIRE steps after the reset and after a lost life included (ALE's
    # frame limit counts those frames too): 19 steps of NOOPs lose no life (the first is lost after 24)
    env = make_envpool_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS,
                           env_kwargs={"max_episode_steps": 20})
    batch = collect(env, Noop(), 120)
    ends = batch["next", "truncated"]
    assert ends.sum() == 2 * 3 and not batch["next", "terminated"].any()
    assert (batch["next", "episode_length"][ends] == 19).all()
    check_episode_accounting(batch)


def test_atari_ids_map_to_envpool_games_with_the_gymnasium_paths_settings():
    task, options = envpool_options("BreakoutNoFrameskip-v4", wrappers=ATARI_WRAPPERS)
    assert task == "Breakout-v5" and options == {"repeat_action_probability": 0.0, **ATARI_OPTIONS}
    # ALE/*-v5 keeps v5's sticky actions; the recipes' frameskip=1 (gymnasium's "the wrappers skip") is dropped
    task, options = envpool_options("ALE/Pong-v5", wrappers=ATARI_WRAPPERS, env_kwargs={"frameskip": 1})
    assert task == "Pong-v5" and options["repeat_action_probability"] == 0.25 and "frameskip" not in options
    assert envpool_options("Pong-v5", wrappers=ATARI_WRAPPERS) == ("Pong-v5", ATARI_OPTIONS)


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Hopper-v4"])
def test_mujoco_batches_match_the_gymnasium_path(env_id):
    pytest.importorskip("mujoco")
    pool_batch = collect(make_envpool_env(env_id, 2), Random(shape=(3,)), 400)
    gym_batch = collect(make_vec_env("Hopper-v5", 2), Random(shape=(3,)), 400)
    assert layout(pool_batch) == layout(gym_batch)
    assert pool_batch["observation"].dtype == torch.float32 and pool_batch["next", "terminated"].any()
    check_episode_accounting(pool_batch)


def test_a_seed_gives_the_same_episodes_and_copy_i_gets_seed_plus_i():
    env = make_envpool_env("Hopper-v5", 2)
    first, _ = env.reset(seed=3)
    steps = [env.step(np.full((2, 3), 0.5))[0] for _ in range(5)]
    again, _ = env.reset(seed=3)
    assert np.array_equal(first, again) and all(np.array_equal(s, env.step(np.full((2, 3), 0.5))[0]) for s in steps)
    assert not np.array_equal(first, env.reset(seed=4)[0])
    one = make_envpool_env("Hopper-v5", 1)
    assert np.array_equal(one.reset(seed=4)[0][0], first[1])
    big = 2**40 + 5  # the project's seeds go up to 2**63; EnvPool's are int32
    assert np.array_equal(env.reset(seed=big)[0][0], one.reset(seed=big % 2**31)[0][0])


def test_evaluation_episodes_repeat_with_the_same_seed():
    env = make_envpool_env("BreakoutNoFrameskip-v4", 2, wrappers=ATARI_WRAPPERS)
    runs = [run_episodes(env, Random(4), num_episodes=3, seed=10_000) for _ in range(2)]
    assert torch.equal(runs[0]["return"], runs[1]["return"])
    assert torch.equal(runs[0]["length"], runs[1]["length"])


def test_the_env_state_is_refused_and_a_checkpointed_collector_says_it_starts_new_episodes():
    env = make_envpool_env("CartPole-v1", 2)
    assert "EnvPool" in unsupported_reason(env)
    with pytest.raises(UnsupportedEnvState, match="EnvPool steps its envs in C\\+\\+ threads"):
        get_env_state(env)
    collector = GymCollector(env, Random(2), frames_per_batch=8, seed=0)
    next(iter(collector))
    with pytest.warns(UserWarning, match="starts new episodes"):
        state = collector.state_dict()
    assert state["stepper"] is None
    collector.load_state_dict(state)
    assert next(iter(collector)).batch_size == (2, 4)
    collector.shutdown()
