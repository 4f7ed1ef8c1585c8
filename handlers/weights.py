"""Policy-weight sync from the learner to the collector's acting policy.

:class:`WeightSync` calls ``collector.update_policy_weights_(TensorDict.from_module(source))``
on ``Events.ITERATION_COMPLETED(every=every)``, i.e. after the optim steps of a batch and before
the next batch is collected.
"""

from __future__ import annotations

from typing import Any

from ignite.engine import Engine, Events
from ignite.engine.events import RemovableEventHandle
from tensordict import TensorDict
from torch import nn

from engine_rl.checks import positive_int
from handlers._attach import add_handler

__all__ = ["WeightSync"]


class WeightSync:
    """Copy the learner's policy weights into the collector's policy every ``every`` batches.

    The collector does the copy (``update_policy_weights_``), in place and across devices: the
    learner may train on a GPU while the collector acts on the CPU, or the reverse.

    When the collector acts with the learner's own parameters — its ``policy`` is ``source``,
    or holds every parameter of ``source`` (e.g. an exploration wrapper around it) — there is
    nothing to copy and :meth:`sync` returns ``False`` without calling the collector. This is
    checked at each sync, so it stays right if the policy is swapped.

    Args:
        source_policy: the module the optimizer trains.
        collector: anything with ``update_policy_weights_(weights)`` (e.g.
            :class:`~engine_rl.collectors.GymCollector`) and, optionally, ``policy``.
        every: batches between syncs; the default for :meth:`attach`.
        sync_at_start: also sync on ``Events.STARTED``, before the first batch is collected.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Collector:
        ...     def __init__(self, policy):
        ...         self.policy = policy
        ...     @torch.no_grad()
        ...     def update_policy_weights_(self, weights):
        ...         TensorDict.from_module(self.policy).update_(weights)
        >>> learner, actor = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> WeightSync(learner, Collector(actor)).sync()
        True
        >>> torch.equal(actor.weight, learner.weight)
        True
        >>> WeightSync(learner, Collector(learner)).sync()  # acting with the learner itself
        False
    """

    def __init__(
        self, source_policy: nn.Module, collector: Any, *, every: int = 1, sync_at_start: bool = True
    ) -> None:
        if not isinstance(source_policy, nn.Module):
            raise TypeError(
                f"WeightSync: argument source_policy must be an nn.Module, got {type(source_policy).__name__}"
            )
        if not callable(getattr(collector, "update_policy_weights_", None)):
            raise TypeError(
                f"WeightSync: argument collector ({type(collector).__name__}) has no update_policy_weights_ method"
            )
        self.source_policy = source_policy
        self.collector = collector
        self.every = positive_int(every, name="argument every", owner="WeightSync")
        self.sync_at_start = sync_at_start
        self.num_syncs = 0

    def shares_weights(self) -> bool:
        """True if the collector's policy already acts with ``source_policy``'s parameters."""
        policy = getattr(self.collector, "policy", None)
        if policy is None:
            return False
        if policy is self.source_policy:
            return True
        if not isinstance(policy, nn.Module):
            return False
        acting = {id(p) for p in policy.parameters()}
        source = [id(p) for p in self.source_policy.parameters()]
        return bool(source) and all(i in acting for i in source)

    def sync(self) -> bool:
        """Copy the weights now; return False (and copy nothing) if they are shared already."""
        if self.shares_weights():
            return False
        self.collector.update_policy_weights_(TensorDict.from_module(self.source_policy).data)
        self.num_syncs += 1
        return True

    def __call__(self, engine: Engine) -> None:
        self.sync()

    def attach(
        self, engine: Engine, *, event: Any = Events.ITERATION_COMPLETED, every: int | None = None
    ) -> RemovableEventHandle:
        """Sync on ``event`` every ``every`` times (default: the constructor's ``every``), and
        on ``Events.STARTED`` if ``sync_at_start``. Returns the handle of the periodic sync."""
        handle = add_handler(engine, self, event, self.every if every is None else every, owner="WeightSync")
        if self.sync_at_start:
            engine.add_event_handler(Events.STARTED, self)
        return handle
