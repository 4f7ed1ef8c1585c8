import io

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

import engine_rl.algos as algos
from engine_rl.algos.exploration import EpsilonGreedy, GaussianNoise, LinearSchedule, RandomWarmup
from engine_rl.algos.td3 import TanhActor
from engine_rl.collectors import GymCollector, make_vec_env


class Zeros(nn.Module):
    """Greedy stand-in: always action 0 (has a parameter, like a Q-network)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))


def obs_td(n):
    return TensorDict({"observation": torch.zeros(n, 4)}, batch_size=[n])


def test_linear_schedule_values():
    schedule = LinearSchedule(1.0, 0.05, steps=100)
    assert schedule.value(0) == 1.0
    assert schedule.value(50) == pytest.approx(0.525)
    assert schedule.value(100) == schedule.value(10**9) == 0.05
    assert schedule.value(-5) == 1.0
    assert LinearSchedule(0.0, 2.0, steps=4).value(1) == 0.5  # increasing works too
    assert LinearSchedule(1.0, 0.3, steps=0).value(0) == 0.3
    for steps in (-1, 2.5, True):
        with pytest.raises(ValueError, match="LinearSchedule: steps must be a non-negative int"):
            LinearSchedule(1.0, 0.0, steps=steps)


def test_eps_follows_frames_seen():
    explore = EpsilonGreedy(Zeros(), num_actions=2, eps_start=1.0, eps_end=0.1, annealing_frames=100, seed=0)
    assert explore.eps == 1.0 and explore.frames == 0
    explore(obs_td(10))
    assert explore.frames == 10 and explore.eps == pytest.approx(0.91)
    for _ in range(4):
        explore(TensorDict({"observation": torch.zeros(2, 5, 4)}, batch_size=[2, 5]))
    assert explore.frames == 50 and explore.eps == pytest.approx(0.55)
    explore(obs_td(100))
    assert explore.eps == 0.1


def test_random_action_frequency():
    explore = EpsilonGreedy(Zeros(), num_actions=4, eps_start=0.4, eps_end=0.4, seed=1)
    actions = explore(obs_td(40_000))["action"]
    counts = torch.bincount(actions, minlength=4).float() / actions.numel()
    # greedy 0 with prob 0.6 + 0.4 / 4; every other action 0.4 / 4
    assert counts[0] == pytest.approx(0.7, abs=0.01)
    assert torch.allclose(counts[1:], torch.full((3,), 0.1), atol=0.01)
    greedy = EpsilonGreedy(Zeros(), num_actions=4, eps_start=0.0, eps_end=0.0, seed=1)
    assert (greedy(obs_td(1000))["action"] == 0).all()


def test_same_seed_same_actions():
    def actions(seed):
        return EpsilonGreedy(Zeros(), num_actions=3, seed=seed)(obs_td(64))["action"]

    assert torch.equal(actions(5), actions(5)) and not torch.equal(actions(5), actions(6))
    torch.manual_seed(0)
    first = EpsilonGreedy(Zeros(), num_actions=3)(obs_td(64))["action"]
    torch.manual_seed(0)
    assert torch.equal(first, EpsilonGreedy(Zeros(), num_actions=3)(obs_td(64))["action"])


def test_state_dict_round_trip_with_weights_only(tmp_path):
    explore = EpsilonGreedy(Zeros(), num_actions=5, eps_start=0.5, eps_end=0.5, seed=2)
    explore(obs_td(30))
    torch.save(explore.state_dict(), tmp_path / "eps.pt")
    state = torch.load(tmp_path / "eps.pt", weights_only=True)
    assert set(state) == {"policy.scale", "_extra_state"} and state["_extra_state"]["frames"] == 30
    restored = EpsilonGreedy(Zeros(), num_actions=5, eps_start=0.5, eps_end=0.5, seed=99)
    restored.load_state_dict(state)
    assert restored.frames == 30 and restored.eps == explore.eps
    assert torch.equal(restored(obs_td(50))["action"], explore(obs_td(50))["action"])


def test_action_with_trailing_dim_and_policy_returning_none():
    def greedy(td):
        td.set("action", torch.zeros(*td.batch_size, 1, dtype=torch.int64))

    out = EpsilonGreedy(greedy, num_actions=3, eps_start=1.0, eps_end=1.0, seed=0)(obs_td(200))
    assert out["action"].shape == (200, 1) and set(out["action"].unique().tolist()) == {0, 1, 2}


def test_bad_arguments():
    with pytest.raises(ValueError, match="EpsilonGreedy: num_actions must be a positive int, got 0"):
        EpsilonGreedy(Zeros(), num_actions=0)
    with pytest.raises(ValueError, match=r"EpsilonGreedy: eps_end must be in \[0, 1\], got 1.5"):
        EpsilonGreedy(Zeros(), num_actions=2, eps_end=1.5)
    with pytest.raises(TypeError, match="policy must be callable"):
        EpsilonGreedy(None, num_actions=2)
    explore = EpsilonGreedy(lambda td: td, num_actions=2)
    match = r"EpsilonGreedy: the wrapped policy must write 'action'.*\['observation'\]"
    with pytest.raises(KeyError, match=match):
        explore(obs_td(2))


def test_drives_a_collector():
    explore = EpsilonGreedy(Zeros(), num_actions=2, eps_start=1.0, eps_end=0.0, annealing_frames=200, seed=0)
    collector = GymCollector(make_vec_env("CartPole-v1", 4), explore, frames_per_batch=200, seed=0)
    it = iter(collector)
    early, _, late = next(it), next(it), next(it)  # the third batch is all acted after frame 200
    assert explore.frames >= 600  # reset steps of next-step autoreset are acted on too
    assert early["action"].float().mean() > 0.2 and (late["action"] == 0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_actions_on_cuda():
    def greedy(td):
        return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64, device="cuda"))

    out = EpsilonGreedy(greedy, num_actions=3, eps_start=1.0, eps_end=1.0, seed=0)(obs_td(300))
    assert out["action"].device.type == "cuda" and set(out["action"].unique().tolist()) == {0, 1, 2}


# -- the SAC/TD3 random warm-up ------------------------------------------------------------

class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, td):
        self.calls += 1
        return td.set("action", torch.full((*td.batch_size, 2), 0.5))


def test_random_warmup_is_uniform_in_bounds_then_delegates():
    inner = Recorder()
    warm = RandomWarmup(inner, low=[-2.0, 0.0], high=[2.0, 5.0], frames=3000, seed=0)
    actions = torch.cat([warm(obs_td(1000))["action"] for _ in range(3)])
    assert inner.calls == 0 and warm.frames == 3000 and not warm.warming_up
    assert bool((actions[:, 0] >= -2).all() and (actions[:, 0] <= 2).all())
    assert bool((actions[:, 1] >= 0).all() and (actions[:, 1] <= 5).all())
    torch.testing.assert_close(actions.mean(0), torch.tensor([0.0, 2.5]), atol=0.1, rtol=0)
    torch.testing.assert_close(actions.var(0), torch.tensor([16 / 12, 25 / 12]), atol=0.1, rtol=0)  # uniform variance
    assert torch.equal(warm(obs_td(4))["action"], torch.full((4, 2), 0.5))
    assert inner.calls == 1 and warm.frames == 3004


def test_random_warmup_zero_frames_never_randomizes_and_checks_arguments():
    inner = Recorder()
    assert torch.equal(RandomWarmup(inner, low=[0.0, 0.0], high=[1.0, 1.0], frames=0)(obs_td(2))["action"],
                       torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="RandomWarmup: frames must be a non-negative int, got -1"):
        RandomWarmup(inner, low=[0.0], high=[1.0], frames=-1)
    with pytest.raises(TypeError, match="RandomWarmup: policy must be callable"):
        RandomWarmup(3, low=[0.0], high=[1.0], frames=1)


def test_random_warmup_state_round_trip_reproduces_future_draws():
    warm = RandomWarmup(Recorder(), low=[-1.0, -1.0], high=[1.0, 1.0], frames=100, seed=3)
    warm(obs_td(10))
    buf = io.BytesIO()
    torch.save(warm.state_dict(), buf)
    buf.seek(0)
    expected = warm(obs_td(10))["action"]
    other = RandomWarmup(Recorder(), low=[-1.0, -1.0], high=[1.0, 1.0], frames=100, seed=99)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.frames == 10
    assert torch.equal(other(obs_td(10))["action"], expected)


# -- TD3's Gaussian action noise -----------------------------------------------------------

def _tanh_actor():
    torch.manual_seed(0)
    return TanhActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))


def test_gaussian_noise_perturbs_in_the_unit_box_clips_and_replays_from_its_state():
    actor = _tanh_actor()
    obs = TensorDict({"observation": torch.randn(64, 3)}, [64])
    quiet = GaussianNoise(actor, std=0.0, seed=0)
    torch.testing.assert_close(quiet(obs.clone())["action"], actor(obs.clone())["action"])
    loud = GaussianNoise(actor, std=10.0, seed=0)
    state = loud.state_dict()
    first = loud(obs.clone())["action"]
    assert first.abs().max() == 2.0 and (first.abs() == 2.0).float().mean() > 0.5  # clipped at the bounds
    noisy = GaussianNoise(actor, std=0.1, seed=3)
    deltas = (actor.unscale(noisy(obs.clone())["action"]) - actor.unit_action(obs["observation"])).detach()
    assert 0.07 < float(deltas.std()) < 0.13  # std in unit-box units
    loud.load_state_dict(state)
    torch.testing.assert_close(loud(obs.clone())["action"], first)
    assert loud.frames == 64
    with pytest.raises(ValueError, match="GaussianNoise: std must be a non-negative number, got -1"):
        GaussianNoise(actor, std=-1)
    with pytest.raises(TypeError, match="GaussianNoise: actor must be a TanhActor, got Linear"):
        GaussianNoise(nn.Linear(3, 1), std=0.1)


def test_every_exploration_wrapper_is_one_module_and_exported_from_algos():
    import engine_rl.algos.exploration as exploration

    for cls in (EpsilonGreedy, RandomWarmup, GaussianNoise, LinearSchedule):
        assert cls.__module__ == "engine_rl.algos.exploration" and getattr(algos, cls.__name__) is cls
    assert set(exploration.__all__) == {"EpsilonGreedy", "GaussianNoise", "LinearSchedule", "RandomWarmup",
                                        "SeededPolicyWrapper"}
