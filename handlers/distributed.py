"""Handlers that make a recipe's trainer data-parallel across the ranks of a process group.

:func:`make_data_parallel` wires them all into a trainer a recipe has built (the runner calls
it when ``idist.get_world_size() > 1``); the maths is in :mod:`engine_rl.distributed`.

================================  =====================================  ======================================
handler                           event (position)                       does
================================  =====================================  ======================================
:class:`FrameSync`                ``BATCH_COLLECTED`` (first)            ``state.frames`` = frames of all ranks
:class:`GradientSync`             ``BACKWARD_COMPLETED`` (first)         average gradients before clipping/step
:class:`EpochStopSync`            ``EPOCH_DONE`` (last)                  one rank ends the epochs: all do
:class:`AllReducedEpisodeStats`   ``BATCH_COLLECTED``                    ``train_return_mean``... of all ranks
:class:`EvalSync`                 evaluator ``ITERATION_COMPLETED``      scores over the episodes of all ranks;
                                  (first), ``EXCEPTION_RAISED``          a NaN in one rank's evaluation stops all
:class:`GatheredUpdates`          (wraps a normalizer)                   statistics from all ranks' batches
================================  =====================================  ======================================

"First" handlers run before those the recipe attached to the same event (frames before
schedules and frame-based evaluations, averaged gradients before ``GradClipper`` and NaN
guards, gathered scores before ``EarlyStopping`` and best-policy checkpoints; see
:func:`add_handler_first`), so every rank takes the same decisions: a decision taken on one
rank alone would leave the others waiting in a collective. :class:`handlers.NaNGuard` takes
its skip or stop decisions with the other ranks itself; :func:`make_data_parallel` gives it the
gradients that a ``GradClipper`` would otherwise be the first to check (it raises the same error
on every rank).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from torch import nn

from engine_rl.distributed import (
    GradientAllReduce,
    broadcast_tensors,
    gather_rows,
    module_tensors,
    reporting_rank,
)
from engine_rl.engine import attached_objects
from engine_rl.evaluation import EVAL_METRICS
from engine_rl.events import RLEvents
from engine_rl.finite import NonFiniteElsewhere, NonFiniteError
from handlers.episodes import EpisodeStats, finished_episodes
from handlers.gradients import GradClipper
from handlers.kl_stop import KLEarlyStop
from handlers.nan_guard import NaNGuard
from handlers.normalization import ObservationNormalizer

__all__ = [
    "AllReducedEpisodeStats",
    "EpochStopSync",
    "EvalSync",
    "FrameSync",
    "GatheredUpdates",
    "GradientSync",
    "add_handler_first",
    "make_data_parallel",
]


def add_handler_first(engine: Engine, event: Any, handler: Any) -> None:
    """Attach ``handler`` to ``event``, to run before the handlers already there.

    Ignite calls an event's handlers in the order they were attached. A
    :class:`~engine_rl.engine.RecordingEngine` (the trainer of ``create_trainer``, the evaluator
    of ``create_evaluator``) knows the handlers already on ``event``: its
    :meth:`~engine_rl.engine.RecordingEngine.prepend_event_handler` attaches ``handler``, then
    attaches them again after it, through Ignite's public API. A plain Ignite ``Engine`` keeps no
    such record, so there ``handler`` is simply attached: attach it before the handlers it must
    precede.
    """
    prepend = getattr(engine, "prepend_event_handler", None)
    if callable(prepend):
        prepend(event, handler)
    else:
        engine.add_event_handler(event, handler)


class FrameSync:
    """Make ``state.frames`` count the frames collected by all ranks.

    The trainer adds its own batch's frames before ``BATCH_COLLECTED``; this handler (first on
    that event) replaces that increment by the sum over the ranks, so frame budgets, frame
    schedules, ``every_frames`` evaluations and logs all see the run's total. One all-reduce of
    one number per batch.

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> w = torch.nn.Parameter(torch.zeros(()))
        >>> data = [TensorDict({"x": torch.zeros(4)}, [4])] * 3
        >>> trainer = create_trainer(data, lambda td: {"loss": w * 0}, torch.optim.SGD([w], lr=0.1))
        >>> _ = FrameSync().attach(trainer)
        >>> trainer.run(max_epochs=1).frames  # one process: its own frames
        12
    """

    def __init__(self) -> None:
        self._synced = 0

    def _start(self, engine: Engine) -> None:
        self._synced = int(engine.state.frames)

    def __call__(self, engine: Engine) -> None:
        local = int(engine.state.frames) - self._synced
        total = local if idist.get_world_size() == 1 else int(idist.all_reduce(torch.tensor([local])).item())
        engine.state.frames = self._synced + total
        self._synced = engine.state.frames

    def attach(self, engine: Engine) -> FrameSync:
        engine.add_event_handler(Events.STARTED, self._start)
        add_handler_first(engine, RLEvents.BATCH_COLLECTED, self)
        return self


class GradientSync:
    """Average the gradients of the trainer's optimizers over the ranks after each backward
    (first on ``BACKWARD_COMPLETED``, so clipping and NaN checks see the averaged gradients).

    Args:
        parameters: what to average (default at :meth:`attach`: ``trainer.optimizers``); see
            :class:`~engine_rl.distributed.GradientAllReduce`.
    """

    def __init__(self, parameters: Iterable[Any] | None = None) -> None:
        self.all_reduce = None if parameters is None else GradientAllReduce(parameters)

    def __call__(self, _: Engine) -> None:
        self.all_reduce()

    def attach(self, engine: Engine) -> GradientSync:
        if self.all_reduce is None:
            optimizers = getattr(engine, "optimizers", None)
            if not optimizers:
                raise ValueError(
                    "GradientSync.attach: the engine has no optimizers attribute (an RLTrainer has); "
                    "pass the parameters to GradientSync(parameters)"
                )
            self.all_reduce = GradientAllReduce(optimizers)
        add_handler_first(engine, RLEvents.BACKWARD_COMPLETED, self)
        return self


class EpochStopSync:
    """End a batch's optim epochs on every rank when a handler ended them on one (e.g.
    ``KLEarlyStop`` on a rank whose KL estimate crossed the threshold): an OR of
    ``state.end_optim_epochs`` over the ranks, last on ``EPOCH_DONE``.

    One all-reduce per optim epoch: PPO's default (20 one-minibatch epochs per batch) ran 20%
    slower with it on the 2-core box, so :func:`make_data_parallel` attaches it only where
    needed (see its ``sync_epoch_stops``)."""

    def __call__(self, engine: Engine) -> None:
        flag = torch.tensor([int(bool(engine.state.end_optim_epochs))])
        engine.state.end_optim_epochs = bool(idist.all_reduce(flag, op="MAX").item())

    def attach(self, engine: Engine) -> EpochStopSync:
        engine.add_event_handler(RLEvents.EPOCH_DONE, self)
        return self


class AllReducedEpisodeStats(EpisodeStats):
    """:class:`handlers.EpisodeStats` over the episodes that ended on all ranks in this batch:
    mean and population std of their returns, mean length (each episode weighs the same,
    whichever rank ran it), and ``episodes`` counts the episodes of all ranks. One all-reduce
    per batch (every rank takes part, with or without finished episodes). Info keys are averaged
    over the finished episodes of all ranks the same way."""

    def __call__(self, engine: Engine) -> None:
        returns, lengths = finished_episodes(engine.state.batch)
        r, length = returns.double(), lengths.double()
        info = self.info_values(engine.state.batch)
        parts = [torch.tensor(float(r.numel()), dtype=torch.float64), r.sum(), (r * r).sum(), length.sum()]
        for values in info.values():  # info keys: their sums and counts over all ranks
            parts += [values.sum(), torch.tensor(float(values.numel()), dtype=torch.float64)]
        sums = torch.stack(parts)
        if idist.get_world_size() > 1:
            sums = idist.all_reduce(sums)
        n, s, ss, ls, *info_sums = sums.tolist()
        engine.state.metrics["episodes_ended"] = int(n)
        if n == 0:
            return
        for i, key in enumerate(info):
            total, count = info_sums[2 * i], info_sums[2 * i + 1]
            if count:
                engine.state.metrics[f"train_info_{key}"] = total / count
        mean = s / n
        self.episodes += int(n)
        m = engine.state.metrics
        m["train_return_mean"] = mean
        m["train_return_std"] = max(ss / n - mean * mean, 0.0) ** 0.5 if n > 1 else 0.0
        m["train_length_mean"] = ls / n
        m["episodes"] = self.episodes


class EvalSync:
    """Score each evaluation over the episodes of all ranks: on the evaluator's
    ``ITERATION_COMPLETED`` (first), gather every rank's episode returns and lengths
    (``state.output``, info keys included) and recompute ``evaluator.state.metrics`` from them, as one evaluator
    running all the episodes would. Handlers on the evaluator's ``COMPLETED`` (best-policy
    checkpoint, ``EarlyStopping``) and :class:`handlers.ValidationRollout` then read the same
    scores on every rank.

    An evaluation that stops on one rank with a :class:`~engine_rl.finite.NonFiniteError` (its
    env returned a NaN) stops every rank: each evaluation starts with one all-reduce
    (:func:`~engine_rl.distributed.reporting_rank`) that the failing rank joins from the
    evaluator's ``EXCEPTION_RAISED`` (the handler re-raises, so the error still leaves ``run()``);
    the lowest failing rank raises its error, the others :class:`~engine_rl.finite.NonFiniteElsewhere`."""

    def __call__(self, evaluator: Engine) -> None:
        reporter = reporting_rank(0)
        if reporter is not None:
            raise self._elsewhere(reporter)
        output = evaluator.state.output
        returns = gather_rows(output["return"]).double()
        lengths = gather_rows(output["length"])
        infos = {name: gather_rows(values) for name, values in output.items() if name.startswith("info_")}
        evaluator.state.output = {**output, "return": returns.float(), "length": lengths, **infos}
        stats = torch.stack([
            returns.mean(), returns.std(correction=0), returns.min(), returns.max(), lengths.double().mean()
        ]).tolist()
        evaluator.state.metrics.update(zip(EVAL_METRICS, stats))
        evaluator.state.metrics.update((name, float(values.nanmean())) for name, values in infos.items())

    @staticmethod
    def _elsewhere(reporter: int) -> NonFiniteElsewhere:
        return NonFiniteElsewhere(
            f"EvalSync: rank {reporter} of {idist.get_world_size()} found a non-finite value in its evaluation and "
            "stops the run with its error; this rank stops with it"
        )

    def _failed(self, evaluator: Engine, err: BaseException) -> None:
        """The evaluation raised on this rank: a NaN joins the other ranks' all-reduce; re-raise."""
        # Ignite hands an exception raised in an iteration to EXCEPTION_RAISED twice (the epoch's
        # handling, then the run's): vote once
        if isinstance(err, NonFiniteError) and not isinstance(err, NonFiniteElsewhere) and not hasattr(err, "_voted"):
            err._voted = True  # type: ignore[attr-defined]
            reporter = reporting_rank(1)
            if reporter != idist.get_rank():
                raise self._elsewhere(reporter) from None
        raise err

    def attach(self, evaluator: Engine) -> EvalSync:
        add_handler_first(evaluator, Events.ITERATION_COMPLETED, self)
        evaluator.add_event_handler(Events.EXCEPTION_RAISED, self._failed)
        return self


class GatheredUpdates:
    """A stand-in for a running-statistics object (e.g. a
    :class:`~engine_rl.algos.normalization.Normalizer`) whose ``update(x)`` folds in the ``x`` of all
    ranks (gathered along dim 0, in rank order), so the statistics stay identical on every rank.
    Everything else (``state_dict``, ``mean``, ``frozen``...) is the wrapped object's.

    Examples:
        >>> from engine_rl.algos.normalization import Normalizer
        >>> norm = GatheredUpdates(Normalizer((1,), epsilon=0.0))
        >>> norm.update(torch.tensor([[1.0], [3.0]]))  # one process: its own batch
        >>> norm.mean.tolist(), norm.target.count.item()
        ([2.0], 2.0)
        >>> norm.frozen = True
        >>> norm.target.frozen
        True
    """

    def __init__(self, target: Any) -> None:
        if not callable(getattr(target, "update", None)):
            raise TypeError(f"GatheredUpdates: argument target has no update(x) method: {type(target).__name__}")
        self.target = target

    def update(self, x: torch.Tensor) -> None:
        self.target.update(gather_rows(x))

    def __getattr__(self, name: str) -> Any:
        try:
            target = self.__dict__["target"]
        except KeyError:  # (while unpickling or copying)
            raise AttributeError(name) from None
        return getattr(target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "target":
            object.__setattr__(self, name, value)
        else:  # e.g. ``handler.normalizer.frozen = True`` reaches the normalizer
            setattr(self.target, name, value)


def make_data_parallel(
    trainer: Engine,
    *,
    modules: Iterable[nn.Module] = (),
    evaluators: Iterable[Engine] = (),
    sync_epoch_stops: bool | None = None,
) -> dict[str, Any]:
    """Wire data-parallel training into ``trainer`` (built by a recipe, before the runner's own
    handlers): broadcast rank 0's weights, then attach :class:`FrameSync`, :class:`GradientSync`,
    :class:`EpochStopSync` (see ``sync_epoch_stops``), :class:`EvalSync` on ``evaluators`` and on
    the evaluator of every attached ``ValidationRollout``, and make every attached
    ``ObservationNormalizer`` learn from the batches of all ranks (:class:`GatheredUpdates`).

    Episode statistics are the runner's: attach :class:`AllReducedEpisodeStats` instead of
    ``EpisodeStats``. Each rank's collector, replay buffer and samplers stay its own.

    Args:
        modules: models whose parameters and buffers rank 0 broadcasts (target networks and
            normalizers included); the optimizers' parameters are always broadcast.
        evaluators: more evaluators to score over all ranks.
        sync_epoch_stops: attach :class:`EpochStopSync`. ``None``: when the trainer runs several
            optim epochs per batch and a ``KLEarlyStop`` is attached. Pass ``True`` if another
            handler may set ``state.end_optim_epochs`` on some ranks only: without the sync the
            ranks would run different numbers of optim steps and wait for each other forever.

    Returns:
        The attached handlers by name.

    Examples:
        >>> from tensordict import TensorDict
        >>> from engine_rl import create_trainer
        >>> net = torch.nn.Linear(2, 1)
        >>> data = [TensorDict({"x": torch.ones(4, 2)}, [4])] * 2
        >>> trainer = create_trainer(data, lambda td: {"loss": net(td["x"]).mean()},
        ...                          torch.optim.SGD(net.parameters(), lr=0.1))
        >>> sorted(make_data_parallel(trainer, modules=[net]))  # in one process every handler is a no-op
        ['evaluators', 'frames', 'gradients']
        >>> trainer.run(max_epochs=1).frames
        8
    """
    tensors = module_tensors(*[m for m in modules if isinstance(m, nn.Module)])
    seen = {id(t) for t in tensors}
    for opt in getattr(trainer, "optimizers", []):
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) not in seen:
                    seen.add(id(p))
                    tensors.append(p)
    broadcast_tensors(tensors)

    attached: dict[str, Any] = {"frames": FrameSync().attach(trainer), "gradients": GradientSync().attach(trainer)}
    objects = attached_objects(trainer)
    if sync_epoch_stops is None:
        sync_epoch_stops = getattr(trainer, "num_epochs", 1) > 1 and any(isinstance(o, KLEarlyStop) for o in objects)
    if sync_epoch_stops:
        attached["epoch_stop"] = EpochStopSync().attach(trainer)
    evaluators = list(evaluators)
    for obj in objects:
        evaluator = getattr(obj, "evaluator", None)
        if isinstance(evaluator, Engine) and all(evaluator is not e for e in evaluators):
            evaluators.append(evaluator)
        if isinstance(obj, ObservationNormalizer) and not isinstance(obj.normalizer, GatheredUpdates):
            obj.normalizer = GatheredUpdates(obj.normalizer)
    attached["evaluators"] = [EvalSync().attach(e) for e in evaluators]
    # a NaN gradient is the same on every rank (averaged): the guard's joint decision reports it once,
    # before a clipper's check would raise it on every rank
    clippers = [o for o in objects if isinstance(o, GradClipper) and o.error_if_nonfinite]
    for guard in (o for o in objects if isinstance(o, NaNGuard)):
        if not guard.parameters and trainer.has_event_handler(guard.check_step, RLEvents.BACKWARD_COMPLETED):
            for clipper in clippers:
                guard.check_gradients(clipper.named_parameters)
    return attached
