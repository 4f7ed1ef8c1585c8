"""The custom events an RL trainer fires, and the state counters behind them.

Every event has a counter on ``engine.state`` that the trainer increments *before* it fires the
event, so Ignite's event filters work on them exactly as on the built-in events::

    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(every=500), update_target)
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED(once=1), print_batch_keys)

Order within one iteration (one collected batch)::

    BATCH_COLLECTED                         state.batch, state.frames           counter: batches
    for each optim epoch:
        for each optim step:
            SAMPLE_REQUESTED                a sampler sets state.sample         counter: optim_steps
            (loss, backward)
            BACKWARD_COMPLETED              gradients exist                      counter: optim_steps
            (optimizer.step())
            OPTIM_STEP_DONE                 state.sample, state.losses           counter: optim_steps
        EPOCH_DONE                          state.optim_epochs                   counter: optim_epochs
    Events.ITERATION_COMPLETED              state.output = mean losses

``optim_steps`` is incremented once per optim step, before ``SAMPLE_REQUESTED``; the three
per-step events therefore see the same value (the number of the step in progress, 1-based).
"""

from __future__ import annotations

from ignite.engine import Engine, EventEnum

__all__ = ["RLEvents", "RL_COUNTERS", "RL_EVENT_TO_ATTR", "VIDEO_EVENT_TO_ATTR", "VideoEvents", "register_video_events"]


class RLEvents(EventEnum):
    """Events fired by :func:`engine_rl.create_trainer`'s process function.

    Examples:
        >>> from engine_rl import RLEvents
        >>> RLEvents.OPTIM_STEP_DONE.value
        'optim_step_done'
        >>> RLEvents.OPTIM_STEP_DONE(every=500).filter is not None
        True
    """

    BATCH_COLLECTED = "batch_collected"
    """The collector yielded ``state.batch``; ``state.frames`` already counts it. Handlers may
    replace ``state.batch`` (e.g. normalize it) — the trainer reads it back after the event."""

    SAMPLE_REQUESTED = "sample_requested"
    """Before each optim step: a sampler handler puts the training sample in ``state.sample``.
    With no sampler, the flattened ``state.batch`` is used (on-policy, full batch)."""

    BACKWARD_COMPLETED = "backward_completed"
    """After ``loss.backward()``, before ``optimizer.step()``: gradients are in ``.grad`` and
    ``state.losses`` holds this step's loss output (gradient clipping, gradient-norm metrics,
    NaN guards)."""

    OPTIM_STEP_DONE = "optim_step_done"
    """After ``optimizer.step()``: ``state.sample`` (with whatever the loss wrote, e.g.
    ``td_error``) and ``state.losses`` are available (priority and target-net updates)."""

    EPOCH_DONE = "epoch_done"
    """After each optim epoch (one pass of ``optim_steps_per_batch`` steps). Not Ignite's
    ``Events.EPOCH_COMPLETED``, which fires every ``epoch_length`` batches."""


#: Event -> name of the ``engine.state`` counter incremented before it fires.
RL_EVENT_TO_ATTR: dict[RLEvents, str] = {
    RLEvents.BATCH_COLLECTED: "batches",
    RLEvents.SAMPLE_REQUESTED: "optim_steps",
    RLEvents.BACKWARD_COMPLETED: "optim_steps",
    RLEvents.OPTIM_STEP_DONE: "optim_steps",
    RLEvents.EPOCH_DONE: "optim_epochs",
}

#: Counters kept on ``engine.state`` and saved in ``engine.state_dict()``.
RL_COUNTERS: tuple[str, ...] = ("frames", "batches", "optim_steps", "optim_epochs")


class VideoEvents(EventEnum):
    """Events fired on the trainer by :class:`handlers.VideoRecording` (``engine-rl train --video``).

    Register them with :func:`register_video_events` before attaching a handler to them (the
    handler and :func:`handlers.attach_dashboard` do). A tracker subscribes as to any event:
    ``trainer.add_event_handler(VideoEvents.VIDEO_SAVED, post_videos)``.
    """

    VIDEO_SAVED = "video_saved"
    """Videos of evaluation episodes were written: once per recording (the final policy at
    ``COMPLETED``, a new best policy after an evaluation). The payload is on the trainer's state:

    - ``state.videos``: a tuple of :class:`engine_rl.video.Video`, one per episode, in order;
      each has ``path`` (the MP4, a ``pathlib.Path``), ``episode`` (1, 2, ...), ``frames`` (the
      frames in the file: the reset frame and one per step, ``length + 1``), ``length`` (the
      episode's steps), ``episode_return`` and ``fps``.
    - ``state.video_kind``: ``"final"`` (the final policy) or ``"best"`` (a new best evaluation).
    - ``state.frames``: the training frames when the policy recorded was evaluated (the x axis).
    - ``state.videos_saved``: recordings so far in this process (the event's counter, for
      ``every=``/``once=``; not checkpointed: it restarts at 0 in a resumed run).
    """


#: Event -> name of the ``engine.state`` counter incremented before it fires.
VIDEO_EVENT_TO_ATTR: dict[VideoEvents, str] = {VideoEvents.VIDEO_SAVED: "videos_saved"}


def register_video_events(engine: Engine) -> None:
    """Register :class:`VideoEvents` on ``engine`` unless they are already (then nothing changes).

    Examples:
        >>> from ignite.engine import Engine
        >>> engine = Engine(lambda e, batch: None)
        >>> register_video_events(engine); register_video_events(engine)
        >>> engine.has_registered_events(VideoEvents.VIDEO_SAVED), engine.state.videos_saved
        (True, 0)
    """
    if not engine.has_registered_events(VideoEvents.VIDEO_SAVED):
        engine.register_events(*VideoEvents, event_to_attr=VIDEO_EVENT_TO_ATTR)
