"""The evaluator engine, ValidationRollout driving it, and stock Ignite handlers on both engines."""

import pytest
import torch
from ignite.engine import Events
from ignite.handlers import (
    Checkpoint,
    EarlyStopping,
    HandlersTimeProfiler,
    ProgressBar,
    TerminateOnNan,
    Timer,
    global_step_from_engine,
)
from tensordict import TensorDict

from engine_rl import RLEvents, create_evaluator, create_trainer
from engine_rl.collectors import make_vec_env, run_episodes
from engine_rl.envs import CartPole
from engine_rl.evaluation import EVAL_METRICS, Evaluator
from engine_rl.run.checkpoint import AtomicDiskSaver, load_checkpoint
from handlers import ValidationRollout


class Threshold(torch.nn.Module):
    """Deterministic CartPole policy: push towards the pole's lean, plus a bias (5: always right)."""

    def __init__(self, bias=0.0):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(float(bias)))
        self.modes = []

    def forward(self, td):
        self.modes.append((self.training, torch.is_grad_enabled()))
        obs = td["observation"]
        return td.set("action", (obs[:, 2] + obs[:, 3] + self.bias > 0).long())


def cartpole(n=2, steps=100):
    return make_vec_env("CartPole-v1", n, max_episode_steps=steps)


def trainer_over(policy, n_iter, *, loss=None, batch=4):
    data = [TensorDict({"x": torch.ones(batch, 1)}, [batch])] * n_iter
    loss = loss or (lambda td: {"loss": policy.bias * 0.0})
    return create_trainer(data, loss, torch.optim.SGD(policy.parameters(), lr=0.1))


def set_bias_each_iteration(trainer, policy, biases):
    @trainer.on(Events.ITERATION_COMPLETED)
    def _(engine):
        with torch.no_grad():
            policy.bias.fill_(biases[engine.state.iteration - 1])


def test_evaluator_is_an_engine_whose_run_scores_the_policy_like_run_episodes():
    policy = Threshold()
    evaluator = create_evaluator(cartpole(), policy, num_episodes=5, seed=3)
    assert isinstance(evaluator, Evaluator)
    events = []
    for event in (Events.STARTED, Events.ITERATION_COMPLETED, Events.COMPLETED):
        evaluator.add_event_handler(event, lambda e, ev=event: events.append(ev))
    state = evaluator.run()
    assert events == [Events.STARTED, Events.ITERATION_COMPLETED, Events.COMPLETED]  # one iteration per run
    assert all(mode == (False, False) for mode in policy.modes) and policy.training  # eval mode, no grad, restored

    ref = run_episodes(cartpole(), policy, 5, seed=3)
    r = ref["return"].double()
    assert set(state.metrics) == set(EVAL_METRICS) and all(isinstance(v, float) for v in state.metrics.values())
    assert state.metrics["return_mean"] == pytest.approx(r.mean().item())
    assert state.metrics["return_std"] == pytest.approx(r.std(correction=0).item())
    assert (state.metrics["return_min"], state.metrics["return_max"]) == (r.min().item(), r.max().item())
    assert state.metrics["length_mean"] == pytest.approx(ref["length"].double().mean().item())
    assert torch.equal(state.output["return"], ref["return"])


def test_runs_repeat_with_the_same_seed_and_settings_can_change_between_runs():
    policy = Threshold()
    evaluator = create_evaluator(cartpole(3), policy, num_episodes=4, seed=0)
    first = dict(evaluator.run().metrics)
    assert dict(evaluator.run().metrics) == first and evaluator.state.iteration == 1
    evaluator.num_episodes, evaluator.seed = 7, 11
    assert evaluator.run().output["return"].shape == (7,)
    with torch.no_grad():
        policy.bias.fill_(5.0)
    evaluator.num_episodes, evaluator.seed = 4, 0
    assert evaluator.run().metrics["return_mean"] < first["return_mean"]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"env": None}, TypeError, "create_evaluator: argument env must be a gymnasium vector env, got None"),
        ({"policy": 3}, TypeError, "create_evaluator: argument policy must be callable, got int"),
        ({"num_episodes": 0}, ValueError, "create_evaluator: argument num_episodes must be a positive int, got 0"),
        ({"seed": -2}, ValueError, "create_evaluator: argument seed must be a non-negative int or None, got -2"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    kwargs = {"env": "env", "policy": Threshold(), **kwargs}
    env, policy = kwargs.pop("env"), kwargs.pop("policy")
    with pytest.raises(error, match=match):
        create_evaluator(env, policy, **kwargs)


def test_validation_rollout_runs_its_evaluator_and_copies_the_scores():
    policy = Threshold()
    rollout = ValidationRollout(cartpole(), policy, num_episodes=3, every=2, seed=1)
    completed = []
    rollout.evaluator.add_event_handler(Events.COMPLETED, lambda e: completed.append(e.state.metrics["return_mean"]))
    trainer = trainer_over(policy, 4)
    rollout.attach(trainer)
    trainer.run(max_epochs=1)
    assert rollout.num_evaluations == len(completed) == 2
    assert trainer.state.metrics["eval_return_mean"] == completed[-1]
    assert {f"eval_{k}" for k in EVAL_METRICS} <= set(trainer.state.metrics)


def test_a_torch_env_is_evaluated_with_its_own_quota_of_episodes_and_by_validation_rollout():
    env = CartPole(num_envs=3, max_episode_steps=100)
    balanced = run_episodes(env, Threshold(), num_episodes=5, seed=0)
    always_right = run_episodes(env, Threshold(bias=5.0), num_episodes=5, seed=0)
    assert balanced["return"].shape == (5,) and balanced["length"].dtype == torch.int64
    assert torch.equal(balanced["return"], balanced["length"].float())  # CartPole pays 1 per step
    assert (balanced["length"] == 100).all()  # the threshold policy balances until the time limit
    assert (always_right["length"] < 30).all()  # pushing one way drops the pole fast
    assert torch.equal(run_episodes(env, Threshold(bias=5.0), num_episodes=5, seed=0)["return"], always_right["return"])
    with pytest.raises(ValueError, match=r"info_keys \('x',\) need a gymnasium env; a TorchEnv reports no info"):
        run_episodes(env, Threshold(), num_episodes=2, info_keys=("x",))

    policy = Threshold(bias=5.0)
    rollout = ValidationRollout(CartPole(num_envs=2), policy, num_episodes=4, every=1, seed=1)
    trainer = trainer_over(policy, 2)
    rollout.attach(trainer)
    trainer.run(max_epochs=1)
    assert rollout.num_evaluations == 2 and trainer.state.metrics["eval_return_mean"] < 30


def test_validation_every_frames_evaluates_when_a_multiple_is_reached_and_resumes():
    policy = Threshold()
    rollout = ValidationRollout(cartpole(1, 10), policy, num_episodes=1, every_frames=10, seed=0,
                                also_at_completion=False)
    trainer = trainer_over(policy, 8)  # 4 frames per batch
    rollout.attach(trainer)
    at = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: at.append(e.state.metrics.get("eval_frames")))
    trainer.run(max_epochs=1)
    assert sorted({f for f in at if f}) == [12, 20, 32]
    other = ValidationRollout(cartpole(1, 10), policy, num_episodes=1, every_frames=10, seed=0)
    other.load_state_dict(rollout.state_dict())
    assert other._next_frames == 40 and other._last_iteration == 8
    with pytest.raises(ValueError, match="argument every_frames must be a positive int or None, got 0"):
        ValidationRollout(cartpole(), policy, every_frames=0)


def test_early_stopping_on_the_evaluator_ends_the_run_when_the_return_stops_improving():
    policy = Threshold()
    rollout = ValidationRollout(cartpole(2, 200), policy, num_episodes=2, seed=0)
    trainer = trainer_over(policy, 20)
    set_bias_each_iteration(trainer, policy, [0.0] + [5.0] * 19)  # good once, then always worse
    rollout.attach(trainer)
    stopper = EarlyStopping(patience=3, score_function=lambda e: e.state.metrics["return_mean"], trainer=trainer)
    rollout.evaluator.add_event_handler(Events.COMPLETED, stopper)
    trainer.run(max_epochs=1)
    assert trainer.state.iteration == 4  # best at 1, no improvement at 2, 3, 4: stopped
    assert stopper.counter == 3 and rollout.num_evaluations == 4  # no extra evaluation at completion


def test_best_checkpoint_holds_the_policy_that_scored_best(tmp_path):
    policy = Threshold()
    rollout = ValidationRollout(cartpole(2, 200), policy, num_episodes=3, seed=5)
    trainer = trainer_over(policy, 5)
    set_bias_each_iteration(trainer, policy, [5.0, 0.0, 0.4, -0.4, 5.0])
    rollout.attach(trainer)
    scores = []
    rollout.evaluator.add_event_handler(Events.COMPLETED, lambda e: scores.append(e.state.metrics["return_mean"]))
    best = Checkpoint(
        {"policy": policy}, AtomicDiskSaver(tmp_path), n_saved=1, filename_prefix="best", score_name="return_mean",
        global_step_transform=global_step_from_engine(trainer, Events.ITERATION_COMPLETED),
    )
    rollout.evaluator.add_event_handler(Events.COMPLETED, best)
    trainer.run(max_epochs=1)
    assert len(scores) == 5 and len(set(scores)) > 2
    [saved] = list(tmp_path.glob("best_*.pt"))
    step = scores.index(max(scores)) + 1
    assert saved.name == f"best_policy_{step}_return_mean={max(scores):.4f}.pt"
    reloaded = Threshold(bias=123.0)
    reloaded.load_state_dict(load_checkpoint(saved))
    again = create_evaluator(cartpole(2, 200), reloaded, num_episodes=3, seed=5).run()
    assert again.metrics["return_mean"] == max(scores)


def test_stock_handlers_on_the_trainer_with_custom_events(capsys):
    net = torch.nn.Linear(3, 1)
    data = [TensorDict({"x": torch.ones(8, 3)}, [8])] * 6
    losses = iter([1.0, 2.0, float("nan")] + [1.0] * 20)

    def loss(td):
        return {"loss": net(td["x"]).pow(2).mean() * 0 + next(losses)}

    trainer = create_trainer(data, loss, torch.optim.SGD(net.parameters(), lr=0.1), optim_steps_per_batch=1)
    timer = Timer(average=True)
    timer.attach(trainer, start=Events.STARTED, resume=RLEvents.SAMPLE_REQUESTED,
                 pause=RLEvents.OPTIM_STEP_DONE, step=RLEvents.OPTIM_STEP_DONE)
    seen = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.batches))
    profiler = HandlersTimeProfiler()
    profiler.attach(trainer)
    ProgressBar(persist=False).attach(trainer)  # built-in events: fine
    with pytest.raises(ValueError, match="is not in list"):  # custom events: documented limitation
        ProgressBar().attach(trainer_over(Threshold(), 1), event_name=RLEvents.BATCH_COLLECTED)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())
    trainer.run(max_epochs=1)
    assert trainer.state.iteration == 3  # the NaN loss of iteration 3 stopped the run
    assert timer.step_count == 3 and timer.value() > 0
    rows = [(row[0], row[1]) for row in profiler.get_results()]
    assert any(name.endswith("<lambda>") and event == "BATCH_COLLECTED" for name, event in rows)  # custom events too
    assert global_step_from_engine(trainer, RLEvents.BATCH_COLLECTED)(None, Events.COMPLETED) == 3


# -- a NaN in evaluation stops it, naming the env copy, the key, the episode and the step ----------
def _poisoned(copies, *, nan_copy, at, what="reward"):
    """A 2+-copy CartPole vector env whose copy ``nan_copy`` returns a NaN reward (or observation)
    at step ``at`` of every episode."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    class Poison(gym.Wrapper):
        def reset(self, **kwargs):
            self.t = 0
            return self.env.reset(**kwargs)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.t += 1
            if self.t == at:
                if what == "reward":
                    reward = float("nan")
                else:
                    obs = obs.copy()
                    obs[1] = float("inf")
            return obs, reward, terminated, truncated, info

    def make(i):
        return lambda: Poison(gym.make("CartPole-v1")) if i == nan_copy else gym.make("CartPole-v1")

    return gym.vector.SyncVectorEnv([make(i) for i in range(copies)], autoreset_mode=AutoresetMode.SAME_STEP)


def test_a_nan_reward_in_evaluation_raises_naming_the_env_copy_the_key_the_episode_and_the_step():
    from engine_rl.finite import NonFiniteError

    with pytest.raises(NonFiniteError, match=r"^run_episodes: non-finite value \(NaN or Inf\) in key 'next\.reward' of "
                                             r"evaluation env copy 1 of 2 at step 5 of its episode 1$"):
        run_episodes(_poisoned(2, nan_copy=1, at=5), Threshold(), 4, seed=0)
    # an observation: reported at the step whose action it chose (the next one)
    evaluator = create_evaluator(_poisoned(3, nan_copy=2, at=7, what="observation"), Threshold(), num_episodes=3,
                                 seed=0)
    with pytest.raises(NonFiniteError, match=r"in key 'observation' of evaluation env copy 2 of 3 at step 8 of its "
                                             r"episode 1$"):
        evaluator.run()
    # a copy past its quota (num_episodes=1: only copy 0 counts) plays on for nothing: its NaN is no score's
    assert run_episodes(_poisoned(2, nan_copy=1, at=5), Threshold(), 1, seed=0)["return"].isfinite().all()


def test_a_nan_in_a_torch_env_evaluation_raises_too():
    from engine_rl.finite import NonFiniteError

    class NaNCartPole(CartPole):
        def step(self, action):
            obs, reward, terminated, truncated = super().step(action)
            self.t = getattr(self, "t", 0) + 1
            if self.t == 4:
                reward = reward.clone()
                reward[1] = float("nan")
            return obs, reward, terminated, truncated

    with pytest.raises(NonFiniteError, match=r"^run_episodes: non-finite value \(NaN or Inf\) in key 'next\.reward' of "
                                             r"evaluation env copy 1 of 3 at step 4 of its episode 1$"):
        run_episodes(NaNCartPole(num_envs=3), Threshold(), num_episodes=3, seed=0)


def test_validation_rollout_stops_the_run_at_a_nan_evaluation_naming_the_batch_and_frames():
    from engine_rl.finite import NonFiniteError

    policy = Threshold()
    rollout = ValidationRollout(_poisoned(2, nan_copy=0, at=3), policy, num_episodes=2, every=2, seed=0)
    trainer = trainer_over(policy, 4)
    rollout.attach(trainer)
    after = []
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: after.append(e.state.iteration))  # a checkpoint
    with pytest.raises(NonFiniteError) as caught:
        trainer.run(max_epochs=1)
    assert str(caught.value) == (
        "ValidationRollout: non-finite value (NaN or Inf) in key 'next.reward' of evaluation env copy 0 of 2 at step 3 "
        "of its episode 1, in the evaluation after batch 2 (frames 8)"
    )
    assert after == [1] and "eval_return_mean" not in trainer.state.metrics  # no later handler saw a score
