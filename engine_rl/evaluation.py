"""The evaluator: an Ignite ``Engine`` whose run plays whole episodes with a deterministic policy.

One ``evaluator.run()`` is one evaluation: a single iteration that calls
:func:`engine_rl.collectors.run_episodes` (the collector's own :class:`GymStepper` steps, no
second rollout loop) with the policy in eval mode under ``torch.no_grad()``, and fills
``evaluator.state.metrics`` with ``return_mean``, ``return_std``, ``return_min``,
``return_max`` and ``length_mean``. Every run resets the env with the same ``seed``, so scores
of successive runs differ only because the policy changed. A NaN or Inf reward or observation in
an episode stops the run with :class:`~engine_rl.finite.NonFiniteError` naming the env copy, the
key, the episode and the step (a NaN score would not rank the policy), and an episode that runs
past :data:`~engine_rl.collectors.step_cap.LONG_EPISODE_STEPS` steps is said with a
:class:`~engine_rl.collectors.step_cap.LongEvaluationWarning`. During training,
:class:`handlers.ValidationRollout` runs it every N iterations or frames and copies the metrics
onto the trainer as ``eval_*``.

Stock Ignite handlers
---------------------
Attach them as in supervised training; scores are on the evaluator, the run to stop is the
trainer's:

=============================  ==========================================================================
handler                        how
=============================  ==========================================================================
``EarlyStopping``              ``evaluator.add_event_handler(Events.COMPLETED, EarlyStopping(patience,
                               score_function=lambda e: e.state.metrics["return_mean"], trainer=trainer))``
``Checkpoint`` (best policy)   ``Checkpoint({"policy": policy}, saver, n_saved=1, score_name="return_mean",
                               global_step_transform=global_step_from_engine(trainer))`` on ``COMPLETED``
``Checkpoint`` (last)          on the trainer, ``Events.ITERATION_COMPLETED(every=k)``; its ``to_save`` from
                               :func:`engine_rl.run.checkpoint.training_state`
``Timer``                      any events, custom ones too: ``Timer().attach(trainer,
                               step=RLEvents.OPTIM_STEP_DONE)``
``TerminateOnNan``             ``trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())``
                               (checks ``state.output``, the iteration's mean losses)
``HandlersTimeProfiler``       ``HandlersTimeProfiler().attach(trainer)``; profiles custom-event handlers
                               too (filtered handlers faster than 15 µs show as "not triggered": Ignite's
                               threshold for telling a filtered-out call from a real one)
``ProgressBar``                built-in events only: ``ProgressBar().attach(trainer)`` (per batch).
                               ``attach(event_name=RLEvents...)`` raises "is not in list"; for a bar
                               over frames use :class:`handlers.FramesProgressBar`
``BasicTimeProfiler``          profiles built-in events only; use ``HandlersTimeProfiler`` to see
                               handlers on ``RLEvents``
``global_step_from_engine``    works with custom events: ``global_step_from_engine(trainer,
                               RLEvents.BATCH_COLLECTED)`` gives ``trainer.state.batches``
=============================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from engine_rl.checks import nonnegative_int, positive_int
from engine_rl.collectors import Policy, run_episodes
from engine_rl.collectors.info import check_info_keys
from engine_rl.engine import RecordingEngine

__all__ = ["EVAL_METRICS", "Evaluator", "create_evaluator"]

#: Names of the metrics an evaluation writes into ``evaluator.state.metrics``.
EVAL_METRICS: tuple[str, ...] = ("return_mean", "return_std", "return_min", "return_max", "length_mean")


class Evaluator(RecordingEngine):
    """An Ignite ``Engine`` that evaluates ``policy`` on ``env``; build it with :func:`create_evaluator`.

    ``run()`` takes no data: it runs one iteration, one evaluation. ``num_episodes``, ``seed``
    and ``policy`` are plain attributes and may be changed between runs. ``state.output`` is
    ``{"return": float32 [num_episodes], "length": int64 [num_episodes]}``.
    """

    def __init__(
        self,
        env: Any,
        policy: Policy,
        *,
        num_episodes: int,
        seed: int | None,
        device: torch.device | str | None,
        info_keys: Sequence[str] = (),
    ) -> None:
        super().__init__(Evaluator._evaluate)
        self.env = env
        self.policy = policy
        self.num_episodes = num_episodes
        self.seed = seed
        self.device = device
        self.info_keys: tuple[str, ...] = check_info_keys(info_keys, owner="create_evaluator")

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The names a run writes into ``state.metrics``: :data:`EVAL_METRICS` and ``info_<key>``."""
        return EVAL_METRICS + tuple(f"info_{key}" for key in self.info_keys)

    def run(  # type: ignore[override]
        self,
        data: Iterable[Any] | None = None,
        max_epochs: int | None = None,
        max_iters: int | None = None,
        epoch_length: int | None = None,
    ):
        """Run one evaluation (Ignite's arguments are accepted; the defaults give one iteration)."""
        if data is None:
            data = [None]
        if max_epochs is None and max_iters is None:
            max_epochs = 1
        return super().run(data, max_epochs=max_epochs, max_iters=max_iters, epoch_length=epoch_length)

    @staticmethod
    def _evaluate(engine: Evaluator, _: Any) -> dict[str, torch.Tensor]:
        self = engine
        module = self.policy if isinstance(self.policy, nn.Module) else None
        was_training = module.training if module is not None else False
        try:
            if module is not None:
                module.eval()
            with torch.no_grad():
                res = run_episodes(self.env, self.policy, self.num_episodes, seed=self.seed, device=self.device,
                                   info_keys=self.info_keys)
        finally:
            if module is not None:
                module.train(was_training)
        returns = res["return"].double()
        stats = torch.stack(
            [returns.mean(), returns.std(correction=0), returns.min(), returns.max(), res["length"].double().mean()]
        ).tolist()
        self.state.metrics.update(zip(EVAL_METRICS, stats))
        for key in self.info_keys:  # mean over the episodes whose last step reported it (NaN if none)
            self.state.metrics[f"info_{key}"] = float(res[f"info_{key}"].nanmean())
        return res


def create_evaluator(
    env: Any,
    policy: Policy,
    *,
    num_episodes: int = 10,
    seed: int | None = None,
    device: torch.device | str | None = None,
    info_keys: Sequence[str] = (),
) -> Evaluator:
    """Build an evaluator: an Ignite ``Engine`` whose ``run()`` plays ``num_episodes`` episodes.

    The policy runs in eval mode (its mode is restored afterwards) under ``torch.no_grad()``;
    give the deterministic one (greedy Q, the mean action). Metrics (floats) in
    ``evaluator.state.metrics``: ``return_mean``, ``return_std`` (population std, 0 for one
    episode), ``return_min``, ``return_max``, ``length_mean``, and ``info_<key>`` for each of
    ``info_keys``: the mean of the env's ``info[key]`` at the episodes' last steps (e.g. a
    success rate from ``"is_success"``; episodes that did not report it are left out, NaN if
    none did). Stock Ignite handlers attach to it (see the module docstring).

    Args:
        env: a gymnasium vector env or a :class:`~engine_rl.envs.TorchEnv`, used only for
            evaluation (each run resets it; it is left mid-episode).
        policy: writes ``"action"`` into a TensorDict holding ``"observation"``.
        num_episodes: episodes per run (a positive int); episodes are assigned to env copies up
            front, see :func:`~engine_rl.collectors.run_episodes`.
        seed: reset seed of every run (copy ``i`` gets ``seed + i``); ``None``: unseeded, so
            runs differ.
        device: the policy's device (``None``: from its parameters).
        info_keys: scalar ``info`` entries to average over the episodes' last steps.

    Examples:
        >>> import torch
        >>> from ignite.engine import Events
        >>> from engine_rl.collectors import make_vec_env
        >>> def push_left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> evaluator = create_evaluator(make_vec_env("CartPole-v1", 2), push_left, num_episodes=4, seed=0)
        >>> seen = []
        >>> _ = evaluator.add_event_handler(Events.COMPLETED, lambda e: seen.append(e.state.metrics["return_mean"]))
        >>> state = evaluator.run()
        >>> sorted(state.metrics)
        ['length_mean', 'return_max', 'return_mean', 'return_min', 'return_std']
        >>> state.output["return"].shape, evaluator.run().metrics["return_mean"] == seen[0], len(seen)
        (torch.Size([4]), True, 2)
    """
    if env is None:
        raise TypeError("create_evaluator: argument env must be a gymnasium vector env, got None")
    if not callable(policy):
        raise TypeError(f"create_evaluator: argument policy must be callable, got {type(policy).__name__}")
    num_episodes = positive_int(num_episodes, name="argument num_episodes", owner="create_evaluator")
    seed = nonnegative_int(seed, name="argument seed", owner="create_evaluator", optional=True)
    return Evaluator(env, policy, num_episodes=num_episodes, seed=seed, device=device, info_keys=info_keys)
