"""Shared wiring for the handlers: validate ``every`` and register a callback on an event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ignite.engine import Engine
from ignite.engine.events import CallableEventWithFilter, RemovableEventHandle

__all__ = ["add_handler", "check_every"]


def check_every(every: Any, *, owner: str) -> int:
    """Return ``every`` if it is a positive int; raise a ``ValueError`` naming ``owner`` otherwise."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"{owner}: argument every must be a positive int, got {every!r}")
    return every


def add_handler(
    engine: Engine, callback: Callable[[Engine], None], event: Any, every: int, *, owner: str
) -> RemovableEventHandle:
    """``engine.add_event_handler(event(every=every), callback)``; ``every=1`` keeps ``event`` as given.

    ``event`` may already carry a filter (``Events.ITERATION_COMPLETED(every=5)``); combining
    such an event with ``every > 1`` is an error, as Ignite cannot stack two filters.
    """
    if not isinstance(engine, Engine):
        raise TypeError(f"{owner}.attach: argument engine must be an ignite Engine, got {type(engine).__name__}")
    every = check_every(every, owner=owner)
    if every > 1:
        if not isinstance(event, CallableEventWithFilter) or getattr(event, "filter", None) is not None:
            raise ValueError(
                f"{owner}.attach: argument every={every} needs a plain event, got the filtered event {event!r}; "
                "pass every=1 with a filtered event, or the plain event with every"
            )
        event = event(every=every)
    return engine.add_event_handler(event, callback)
