"""Store n-step transitions in a replay buffer: a thin adapter over :class:`engine_rl.replay.NStepBuilder`.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from engine_rl import create_trainer
    >>> from engine_rl.replay import ReplayBuffer
    >>> from handlers import ReplaySampler
    >>> def frames(num_envs=2, steps=4):
    ...     flags = torch.zeros(num_envs, steps, dtype=torch.bool)
    ...     return TensorDict({"observation": torch.zeros(num_envs, steps, 1),
    ...                        "next": {"observation": torch.zeros(num_envs, steps, 1), "reward": torch.ones(num_envs, steps),
    ...                                 "terminated": flags, "truncated": flags}}, [num_envs, steps])
    >>> net = torch.nn.Linear(1, 1)
    >>> def loss(td):  # a stand-in for DQNLoss: r + discount * V(s')
    ...     target = td["next", "reward"] + td["next", "discount"] * net(td["next", "observation"]).squeeze(-1)
    ...     return {"loss": (net(td["observation"]).squeeze(-1) - target.detach()).pow(2).mean()}
    >>> trainer = create_trainer([frames()] * 3, loss, torch.optim.SGD(net.parameters(), lr=0.1))
    >>> buffer = ReplayBuffer(100, seed=0)
    >>> nstep = NStepTransitions(buffer, n=3, gamma=0.5, num_envs=2).attach(trainer)
    >>> _ = ReplaySampler(buffer, batch_size=4).attach(trainer)
    >>> _ = trainer.run(max_epochs=1)
    >>> len(buffer), nstep.builder.pending, trainer.state.batch.batch_size  # 12 frames, 2 per copy wait
    (20, [2, 2], torch.Size([2, 4]))
    >>> buffer.sample(2)["next", "reward"].tolist(), buffer.sample(1)["next", "discount"].item()
    ([1.75, 1.75], 0.125)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ignite.engine import Engine
from ignite.engine.events import RemovableEventHandle

from engine_rl.events import RLEvents
from engine_rl.keys import NestedKey
from engine_rl.replay.nstep import NStepBuilder
from handlers._attach import add_handler
from handlers.replay import ReplayExtender

__all__ = ["NStepTransitions"]


class NStepTransitions:
    """Fold each collected batch into n-step transitions and store them in a replay buffer.

    On ``RLEvents.BATCH_COLLECTED`` calls ``buffer.extend(builder.push(state.batch))`` (see
    :class:`~engine_rl.replay.NStepBuilder` for the rows: the summed discounted reward, the
    window's last ``("next", ...)`` entries and ``("next", "discount")``) and sets
    ``state.metrics["replay_size"]``. It takes the place of a :class:`ReplayExtender` (attach one
    or the other to a buffer, not both). ``state.batch`` stays the collected frames, so episode
    statistics and handlers after it see the env's own steps. Attach it after the handlers that
    change the batch for replay (e.g. :class:`RewardClipper`): their frames are summed. The open
    windows of each env copy (its last ``n - 1`` frames at most) are in :meth:`state_dict`, so a
    checkpoint taken mid-window resumes them (``training_state`` finds the handler).

    Args:
        buffer: a :class:`~engine_rl.replay.ReplayBuffer` (or any object with ``extend`` and ``len``);
            prioritized sampling gives the n-step rows priorities as any rows.
        n: frames per transition (>= 1; 1 stores the frames as they are, with their discount).
        gamma: discount factor in [0, 1], the loss's.
        num_envs: env copies (the batch's first dim, ``[num_envs, T]``).
        keys: the entries to store (``None``: all; ``("next", "discount")`` is added to the list).
    """

    def __init__(
        self, buffer: Any, *, n: int, gamma: float, num_envs: int, keys: Sequence[NestedKey] | None = None
    ) -> None:
        self.builder = NStepBuilder(n, gamma=gamma, num_envs=num_envs)
        if keys is not None and not isinstance(keys, (str, tuple)):
            keys = [*keys, ("next", "discount")]
        self.extender = ReplayExtender(buffer, keys=keys)

    @property
    def buffer(self) -> Any:
        """The replay buffer."""
        return self.extender.buffer

    def extend(self, batch: Any) -> int:
        """Store the transitions ``batch`` completes; returns the buffer's size."""
        return self.extender.extend(self.builder.push(batch))

    def __call__(self, engine: Engine) -> None:
        engine.state.metrics["replay_size"] = self.extend(engine.state.batch)

    def attach(self, engine: Engine, *, event: Any = RLEvents.BATCH_COLLECTED, every: int = 1) -> NStepTransitions:
        """Call :meth:`extend` on ``event``; returns this handler (its ``builder`` for inspection)."""
        self.handle: RemovableEventHandle = add_handler(
            engine, self, event, every, owner="NStepTransitions", exclusive=self.buffer, role="ReplayExtender",
            twice="every batch's transitions would be stored twice")
        return self

    def state_dict(self) -> dict[str, Any]:
        """The builder's: each env copy's open windows."""
        return self.builder.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        self.builder.load_state_dict(state_dict)
