"""Validation rollouts during training: whole episodes with a deterministic policy.

:class:`ValidationRollout` runs :func:`engine_rl.collectors.run_episodes` (the collector's own
step code) on ``Events.ITERATION_COMPLETED(every=every)`` and writes the scores into
``engine.state.metrics``, where loggers, ``EarlyStopping`` and ``Checkpoint(score_function=...)``
find them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle
from torch import nn

from engine_rl.collectors import run_episodes
from handlers._attach import add_handler, check_every

__all__ = ["ValidationRollout"]


class ValidationRollout:
    """Evaluate ``policy`` on ``env`` for ``num_episodes`` episodes every ``every`` iterations.

    Each evaluation runs under ``torch.no_grad()`` with the policy in eval mode (its previous
    mode is restored afterwards) and sets these floats in ``engine.state.metrics``
    (``prefix="eval"``): ``eval_return_mean``, ``eval_return_std`` (population std, 0 for one
    episode), ``eval_return_min``, ``eval_return_max`` and ``eval_length_mean``, plus ``eval_frames`` (the
    trainer's frame count at evaluation time). It fires no event.

    Every evaluation resets the env with the **same seed**, so successive scores differ only
    because the policy changed, not because the episodes' start states did. With ``seed=None``
    that seed is drawn once, at construction, from torch's global generator (so
    ``torch.manual_seed`` fixes it too); it is saved in :meth:`state_dict` so a resumed run keeps
    evaluating on the same episodes.

    Args:
        env: a gymnasium vector env used only for evaluation (it is left mid-episode).
        policy: the deterministic (e.g. greedy) policy to score; it writes ``"action"`` into a
            TensorDict holding ``"observation"``.
        num_episodes: episodes per evaluation.
        every: events between evaluations; the default for :meth:`attach`.
        seed: the reset seed of every evaluation (``None``: drawn once, see above).
        event: the event evaluations hang on; the default for :meth:`attach`.
        also_at_completion: on ``Events.COMPLETED``, evaluate once more unless the last
            iteration was just evaluated, so a run always ends with a score of its final policy.
        prefix: metric names start with ``f"{prefix}_"``.
        device: the policy's device (``None``: from its parameters).

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
    """

    def __init__(
        self,
        env: Any,
        policy: Callable[..., Any],
        *,
        num_episodes: int = 10,
        every: int = 1,
        seed: int | None = None,
        event: Any = Events.ITERATION_COMPLETED,
        also_at_completion: bool = True,
        prefix: str = "eval",
        device: torch.device | str | None = None,
    ) -> None:
        if not callable(policy):
            raise TypeError(f"ValidationRollout: argument policy must be callable, got {type(policy).__name__}")
        if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
            raise ValueError(f"ValidationRollout: argument num_episodes must be a positive int, got {num_episodes!r}")
        if seed is None:
            seed = int(torch.randint(2**30, ()).item())
        elif isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"ValidationRollout: argument seed must be a non-negative int or None, got {seed!r}")
        self.env = env
        self.policy = policy
        self.num_episodes = num_episodes
        self.every = check_every(every, owner="ValidationRollout")
        self.seed = seed
        self.event = event
        self.also_at_completion = also_at_completion
        self.prefix = prefix
        self.device = device
        self.num_evaluations = 0
        self.last: dict[str, float] = {}
        self._last_iteration: int | None = None

    def evaluate(self) -> dict[str, float]:
        """Run the episodes now and return the scores (also kept in :attr:`last`)."""
        module = self.policy if isinstance(self.policy, nn.Module) else None
        was_training = module.training if module is not None else False
        try:
            if module is not None:
                module.eval()
            with torch.no_grad():
                res = run_episodes(self.env, self.policy, self.num_episodes, seed=self.seed, device=self.device)
        finally:
            if module is not None:
                module.train(was_training)
        returns = res["return"].double()
        stats = torch.stack(
            [returns.mean(), returns.std(correction=0), returns.min(), returns.max(), res["length"].double().mean()]
        ).tolist()
        names = ("return_mean", "return_std", "return_min", "return_max", "length_mean")
        self.last = {f"{self.prefix}_{name}": value for name, value in zip(names, stats)}
        self.num_evaluations += 1
        return self.last

    def __call__(self, engine: Engine) -> None:
        engine.state.metrics.update(self.evaluate())
        # when the scores were taken: MetricsLogger writes an eval line whenever this changes
        engine.state.metrics[f"{self.prefix}_frames"] = int(getattr(engine.state, "frames", 0))
        self._last_iteration = engine.state.iteration

    def _at_completion(self, engine: Engine) -> None:
        if self._last_iteration != engine.state.iteration:
            self(engine)

    def attach(
        self, engine: Engine, *, event: Any = None, every: int | None = None
    ) -> RemovableEventHandle:
        """Evaluate on ``event`` every ``every`` times (defaults: the constructor's), and at
        ``Events.COMPLETED`` if ``also_at_completion``. Returns the handle of the periodic one."""
        event = self.event if event is None else event
        handle = add_handler(engine, self, event, self.every if every is None else every, owner="ValidationRollout")
        if self.also_at_completion:
            engine.add_event_handler(Events.COMPLETED, self._at_completion)
        return handle

    def state_dict(self) -> dict[str, Any]:
        """The evaluation seed, the number of evaluations and the last scores (numbers only)."""
        return {"seed": self.seed, "num_evaluations": self.num_evaluations, "last": dict(self.last)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seed = int(state_dict["seed"])
        self.num_evaluations = int(state_dict["num_evaluations"])
        self.last = {str(k): float(v) for k, v in state_dict.get("last", {}).items()}
