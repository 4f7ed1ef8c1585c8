"""Validation rollouts during training: whole episodes with a deterministic policy.

:class:`ValidationRollout` runs an evaluator (:func:`engine_rl.evaluation.create_evaluator`,
an Ignite ``Engine`` stepping with the collector's own code) on
``Events.ITERATION_COMPLETED(every=every)`` or every ``every_frames`` frames, and copies its
scores into the trainer's ``state.metrics`` as ``eval_*``, where loggers find them. Stock
handlers that act on scores (``EarlyStopping``, ``Checkpoint(score_function=...)``) attach to
``rollout.evaluator``, on ``Events.COMPLETED``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle

from engine_rl.checks import nonnegative_int, positive_int
from engine_rl.collectors.info import check_info_keys
from engine_rl.evaluation import Evaluator, create_evaluator
from engine_rl.finite import NonFiniteElsewhere, NonFiniteError
from handlers._attach import add_handler

__all__ = ["ValidationRollout"]


class ValidationRollout:
    """Evaluate ``policy`` on ``env`` for ``num_episodes`` episodes every ``every`` iterations
    (or every ``every_frames`` frames).

    Each evaluation is one run of :attr:`evaluator` (an :class:`~engine_rl.evaluation.Evaluator`):
    under ``torch.no_grad()`` with the policy in eval mode (its previous mode is restored
    afterwards). It sets these floats in ``engine.state.metrics``
    (``prefix="eval"``): ``eval_return_mean``, ``eval_return_std`` (population std, 0 for one
    episode), ``eval_return_min``, ``eval_return_max`` and ``eval_length_mean``, ``eval_info_<key>``
    for each of ``info_keys`` (the mean of ``info[key]`` at the episodes' last steps, e.g. a
    success rate), plus ``eval_frames`` (the trainer's frame count at evaluation time). The
    trainer gets no event; the evaluator fires its own (``Events.COMPLETED`` after each
    evaluation, with the unprefixed scores in ``evaluator.state.metrics``): attach
    ``EarlyStopping`` or a best-policy ``Checkpoint`` there.

    A NaN or Inf reward or observation in an evaluation episode stops the run: the
    :class:`~engine_rl.finite.NonFiniteError` of :func:`~engine_rl.collectors.run_episodes`
    (the key, the env copy, its episode and the step) is raised from the trainer's handler with
    the batch and the frames added, before the iteration's later handlers (its checkpoint) run.
    A score with a NaN in it would be no score of the policy, and skipping the episode would score
    the policy on the episodes the env happened to keep finite.

    Every evaluation resets the env with the **same seed**, so successive scores differ only
    because the policy changed, not because the episodes' start states did. With ``seed=None``
    that seed is drawn once, at construction, from torch's global generator (so
    ``torch.manual_seed`` fixes it too); it is saved in :meth:`state_dict` so a resumed run keeps
    evaluating on the same episodes.

    Args:
        env: a gymnasium vector env or a :class:`~engine_rl.envs.TorchEnv`, used only for
            evaluation (it is left mid-episode).
        policy: the deterministic (e.g. greedy) policy to score; it writes ``"action"`` into a
            TensorDict holding ``"observation"``.
        num_episodes: episodes per evaluation.
        every: events between evaluations; the default for :meth:`attach`.
        every_frames: evaluate instead after each iteration that reaches a multiple of this many
            frames (``engine.state.frames``), whatever the batch size; overrides ``every``/``event``.
        seed: the reset seed of every evaluation (``None``: drawn once, see above).
        event: the event evaluations hang on; the default for :meth:`attach`.
        also_at_completion: on ``Events.COMPLETED``, evaluate once more unless the last
            iteration was just evaluated, so a run always ends with a score of its final policy
            (a run stopped with ``terminate(skip_completed=True)`` — a pause — is not scored).
        prefix: metric names start with ``f"{prefix}_"``.
        device: the policy's device (``None``: from its parameters).
        info_keys: scalar entries of the env's ``info`` to average over the evaluated episodes'
            last steps (see :func:`~engine_rl.evaluation.create_evaluator`).

    Examples:
        >>> import torch
        >>> from engine_rl.collectors import make_vec_env
        >>> def push_left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> rollout = ValidationRollout(make_vec_env("CartPole-v1", 2), push_left, num_episodes=4, seed=0)
        >>> scores = rollout.evaluate()
        >>> sorted(scores)
        ['eval_length_mean', 'eval_return_max', 'eval_return_mean', 'eval_return_min', 'eval_return_std']
        >>> scores == rollout.evaluate()  # same seed, same policy: same episodes
        True
        >>> rollout.evaluator.state.metrics["return_mean"] == scores["eval_return_mean"]
        True
    """

    def __init__(
        self,
        env: Any,
        policy: Callable[..., Any],
        *,
        num_episodes: int = 10,
        every: int = 1,
        every_frames: int | None = None,
        seed: int | None = None,
        event: Any = Events.ITERATION_COMPLETED,
        also_at_completion: bool = True,
        prefix: str = "eval",
        device: torch.device | str | None = None,
        info_keys: Sequence[str] = (),
    ) -> None:
        if not callable(policy):
            raise TypeError(f"ValidationRollout: argument policy must be callable, got {type(policy).__name__}")
        num_episodes = positive_int(num_episodes, name="argument num_episodes", owner="ValidationRollout")
        seed = nonnegative_int(seed, name="argument seed", owner="ValidationRollout", optional=True)
        if seed is None:
            seed = int(torch.randint(2**30, ()).item())
        self.every = positive_int(every, name="argument every", owner="ValidationRollout")
        self.every_frames = positive_int(every_frames, name="argument every_frames", owner="ValidationRollout",
                                         optional=True)
        #: The evaluator each evaluation runs; attach score-based handlers to it.
        info_keys = check_info_keys(info_keys, owner="ValidationRollout")
        self.evaluator: Evaluator = create_evaluator(
            env, policy, num_episodes=num_episodes, seed=seed, device=device, info_keys=info_keys
        )
        self.event = event
        self.also_at_completion = also_at_completion
        self.prefix = prefix
        self.num_evaluations = 0
        self.last: dict[str, float] = {}
        self._last_iteration: int | None = None
        self._next_frames = self.every_frames  # frames at which the next every_frames evaluation is due

    # the evaluator's settings, readable and writable here
    @property
    def env(self) -> Any:
        return self.evaluator.env

    @property
    def policy(self) -> Callable[..., Any]:
        return self.evaluator.policy

    @property
    def num_episodes(self) -> int:
        return self.evaluator.num_episodes

    @property
    def seed(self) -> int:
        return self.evaluator.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self.evaluator.seed = value

    @property
    def device(self) -> torch.device | str | None:
        return self.evaluator.device

    def evaluate(self) -> dict[str, float]:
        """Run the evaluator now and return the prefixed scores (also kept in :attr:`last`)."""
        metrics = self.evaluator.run().metrics
        self.last = {f"{self.prefix}_{name}": float(metrics[name]) for name in self.evaluator.metric_names}
        self.num_evaluations += 1
        return self.last

    def __call__(self, engine: Engine) -> None:
        frames = int(getattr(engine.state, "frames", 0))
        try:
            scores = self.evaluate()
        except NonFiniteElsewhere:  # another rank's evaluation: that rank says where
            raise
        except NonFiniteError as err:  # evaluation data is never skipped: stop, naming when
            detail = str(err).removeprefix("run_episodes: ")
            raise NonFiniteError(
                f"ValidationRollout: {detail}, in the evaluation after batch {engine.state.iteration} (frames {frames})"
            ) from err
        engine.state.metrics.update(scores)
        # when the scores were taken: MetricsLogger writes an eval line whenever this changes
        engine.state.metrics[f"{self.prefix}_frames"] = frames
        self._last_iteration = engine.state.iteration
        if self.every_frames is not None:
            self._next_frames = (frames // self.every_frames + 1) * self.every_frames

    def _frames_due(self, engine: Engine, _: int) -> bool:
        return int(getattr(engine.state, "frames", 0)) >= self._next_frames

    def _at_completion(self, engine: Engine) -> None:
        if self._last_iteration != engine.state.iteration:
            self(engine)

    def attach(
        self, engine: Engine, *, event: Any = None, every: int | None = None
    ) -> RemovableEventHandle:
        """Evaluate on ``event`` every ``every`` times (defaults: the constructor's) — or, with
        ``every_frames``, after each iteration reaching a multiple of it — and at
        ``Events.COMPLETED`` if ``also_at_completion``. Returns the handle of the periodic one."""
        if self.every_frames is not None and event is None and every is None:
            handle = add_handler(
                engine, self, Events.ITERATION_COMPLETED(event_filter=self._frames_due), 1, owner="ValidationRollout"
            )
        else:
            event = self.event if event is None else event
            handle = add_handler(engine, self, event, self.every if every is None else every, owner="ValidationRollout")
        if self.also_at_completion:
            engine.add_event_handler(Events.COMPLETED, self._at_completion)
        return handle

    def state_dict(self) -> dict[str, Any]:
        """The evaluation seed, the number of evaluations, the last scores and when they were
        taken (numbers only)."""
        return {
            "seed": self.seed, "num_evaluations": self.num_evaluations, "last": dict(self.last),
            "last_iteration": -1 if self._last_iteration is None else self._last_iteration,
            "next_frames": -1 if self._next_frames is None else self._next_frames,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seed = int(state_dict["seed"])
        self.num_evaluations = int(state_dict["num_evaluations"])
        self.last = {str(k): float(v) for k, v in state_dict.get("last", {}).items()}
        last_iteration = int(state_dict.get("last_iteration", -1))
        self._last_iteration = None if last_iteration < 0 else last_iteration
        next_frames = int(state_dict.get("next_frames", -1))
        if next_frames >= 0:
            self._next_frames = next_frames
