"""The RL trainer: an Ignite ``Engine`` whose data is a collector and whose iteration is
"collect one batch, then do all the optimization work it allows".

Glossary
--------
frame
    One environment step of one env copy. ``state.frames`` counts valid frames collected
    (rows where ``("collector", "mask")`` is True when the batch carries that key).
batch
    What the collector yields once: ``frames_per_batch`` frames, shape ``[num_envs, T]`` or flat.
iteration (Ignite)
    Processing one batch: ``BATCH_COLLECTED`` + all its optimization work.
optim step
    One sample -> loss -> backward -> ``optimizer.step()``. Counted by ``state.optim_steps``.
optim epoch (RL)
    One pass of ``optim_steps_per_batch`` optim steps over the current batch or buffer (PPO runs
    several per batch). Fires ``RLEvents.EPOCH_DONE``; counted by ``state.optim_epochs``. Not
    Ignite's ``Events.EPOCH_COMPLETED``, which here means "every ``epoch_length`` batches" and
    is where periodic checkpoints and evaluations usually hang.

Everything else — replay, sampling, priorities, clipping, target nets, weight sync, evaluation,
logging, checkpoints — is a handler attached to an event (see :mod:`engine_rl.events`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from ignite.engine import Engine, Events, EventsList, RemovableEventHandle
from tensordict import TensorDictBase

from engine_rl.checks import nonnegative_int, positive_int
from engine_rl.events import RL_COUNTERS, RL_EVENT_TO_ATTR, RLEvents
from engine_rl.keys import MASK_KEY, present_keys, require_keys

__all__ = ["RLTrainer", "RecordingEngine", "attached_objects", "create_trainer"]

LossModule = Callable[[TensorDictBase], Mapping[str, torch.Tensor] | TensorDictBase]


def _as_optimizer_list(optimizers: Any) -> list[torch.optim.Optimizer]:
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    if isinstance(optimizers, Mapping):
        optimizers = list(optimizers.values())
    if isinstance(optimizers, Sequence) and optimizers and all(
        isinstance(o, torch.optim.Optimizer) for o in optimizers
    ):
        return list(optimizers)
    raise TypeError(
        "create_trainer: argument optimizer must be a torch.optim.Optimizer, or a non-empty list or "
        f"dict of them; got {type(optimizers).__name__}"
    )


class _Attached(NamedTuple):
    """One ``add_event_handler`` call, as the caller made it."""

    event: Any  # the event as given, its filter included
    handler: Callable  # as given (not Ignite's wrapper of a filtered handler)
    args: tuple
    kwargs: dict
    # what Ignite registered (the wrapper, for a filtered event): the handle returned for it refers
    # to it weakly, so it is kept alive for that handle to keep working after a re-attachment
    registered: Callable


class RecordingEngine(Engine):
    """An Ignite ``Engine`` that keeps a record of the handlers attached to each of its events.

    Ignite has no public way to list an engine's handlers. This engine extends its public
    ``add_event_handler`` and ``remove_event_handler`` — which ``Engine.on``,
    ``RemovableEventHandle.remove`` and the stock handlers' ``attach`` all go through — to note
    what they add and remove. The record serves :meth:`attached_handlers`,
    :func:`attached_objects` (the stateful handlers a checkpoint saves), :class:`RLTrainer`
    (which fires only the events somebody listens to) and :meth:`prepend_event_handler`.
    Handlers written into Ignite's internals directly (its time profilers' own) are not in it.

    Examples:
        >>> from ignite.engine import Events
        >>> engine = RecordingEngine(lambda e, batch: None)
        >>> def log(e): pass
        >>> def stop(e): pass
        >>> handle = engine.add_event_handler(Events.EPOCH_COMPLETED(every=2), log)
        >>> _ = engine.prepend_event_handler(Events.EPOCH_COMPLETED, stop)
        >>> [h.__name__ for h in engine.attached_handlers(Events.EPOCH_COMPLETED)]
        ['stop', 'log']
        >>> handle.remove()
        >>> [h.__name__ for h in engine.attached_handlers()]
        ['stop']
    """

    def __init__(self, process_function: Callable[[Any, Any], Any]) -> None:
        self._record: dict[Any, list[_Attached]] = {}  # event -> its handlers, in call order
        super().__init__(process_function)

    def add_event_handler(self, event_name: Any, handler: Callable, *args: Any, **kwargs: Any) -> RemovableEventHandle:
        """Ignite's ``add_event_handler``, noted in the record."""
        handle = super().add_event_handler(event_name, handler, *args, **kwargs)
        if not isinstance(event_name, EventsList):  # Ignite adds a list's events one by one, through this method
            entry = _Attached(event_name, handler, args, kwargs, handle.handler())
            self._record.setdefault(event_name, []).append(entry)
        return handle

    def remove_event_handler(self, handler: Callable, event_name: Any) -> None:
        """Ignite's ``remove_event_handler``, noted in the record."""
        super().remove_event_handler(handler, event_name)
        if event_name in self._record:  # Ignite removed every registration of handler: keep those left
            entries = self._record[event_name]
            self._record[event_name] = [a for a in entries if self.has_event_handler(a.handler, event_name)]

    def attached_handlers(self, event_name: Any | None = None) -> list[Callable]:
        """The handlers attached to ``event_name``, in the order Ignite calls them (each as it was
        given, without Ignite's filter wrapper); with no event, those of all events, event by
        event in the order each event got its first handler."""
        if event_name is not None:
            return [a.handler for a in self._record.get(event_name, ())]
        return [a.handler for entries in self._record.values() for a in entries]

    def prepend_event_handler(
        self, event_name: Any, handler: Callable, *args: Any, **kwargs: Any
    ) -> RemovableEventHandle:
        """``add_event_handler``, but ``handler`` runs before the handlers already on ``event_name``.

        Ignite calls an event's handlers in the order they were attached and has no public way
        to insert one earlier, so this orders them by attach time: it removes the handlers
        already there (``remove_event_handler``), attaches ``handler``, then attaches them again
        with their events (filters included) and arguments (``add_event_handler``). The handles
        returned for them earlier keep working. ``event_name`` is one event, not a list.
        """
        if isinstance(event_name, EventsList):
            raise TypeError(f"prepend_event_handler: argument event_name must be one event, got the list {event_name}")
        before = list(self._record.get(event_name, ()))
        for attached in before:  # Ignite removes all the registrations of a handler at once
            if self.has_event_handler(attached.handler, event_name):
                self.remove_event_handler(attached.handler, event_name)
        try:
            handle = self.add_event_handler(event_name, handler, *args, **kwargs)
        finally:  # (a handler Ignite refuses leaves the others as they were)
            for attached in before:
                super().add_event_handler(attached.event, attached.handler, *attached.args, **attached.kwargs)
            if before:
                self._record[event_name].extend(before)
        return handle


def attached_objects(engine: Engine) -> list[Any]:
    """The distinct objects behind ``engine``'s event handlers, in attach order (event by event).

    A handler that is a bound method counts as its object; a handler wrapped with
    ``functools.wraps`` (``__wrapped__``) counts as what it wraps; engines themselves are left
    out. ``engine`` must keep a record of its handlers (an ``attached_handlers()`` method, as a
    :class:`RecordingEngine` has: :class:`RLTrainer`, :class:`~engine_rl.evaluation.Evaluator`):
    a plain Ignite ``Engine`` is a ``TypeError``, as Ignite has no public way to list what is
    attached to it.

    Examples:
        >>> from ignite.handlers import Timer
        >>> engine = RecordingEngine(lambda e, batch: None)
        >>> timer = Timer().attach(engine)
        >>> attached_objects(engine) == [timer]
        True
    """
    listed = getattr(engine, "attached_handlers", None)
    if not callable(listed):
        raise TypeError(
            f"attached_objects: a plain ignite {type(engine).__name__} keeps no record of its handlers that "
            "Ignite's public API can list; build it as an engine_rl.engine.RecordingEngine (create_trainer and "
            "create_evaluator do)"
        )
    found: dict[int, Any] = {}
    for handler in listed():
        while hasattr(handler, "__wrapped__"):
            handler = handler.__wrapped__
        obj = getattr(handler, "__self__", handler)
        if not isinstance(obj, Engine):
            found.setdefault(id(obj), obj)
    return list(found.values())


class RLTrainer(RecordingEngine):
    """An Ignite ``Engine`` that iterates a collector and runs optimization per batch.

    Build it with :func:`create_trainer`. It is an Ignite ``Engine`` (a :class:`RecordingEngine`):
    every stock Ignite handler attaches to it; ``run()`` without arguments iterates the collector
    given at construction.
    ``state_dict()`` includes the RL counters (``frames``, ``batches``, ``optim_steps``,
    ``optim_epochs``) so ``ignite.handlers.Checkpoint`` resumes them.
    """

    def __init__(
        self,
        collector: Iterable[TensorDictBase],
        loss_module: LossModule,
        optimizers: list[torch.optim.Optimizer],
        *,
        total_frames: int | None,
        learning_starts: int,
        num_epochs: int,
        optim_steps_per_batch: int,
        epoch_length: int | None,
        device: torch.device | None,
    ) -> None:
        self._rl_events_registered = False  # see register_events
        super().__init__(self._process)
        self.register_events()  # the RL events, unless Ignite's constructor already registered through it
        self.collector = collector
        self.loss_module = loss_module
        self.optimizers = optimizers
        self.total_frames = total_frames
        self.learning_starts = learning_starts
        self.num_epochs = num_epochs
        self.optim_steps_per_batch = optim_steps_per_batch
        self.device = device
        self._epoch_length = epoch_length
        # a function by its name; a module (or another callable object) by its class
        self._loss_name = getattr(loss_module, "__name__", None) or type(loss_module).__name__
        self._loss_keys_checked = False
        for name in RL_COUNTERS:
            self.state_dict_user_keys.append(name)
        self._reset_counters()
        self._frames_reached = False
        self.add_event_handler(Events.STARTED, self._on_started)
        self.add_event_handler(Events.EPOCH_COMPLETED, self._stop_when_frames_reached)

    def register_events(self, *event_names: Any, event_to_attr: dict | None = None) -> None:
        """Ignite's ``register_events``, with the RL events registered ahead of all others.

        ``fire_event`` first checks that the event was registered, comparing it with the
        registered events in order, and Ignite's own come first (its constructor registers them
        through this method). The RL events go ahead of them, as several fire per optim step.
        """
        if not self._rl_events_registered:
            self._rl_events_registered = True
            super().register_events(*RLEvents, event_to_attr=RL_EVENT_TO_ATTR)
        if event_names:
            super().register_events(*event_names, event_to_attr=event_to_attr)

    # -- counters -------------------------------------------------------------------------
    def _reset_counters(self) -> None:
        for name in RL_COUNTERS:
            setattr(self.state, name, 0)
        self.state.sample = None
        self.state.losses = None
        self.state.end_optim_epochs = False

    def _on_started(self, _: Engine) -> None:
        # Ignite resets iteration/epoch for a fresh run; do the same for the RL counters.
        if self.state.iteration == 0:
            self._reset_counters()
        self._frames_reached = False

    def _stop_when_frames_reached(self, _: Engine) -> None:
        if self._frames_reached:
            self.terminate()

    # -- run ------------------------------------------------------------------------------
    def _default_run_lengths(self) -> tuple[int | None, int | None]:
        """(epoch_length, max_epochs) from total_frames and the collector's frames_per_batch."""
        fpb = getattr(self.collector, "frames_per_batch", None)
        epoch_length = self._epoch_length
        if self.total_frames is None:
            return epoch_length, None
        if isinstance(fpb, int) and fpb > 0:
            n_batches = math.ceil(self.total_frames / fpb)
            if epoch_length is None:
                epoch_length = max(1, math.ceil(n_batches / 10))
            # frames may count fewer than frames_per_batch per batch (masks): leave room and stop
            # on frames, not on the epoch count.
            return epoch_length, 2 * math.ceil(n_batches / epoch_length) + 1
        return epoch_length, 2**31

    def run(  # type: ignore[override]
        self,
        data: Iterable[Any] | None = None,
        max_epochs: int | None = None,
        max_iters: int | None = None,
        epoch_length: int | None = None,
    ):
        """Run training; with no ``data``, iterate the collector until ``total_frames``.

        Arguments are Ignite's; defaults come from :func:`create_trainer`. A trainer whose state
        was loaded from a checkpoint resumes where it stopped.
        """
        default_len, default_epochs = self._default_run_lengths()
        if data is None:
            data = self.collector
        if epoch_length is None:
            epoch_length = self.state.epoch_length or default_len
        if max_epochs is None and max_iters is None and self.state.max_epochs is None:
            max_epochs = default_epochs
        return super().run(data, max_epochs=max_epochs, max_iters=max_iters, epoch_length=epoch_length)

    # -- process function -----------------------------------------------------------------
    def _fire(self, event: RLEvents) -> None:
        """Ignite's ``fire_event(event)``, when a handler is attached to ``event``.

        Several events fire per optim step, and Ignite's dispatch costs the same with no handler
        as with one (it checks that the event was registered, see :meth:`register_events`, then
        formats a debug message): an event nobody listens to costs one lookup in the engine's
        record instead (see :class:`RecordingEngine`).
        """
        if self._record.get(event):
            self.fire_event(event)

    def _count_frames(self, batch: TensorDictBase) -> int:
        mask = batch.get(MASK_KEY, None)
        if mask is not None:
            return int(mask.sum())
        return batch.numel()

    def _check_loss_keys(self, sample: TensorDictBase) -> None:
        in_keys = getattr(self.loss_module, "in_keys", None)
        if in_keys:
            require_keys(sample, in_keys, consumer=f"{self._loss_name} (the trainer's loss)")
        self._loss_keys_checked = True

    def _total_loss(self, losses: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum of the ``loss*`` entries of what the loss returned, and those entries."""
        if not isinstance(losses, (TensorDictBase, Mapping)):
            raise TypeError(
                f"{self._loss_name} (the trainer's loss) must return a TensorDict or a dict of tensors "
                f"whose keys starting with 'loss' are summed and optimized; got {type(losses).__name__}"
            )
        loss_values = {k: v for k, v in losses.items() if isinstance(k, str) and k.startswith("loss")}
        if not loss_values:
            raise ValueError(
                f"{self._loss_name} (the trainer's loss) returned no entry whose key starts with 'loss'; "
                f"got keys {list(losses.keys())}"
            )
        for key, value in loss_values.items():
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"{self._loss_name} (the trainer's loss): entry {key!r} must be a scalar tensor; got {shape}"
                )
        total = sum(loss_values.values())
        if not total.requires_grad:
            raise RuntimeError(
                f"{self._loss_name} (the trainer's loss) returned {list(loss_values)} without an autograd graph "
                "(computed under torch.no_grad() or detached?); nothing to back-propagate"
            )
        return total, loss_values

    def _optim_step(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        state = self.state
        state.optim_steps += 1
        state.sample = None
        self._fire(RLEvents.SAMPLE_REQUESTED)
        sample = state.sample
        if sample is None:
            sample = batch.reshape(-1)
            state.sample = sample
        if self.device is not None and sample.device != self.device:
            sample = state.sample = sample.to(self.device, non_blocking=True)
        if not self._loss_keys_checked:
            self._check_loss_keys(sample)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        try:
            losses = self.loss_module(sample)
        except KeyError as err:
            raise KeyError(
                f"{self._loss_name} (the trainer's loss) failed on a missing key: {err}; "
                f"the sample has {present_keys(sample)}"
            ) from err
        total, loss_values = self._total_loss(losses)
        state.losses = losses  # already this step's at BACKWARD_COMPLETED (NaN guards read it)
        total.backward()
        self._fire(RLEvents.BACKWARD_COMPLETED)
        for opt in self.optimizers:
            opt.step()
        self._fire(RLEvents.OPTIM_STEP_DONE)
        return loss_values

    @staticmethod
    def _process(engine: RLTrainer, batch: Any) -> dict[str, float]:
        self = engine
        if not isinstance(batch, TensorDictBase):
            raise TypeError(
                "RLTrainer: the collector must yield TensorDicts (tensordict.TensorDictBase); "
                f"got {type(batch).__module__}.{type(batch).__qualname__}"
            )
        state = self.state
        state.frames += self._count_frames(batch)
        state.batches += 1
        self._fire(RLEvents.BATCH_COLLECTED)
        batch = state.batch
        output: dict[str, float] = {}
        if state.frames >= self.learning_starts:
            history: dict[str, list[torch.Tensor]] = {}
            state.end_optim_epochs = False
            for _ in range(self.num_epochs):
                for _ in range(self.optim_steps_per_batch):
                    for k, v in self._optim_step(batch).items():
                        history.setdefault(k, []).append(v.detach())
                state.optim_epochs += 1
                self._fire(RLEvents.EPOCH_DONE)
                if state.end_optim_epochs:
                    break
            if history:
                # one reduction per iteration, not one add per step and key
                names = list(history)
                means = torch.stack([torch.stack(history[k]).float().mean() for k in names]).tolist()
                output = dict(zip(names, means))
        if self.total_frames is not None and state.frames >= self.total_frames:
            # End the Ignite epoch normally (EPOCH_COMPLETED handlers such as a final checkpoint
            # or evaluation still run), then stop: see _stop_when_frames_reached.
            self._frames_reached = True
            self.terminate_epoch()
        return output


def create_trainer(
    collector: Iterable[TensorDictBase],
    loss_module: LossModule,
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | Mapping[str, torch.optim.Optimizer],
    *,
    total_frames: int | None = None,
    learning_starts: int = 0,
    num_epochs: int = 1,
    optim_steps_per_batch: int = 1,
    epoch_length: int | None = None,
    device: str | torch.device | None = None,
) -> RLTrainer:
    """Build the trainer: an Ignite ``Engine`` that collects and optimizes.

    Per batch the trainer fires ``RLEvents.BATCH_COLLECTED``; then, once ``learning_starts``
    frames are in, runs ``num_epochs`` x ``optim_steps_per_batch`` optim steps (sample -> loss ->
    backward -> ``BACKWARD_COMPLETED`` -> ``optimizer.step()`` -> ``OPTIM_STEP_DONE``), firing
    ``EPOCH_DONE`` after each optim epoch. It stops once ``total_frames`` frames were collected.
    ``state.output`` is a dict of the iteration's mean losses (empty before learning starts).

    Args:
        collector: any iterable of TensorDicts (e.g. :class:`engine_rl.collectors.GymCollector`).
        loss_module: callable TensorDict -> TensorDict (or mapping); entries whose key starts with
            ``"loss"`` (scalar tensors) are summed and back-propagated. If it has ``in_keys``,
            the first sample is checked.
        optimizer: one optimizer, or a list/dict of them (e.g. actor and critic); all are
            zeroed before the loss is called and stepped after the backward.
        total_frames: stop after this many frames (None: run until ``max_epochs``/``max_iters``).
        learning_starts: frames to collect before the first optim step.
        num_epochs: optim epochs per batch.
        optim_steps_per_batch: optim steps per optim epoch.
        epoch_length: batches per Ignite epoch (``Events.EPOCH_COMPLETED``); default: a tenth of
            the run when ``total_frames`` and the collector's ``frames_per_batch`` are known.
        device: move each sample there before the loss (None: leave it where it is).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl import RLEvents, create_trainer
        >>> net = torch.nn.Linear(3, 1)
        >>> batches = [TensorDict({"x": torch.randn(8, 3), "y": torch.zeros(8, 1)}, [8])] * 4
        >>> def loss(td):
        ...     return TensorDict({"loss": ((net(td["x"]) - td["y"]) ** 2).mean()}, [])
        >>> trainer = create_trainer(batches, loss, torch.optim.SGD(net.parameters(), lr=0.1),
        ...                          optim_steps_per_batch=2)
        >>> _ = trainer.run(max_epochs=1)
        >>> trainer.state.frames, trainer.state.optim_steps, sorted(trainer.state.output)
        (32, 8, ['loss'])
    """
    if not isinstance(collector, Iterable):
        raise TypeError(
            f"create_trainer: argument collector must be an iterable of TensorDicts; got {type(collector).__name__}"
        )
    if not callable(loss_module):
        raise TypeError(f"create_trainer: argument loss_module must be callable; got {type(loss_module).__name__}")
    optimizers = _as_optimizer_list(optimizer)
    if total_frames is not None:
        total_frames = positive_int(total_frames, name="argument total_frames", owner="create_trainer")
    learning_starts = nonnegative_int(learning_starts, name="argument learning_starts", owner="create_trainer")
    num_epochs = positive_int(num_epochs, name="argument num_epochs", owner="create_trainer")
    optim_steps_per_batch = positive_int(optim_steps_per_batch, name="argument optim_steps_per_batch",
                                         owner="create_trainer")
    if epoch_length is not None:
        epoch_length = positive_int(epoch_length, name="argument epoch_length", owner="create_trainer")
    if total_frames is not None and learning_starts > total_frames:
        raise ValueError(
            f"create_trainer: argument learning_starts ({learning_starts}) exceeds total_frames "
            f"({total_frames}); no optim step would ever run"
        )
    return RLTrainer(
        collector,
        loss_module,
        optimizers,
        total_frames=total_frames,
        learning_starts=learning_starts,
        num_epochs=num_epochs,
        optim_steps_per_batch=optim_steps_per_batch,
        epoch_length=epoch_length,
        device=torch.device(device) if device is not None else None,
    )
