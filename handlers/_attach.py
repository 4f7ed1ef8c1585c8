"""Shared wiring for the handlers: register a callback on an event, every ``every`` times, once
where a second registration would corrupt data."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ignite.engine import Engine
from ignite.engine.events import CallableEventWithFilter, RemovableEventHandle

from engine_rl.checks import positive_int

__all__ = ["add_handler"]

#: Per engine, the exclusive registrations made by ``add_handler``: ``(owner, role, exclusive, callback)``.
_EXCLUSIVE: weakref.WeakKeyDictionary[Engine, list[tuple[str, str, Any, Callable]]] = weakref.WeakKeyDictionary()


def add_handler(
    engine: Engine,
    callback: Callable[[Engine], None],
    event: Any,
    every: int,
    *,
    owner: str,
    exclusive: Any = None,
    twice: str = "its work would be done twice",
    role: str | None = None,
) -> RemovableEventHandle:
    """``engine.add_event_handler(event(every=every), callback)``; ``every=1`` keeps ``event`` as given.

    ``event`` may already carry a filter (``Events.ITERATION_COMPLETED(every=5)``); combining
    such an event with ``every > 1`` is an error, as Ignite cannot stack two filters.

    Args:
        exclusive: an object that one ``owner`` handler at most may drive on ``engine`` (a replay
            buffer, a target network, the handler itself): while one is attached, attaching a
            second (the same handler again, or another ``owner`` on the same object) raises a
            ``ValueError`` naming ``owner``; one removed from the engine no longer counts.
        twice: what a second one would do wrong, for that error.
        role: what the handler does to ``exclusive`` (default: ``owner``); handlers of different
            classes with one role exclude each other too (``ReplayExtender`` and ``NStepTransitions``
            both store batches into a buffer, role ``"ReplayExtender"``).

    Examples:
        >>> from ignite.engine import Events
        >>> engine = Engine(lambda e, b: None)
        >>> def count(engine): pass
        >>> handle = add_handler(engine, count, Events.ITERATION_COMPLETED, 1, owner="Counter", exclusive=count)
        >>> add_handler(engine, count, Events.ITERATION_COMPLETED, 1, owner="Counter", exclusive=count,
        ...             twice="every iteration would count twice")
        Traceback (most recent call last):
        ...
        ValueError: Counter.attach: this Counter is already attached to this engine (every iteration would count twice); attach it once, or remove the first (its handle's .remove()) before attaching again
        >>> handle.remove()
        >>> _ = add_handler(engine, count, Events.ITERATION_COMPLETED, 1, owner="Counter", exclusive=count)
    """
    if not isinstance(engine, Engine):
        raise TypeError(f"{owner}.attach: argument engine must be an ignite Engine, got {type(engine).__name__}")
    every = positive_int(every, name="argument every", owner=owner)
    if every > 1:
        if not isinstance(event, CallableEventWithFilter) or getattr(event, "filter", None) is not None:
            raise ValueError(
                f"{owner}.attach: argument every={every} needs a plain event, got the filtered event {event!r}; "
                "pass every=1 with a filtered event, or the plain event with every"
            )
        event = event(every=every)
    if exclusive is not None:
        _claim(engine, callback, owner=owner, role=owner if role is None else role, exclusive=exclusive, twice=twice)
    return engine.add_event_handler(event, callback)


def _claim(engine: Engine, callback: Callable, *, owner: str, role: str, exclusive: Any, twice: str) -> None:
    """Record that ``owner`` drives ``exclusive`` in ``role`` on ``engine``; a ``ValueError`` if one already does."""
    claims = [c for c in _EXCLUSIVE.get(engine, []) if engine.has_event_handler(c[3])]  # drop removed ones
    for name, claimed, obj, attached in claims:
        if claimed == role and obj is exclusive:
            article = "an" if name[0] in "AEIOU" else "a"
            where = (f"this {owner} is already attached to this engine" if attached == callback
                     else f"this engine already has {article} {name} on this {type(exclusive).__name__}")
            raise ValueError(
                f"{owner}.attach: {where} ({twice}); attach it once, or remove the first (its handle's "
                ".remove()) before attaching again"
            )
    _EXCLUSIVE[engine] = [*claims, (owner, role, exclusive, callback)]
