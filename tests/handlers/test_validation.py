import io
import math

import pytest
import torch
from ignite.engine import Events
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.collectors import make_vec_env, run_episodes
from handlers import ValidationRollout

KEYS = {"eval_return_mean", "eval_return_std", "eval_return_min", "eval_return_max", "eval_length_mean"}


class Threshold(torch.nn.Module):
    """Deterministic CartPole policy: push towards the pole's lean (plus a learnable bias).

    Records the module's training flag and grad mode at each call.
    """

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))
        self.calls = []

    def forward(self, td):
        self.calls.append((self.training, torch.is_grad_enabled()))
        obs = td["observation"]
        return td.set("action", (obs[:, 2] + obs[:, 3] + self.bias > 0).long())


def _trainer(policy, n):
    data = [TensorDict({"x": torch.ones(4, 1)}, [4])] * n
    return create_trainer(data, lambda td: {"loss": policy.bias * 0.0}, torch.optim.SGD(policy.parameters(), lr=0.1))


def test_metrics_match_run_episodes_and_policy_mode_is_restored():
    policy = Threshold()
    env = make_vec_env("CartPole-v1", 2, max_episode_steps=60)
    rollout = ValidationRollout(env, policy, num_episodes=5, seed=3)
    trainer = _trainer(policy, 2)
    rollout.attach(trainer)
    trainer.run(max_epochs=1)
    metrics = trainer.state.metrics
    assert set(metrics) >= KEYS and all(isinstance(metrics[k], float) for k in KEYS)
    assert all(mode == (False, False) for mode in policy.calls)  # eval mode, no grad
    assert policy.training  # restored

    ref = run_episodes(make_vec_env("CartPole-v1", 2, max_episode_steps=60), policy, 5, seed=3)
    r = ref["return"].double()
    assert metrics["eval_return_mean"] == pytest.approx(r.mean().item())
    assert metrics["eval_return_std"] == pytest.approx(r.std(correction=0).item())
    assert metrics["eval_return_min"] == r.min().item() and metrics["eval_return_max"] == r.max().item()
    assert metrics["eval_length_mean"] == pytest.approx(ref["length"].double().mean().item())
    assert rollout.num_evaluations == 2 and rollout.last == {k: metrics[k] for k in KEYS}


def test_eval_mode_restored_to_eval_and_after_an_error():
    policy = Threshold().eval()
    rollout = ValidationRollout(make_vec_env("CartPole-v1", 1, max_episode_steps=20), policy, num_episodes=1, seed=0)
    scores = rollout.evaluate()
    assert not policy.training
    assert scores["eval_return_std"] == 0.0  # one episode: population std

    class Broken(Threshold):
        def forward(self, td):
            raise RuntimeError("boom")

    broken = Broken()
    with pytest.raises(RuntimeError, match="boom"):
        ValidationRollout(make_vec_env("CartPole-v1", 1), broken, num_episodes=1).evaluate()
    assert broken.training


def test_same_seed_each_evaluation_makes_scores_comparable():
    torch.manual_seed(0)
    policy = Threshold()
    env = make_vec_env("CartPole-v1", 2, max_episode_steps=50)
    rollout = ValidationRollout(env, policy, num_episodes=3)  # seed drawn once
    first, second = dict(rollout.evaluate()), dict(rollout.evaluate())
    assert first == second
    torch.manual_seed(0)
    assert ValidationRollout(env, policy).seed == rollout.seed  # torch.manual_seed fixes the drawn seed
    with torch.no_grad():
        policy.bias.fill_(5.0)  # always push right: a worse policy scores lower on the same episodes
    assert rollout.evaluate()["eval_return_mean"] < first["eval_return_mean"]


@pytest.mark.parametrize(
    "n_iter, also_at_completion, expected",
    [(5, True, [2, 4, 5]), (5, False, [2, 4]), (4, True, [2, 4])],
)
def test_every_and_evaluation_at_completion(n_iter, also_at_completion, expected):
    policy = Threshold()
    env = make_vec_env("CartPole-v1", 1, max_episode_steps=10)
    rollout = ValidationRollout(env, policy, num_episodes=1, every=2, seed=0, also_at_completion=also_at_completion)
    trainer = _trainer(policy, n_iter)
    rollout.attach(trainer)
    at, count = [], [0]

    def record(engine):  # attached after the rollout: sees whether it just evaluated
        if rollout.num_evaluations > count[0]:
            at.append(engine.state.iteration)
            count[0] = rollout.num_evaluations

    trainer.add_event_handler(Events.ITERATION_COMPLETED, record)
    trainer.add_event_handler(Events.COMPLETED, record)
    trainer.run(max_epochs=1)
    assert at == expected
    assert rollout.num_evaluations == len(expected)


def test_custom_event_prefix_and_every_override():
    policy = Threshold()
    rollout = ValidationRollout(
        make_vec_env("CartPole-v1", 1, max_episode_steps=10), policy, num_episodes=2, seed=1,
        event=Events.EPOCH_COMPLETED, prefix="greedy",
    )
    trainer = _trainer(policy, 3)
    rollout.attach(trainer)
    trainer.run(max_epochs=2)
    assert rollout.num_evaluations == 2  # once per Ignite epoch; COMPLETED follows the last one
    assert "greedy_return_mean" in trainer.state.metrics and "eval_return_mean" not in trainer.state.metrics


def test_state_dict_round_trip_weights_only():
    policy = Threshold()
    env = make_vec_env("CartPole-v1", 1, max_episode_steps=10)
    rollout = ValidationRollout(env, policy, num_episodes=2)
    rollout.evaluate()
    buf = io.BytesIO()
    torch.save(rollout.state_dict(), buf)
    buf.seek(0)
    other = ValidationRollout(env, policy, num_episodes=2, seed=123)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert (other.seed, other.num_evaluations, other.last) == (rollout.seed, 1, rollout.last)
    assert other.evaluate() == rollout.evaluate()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_episodes": 0}, ValueError, "ValidationRollout: argument num_episodes must be a positive int, got 0"),
        ({"seed": -1}, ValueError, "ValidationRollout: argument seed must be a non-negative int or None, got -1"),
        ({"seed": 1.5}, ValueError, "argument seed must be"),
        ({"every": 0}, ValueError, "ValidationRollout: argument every must be a positive int, got 0"),
        ({"policy": "greedy"}, TypeError, "ValidationRollout: argument policy must be callable, got str"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    kwargs = {"policy": Threshold(), **kwargs}
    with pytest.raises(error, match=match):
        ValidationRollout(None, **kwargs)


def test_metric_values_are_finite_numbers():
    env = make_vec_env("CartPole-v1", 2, max_episode_steps=15)
    rollout = ValidationRollout(env, Threshold(), num_episodes=4, seed=0)
    scores = rollout.evaluate()
    assert all(math.isfinite(v) for v in scores.values())
    assert scores["eval_return_max"] <= 15.0 and scores["eval_length_mean"] <= 15.0
