import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.collectors import GymCollector
from engine_rl.run.driver import make_config
from handlers import EpisodeStats

LENGTH = 3  # every episode lasts 3 steps


class InfoEnv(gym.Env):
    """Episodes of LENGTH steps; info "t" is the step number, "flag" (1.0) only on the last
    step, "vec" is not a scalar."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {"t": float(self.t), "vec": np.zeros(2)}
        if self.t == LENGTH:
            info["flag"] = 1.0
        return np.zeros(1, np.float32), 1.0, self.t == LENGTH, False, info


def _env(mode):
    return gym.vector.SyncVectorEnv([InfoEnv, InfoEnv], autoreset_mode=mode)


def _policy(td):
    return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


MODES = [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_collector_records_info_scalars_per_frame(mode):
    with GymCollector(_env(mode), _policy, frames_per_batch=12, seed=0, info_keys=["t", "flag"]) as collector:
        batch = next(iter(collector))
    t = batch["next", "info", "t"]
    flag = batch["next", "info", "flag"]
    assert t.shape == (2, 6) and t.dtype == torch.float32
    # the step number is the episode length at every frame, and flag is there only at episode ends
    assert torch.equal(t, batch["next", "episode_length"].float())
    done = batch["next", "done"]
    assert done.sum() == 4
    assert torch.equal(flag[done], torch.ones(4))
    assert torch.isnan(flag[~done]).all()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_episode_stats_average_info_at_episode_ends(mode):
    collector = GymCollector(_env(mode), _policy, frames_per_batch=12, seed=0, info_keys=["t", "flag"])
    net = torch.nn.Linear(1, 1)

    def loss(td):
        return {"loss": net(td["observation"]).square().mean()}

    trainer = create_trainer(collector, loss, torch.optim.SGD(net.parameters(), lr=0.1), total_frames=24)
    stats = EpisodeStats(info_keys=["t", "flag"]).attach(trainer)
    trainer.run()
    collector.shutdown()
    m = trainer.state.metrics
    assert m["train_info_t"] == LENGTH and m["train_info_flag"] == 1.0
    assert m["train_length_mean"] == LENGTH and stats.episodes == 8


def test_info_means_skip_keys_never_reported():
    batch = TensorDict({("next", "done"): torch.tensor([True, False]),
                        ("next", "episode_return"): torch.ones(2), ("next", "episode_length"): torch.ones(2),
                        ("next", "info", "a"): torch.tensor([math.nan, 1.0])}, [2])
    assert EpisodeStats(info_keys=["a"]).info_means(batch) == {}


def test_non_scalar_info_is_an_error_naming_the_key():
    with GymCollector(_env(MODES[0]), _policy, frames_per_batch=4, seed=0, info_keys=["vec"]) as collector:
        with pytest.raises(ValueError, match=r"GymCollector: env info 'vec' must hold one number per env copy"):
            next(iter(collector))


def test_episode_stats_names_missing_info_keys():
    batch = TensorDict({("next", "done"): torch.tensor([True]), ("next", "episode_return"): torch.ones(1),
                        ("next", "episode_length"): torch.ones(1)}, [1])
    with pytest.raises(KeyError, match=r"EpisodeStats \(info_keys.*next.*info.*is_success"):
        EpisodeStats(info_keys=["is_success"]).info_means(batch)


@pytest.mark.parametrize("bad", ["t", ["t", "t"], [""], [1], 3])
def test_bad_info_keys(bad):
    with pytest.raises(ValueError, match="EpisodeStats: argument info_keys"):
        EpisodeStats(info_keys=bad)


def test_recipe_overrides():
    assert make_config("ppo-cartpole", ["info_keys=is_success, x"]).info_keys == ("is_success", "x")
    assert make_config("sac-pendulum", ["info_keys=('a',)"]).info_keys == ("a",)
    assert make_config("sac-pendulum", ["info_keys="]).info_keys == ()
    # the async collector records them too (tests/engine_rl/collectors/test_async_collector.py)
    assert make_config("dqn-cartpole", ["info_keys=a", "async_collection=true"]).info_keys == ("a",)


def test_all_reduced_episode_stats_average_info_too():
    from types import SimpleNamespace

    from handlers.distributed import AllReducedEpisodeStats

    batch = TensorDict({("next", "done"): torch.tensor([True, True, False, True]),
                        ("next", "episode_return"): torch.tensor([1.0, 3.0, 9.0, 5.0]),
                        ("next", "episode_length"): torch.tensor([1, 3, 9, 5]),
                        ("next", "info", "a"): torch.tensor([2.0, math.nan, 100.0, 4.0])}, [4])
    engine = SimpleNamespace(state=SimpleNamespace(batch=batch, metrics={}))
    AllReducedEpisodeStats(info_keys=["a"])(engine)
    m = engine.state.metrics
    assert m["train_return_mean"] == 3.0 and m["train_info_a"] == 3.0  # the unreported episode left out


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_evaluation_reads_info_at_the_episodes_last_step(mode):
    from engine_rl.collectors import run_episodes
    from engine_rl.evaluation import EVAL_METRICS, create_evaluator

    res = run_episodes(_env(mode), _policy, num_episodes=5, seed=0, info_keys=["t", "flag", "absent"])
    assert sorted(res) == ["info_absent", "info_flag", "info_t", "length", "return"]
    assert res["info_t"].tolist() == [3.0] * 5  # the last step's value, not the first or a mean
    assert res["info_flag"].tolist() == [1.0] * 5
    assert torch.isnan(res["info_absent"]).all()

    evaluator = create_evaluator(_env(mode), _policy, num_episodes=4, seed=0, info_keys=["flag", "absent"])
    metrics = evaluator.run().metrics
    assert evaluator.metric_names == EVAL_METRICS + ("info_flag", "info_absent")
    assert metrics["info_flag"] == 1.0 and math.isnan(metrics["info_absent"])
    assert metrics["length_mean"] == 3.0


def test_validation_rollout_publishes_eval_info_and_rejects_bad_keys():
    from handlers import ValidationRollout

    rollout = ValidationRollout(_env(gym.vector.AutoresetMode.NEXT_STEP), _policy, num_episodes=2, seed=0,
                                info_keys=["flag"])
    scores = rollout.evaluate()
    assert scores["eval_info_flag"] == 1.0 and scores["eval_return_mean"] == 3.0
    with pytest.raises(ValueError, match=r"^ValidationRollout: argument info_keys must be a sequence of non-empty "
                                         r"strings, got \[''\]$"):
        ValidationRollout(_env(gym.vector.AutoresetMode.NEXT_STEP), _policy, info_keys=[""])
    vec = ValidationRollout(_env(gym.vector.AutoresetMode.NEXT_STEP), _policy, num_episodes=2, seed=0,
                            info_keys=["vec"])
    with pytest.raises(ValueError, match=r"run_episodes: env info 'vec' must hold one number per env copy"):
        vec.evaluate()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_a_key_the_env_never_reports_is_named_once_the_first_episode_ends(mode):
    from engine_rl.collectors.info import InfoKeyWarning

    with pytest.warns(InfoKeyWarning) as caught:
        with GymCollector(_env(mode), _policy, frames_per_batch=12, seed=0, info_keys=["t", "nonexistent"]) as c:
            next(iter(c))
    assert len(caught) == 1 and str(caught[0].message) == (
        "GymCollector: info_keys 'nonexistent' never appeared in the env's info by the end of the first episode; "
        "the info has: 'flag', 't', 'vec' (a misspelt key records nothing)"
    )
    import warnings

    with warnings.catch_warnings():  # a key reported only at episode ends ("flag") is no warning
        warnings.simplefilter("error", InfoKeyWarning)
        with GymCollector(_env(mode), _policy, frames_per_batch=12, seed=0, info_keys=["flag"]) as c:
            next(iter(c))
