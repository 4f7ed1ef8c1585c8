import pytest
import torch
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.exploration import EpsilonGreedy, LinearSchedule
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
