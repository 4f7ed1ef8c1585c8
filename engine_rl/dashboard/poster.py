"""Post plot updates from a background thread, so a dashboard never slows or stops training.

The training thread only puts small items into a bounded queue (``put_nowait``: it never
waits). A daemon thread drains the queue every ``interval`` seconds, merges the points bound
for the same window into one request, and posts. If posting fails (server down, dying, or
slower than the client's timeout) it warns **once**, keeps every point in memory (up to
``max_history`` per window) and retries with a growing back-off; once the server answers again
it re-sends each window's whole history (a replace, so a request that timed out but was
processed anyway does not duplicate points, and a restarted server gets everything back).
"""

from __future__ import annotations

import copy
import itertools
import queue
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from engine_rl.checks import fraction, nonnegative_number, positive_int

__all__ = ["BackgroundPoster", "DashboardWarning"]

Call = tuple[Callable[..., Any], dict[str, Any]]

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")
_STOP = object()


class DashboardWarning(UserWarning):
    """A dashboard could not post its plots; training went on unaffected."""


class _Done:
    """A finished future (ignite's VisdomLogger waits on the first call's result: the window id)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


class _Series:
    """Every point appended to one window, and how many of them the server has."""

    __slots__ = ("fn", "kwargs", "xs", "ys", "posted")

    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.kwargs = {k: v for k, v in kwargs.items() if k not in ("X", "Y", "update")}
        self.xs: list[Any] = []
        self.ys: list[Any] = []
        self.posted = 0

    def add(self, x: Any, y: Any) -> None:
        if type(x) is list and type(y) is list and len(x) == len(y) == 1:  # one point: the common case
            row = y[0]
            self.xs.append(float(x[0]))
            self.ys.append([float(v) for v in row] if isinstance(row, (list, tuple)) else [float(row)])
            return
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        y = np.asarray(y, dtype=np.float64)
        y = y.reshape(len(x), -1) if y.ndim != 2 else y
        self.xs.extend(x.tolist())
        self.ys.extend(y.tolist())

    def trim(self, max_points: int) -> None:
        excess = len(self.xs) - max_points
        if excess > max_points // 4:  # amortized: trim in chunks
            del self.xs[:excess]
            del self.ys[:excess]
            self.posted = max(0, self.posted - excess)

    def post(self, *, full: bool) -> None:
        start = 0 if full else self.posted
        kwargs = dict(self.kwargs)
        kwargs["opts"] = copy.deepcopy(kwargs.get("opts"))
        self.fn(X=np.asarray(self.xs[start:]), Y=np.asarray(self.ys[start:]),
                update=None if full else "append", **kwargs)
        self.posted = len(self.xs)


class BackgroundPoster:
    """A thread that posts dashboard calls for the training thread; see the module docstring.

    :meth:`submit` has the executor interface ignite's ``VisdomLogger`` uses
    (``submit(fn, **kwargs)`` returning a future), so it can stand in for its thread pool.
    Calls with ``X``, ``Y``, a ``win`` and ``update="append"`` are merged per window and kept
    for re-sending; a call with ``win=None`` gets a window id made from its ``opts["title"]``
    at once (and becomes an append), so nothing ever waits for the server. Other calls are
    made in order, once.

    Args:
        name: how warnings name the owner (``"dashboard"``).
        hint: appended to the warning (what the user can do about it).
        maxsize: capacity of the queue between the threads; items offered when it is full are
            dropped and counted in :attr:`dropped` (it only fills if the poster is stuck for a
            very long time: it drains everything each round).
        max_history: points kept per window for re-sending after a failure.
        interval: seconds between posting rounds (points in between are merged).
        max_duty: the largest fraction of time spent posting: after a round that took ``t``
            seconds the next waits at least ``t * (1 / max_duty - 1)`` (a slow or loaded server
            gets fewer, larger requests, and the posting thread's share of the GIL stays small).
        retry_min: seconds before the first retry after a failure; doubles up to ``retry_max``.
        retry_max: the longest wait between retries.
        after_round: called after each successful round that posted something (e.g. saving the
            visdom env), at most every ``after_round_interval`` seconds and at flush/close.
        after_round_interval: see ``after_round``.

    Examples:
        >>> posted = []
        >>> def line(X, Y, win, update, **kwargs):
        ...     posted.append((win, update, X.tolist(), Y.tolist()))
        >>> poster = BackgroundPoster(interval=0.01)
        >>> for frames in (100, 200, 300):
        ...     _ = poster.submit(line, X=[frames], Y=[[frames / 100]], win="loss", update="append")
        >>> poster.flush(timeout=10)
        True
        >>> sum(len(x) for _, _, x, _ in posted), poster.posted_points
        (3, 3)
        >>> poster.shutdown()
        True
    """

    def __init__(
        self,
        *,
        name: str = "dashboard",
        hint: str = "",
        maxsize: int = 100_000,
        max_history: int = 100_000,
        interval: float = 1.0,
        max_duty: float = 0.05,
        retry_min: float = 1.0,
        retry_max: float = 30.0,
        after_round: Callable[[], Any] | None = None,
        after_round_interval: float = 10.0,
    ) -> None:
        for arg, value in (("maxsize", maxsize), ("max_history", max_history)):
            positive_int(value, name=f"argument {arg}", owner="BackgroundPoster")
        for arg, value in (("interval", interval), ("retry_min", retry_min), ("retry_max", retry_max),
                           ("after_round_interval", after_round_interval)):
            nonnegative_number(value, name=f"argument {arg}", owner="BackgroundPoster")
        self.name = name
        self.hint = hint
        self.max_history = max_history
        fraction(max_duty, name="argument max_duty", owner="BackgroundPoster", zero=False)
        self.interval = float(interval)
        self.max_duty = float(max_duty)
        self.retry_min = float(retry_min)
        self.retry_max = max(float(retry_max), float(retry_min))
        self.after_round = after_round
        self.after_round_interval = float(after_round_interval)
        #: items offered while the queue was full, or after :meth:`shutdown`
        self.dropped = 0
        #: failed posting rounds
        self.failures = 0
        #: points the server acknowledged (re-sends not counted twice)
        self.posted_points = 0
        #: the first error seen, if any
        self.first_error: BaseException | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._series: dict[tuple[Any, ...], _Series] = {}
        self._calls: list[Call] = []
        self._failing = False
        self._resync = False
        self._warned = False
        self._backoff = self.retry_min
        self._next_try = 0.0
        self._last_after_round = 0.0
        self._after_round_due = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-poster", daemon=True)
        self._thread.start()

    # -- training thread ---------------------------------------------------------------------
    def _offer(self, item: Any) -> bool:
        if self._closed:
            self.dropped += 1
            return False
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def submit(self, fn: Callable[..., Any], /, **kwargs: Any) -> _Done:
        """Queue ``fn(**kwargs)`` for the posting thread; never blocks. Returns a done future
        whose result is the call's window id (``kwargs["win"]``, assigned if it was ``None``)."""
        if "win" in kwargs and kwargs["win"] is None and "X" in kwargs and "Y" in kwargs:
            title = str((kwargs.get("opts") or {}).get("title") or kwargs.get("name") or "window")
            kwargs["win"] = _UNSAFE.sub("_", title)
            if kwargs.get("update") is None:
                kwargs["update"] = "append"
        self._offer(("call", fn, kwargs))
        return _Done(kwargs.get("win"))

    def submit_lazy(self, make_calls: Callable[[Any], Iterable[Call]], arg: Any) -> None:
        """Queue ``arg``; the posting thread turns it into calls with ``make_calls(arg)`` (so
        even building the requests stays off the training thread). Never blocks."""
        self._offer(("lazy", make_calls, arg))

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Post everything queued now (ignoring the back-off once) and wait up to ``timeout``
        seconds; True if the server has every point."""
        if self._closed or not self._thread.is_alive():
            return not self._has_pending()
        done = threading.Event()
        result: list[bool] = []
        try:
            self._queue.put(("flush", done, result), timeout=timeout)
        except queue.Full:
            return False
        done.wait(timeout)
        return bool(result and result[0])

    def shutdown(self, wait: bool = True, *, timeout: float | None = 10.0) -> bool:
        """Post what is pending (one last try), stop the thread; True if everything was posted.

        Waits at most ``timeout`` seconds (``wait=False``: does not wait). Items offered later
        are dropped.
        """
        if self._closed:
            return not self._has_pending()
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        ok = self.flush(timeout=timeout) if wait else False
        self._closed = True
        try:
            self._queue.put(("stop", None, None), timeout=left() if wait else 0.1)
        except queue.Full:
            return False
        if wait:
            self._thread.join(left())
        return ok

    @property
    def alive(self) -> bool:
        """Whether the posting thread runs."""
        return self._thread.is_alive()

    # -- posting thread ----------------------------------------------------------------------
    def _has_pending(self) -> bool:
        return bool(
            self._calls
            or self._after_round_due
            or any(s.posted < len(s.xs) or (self._resync and s.xs) for s in self._series.values())
        )

    def _add_call(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        win = kwargs.get("win")
        if win is not None and kwargs.get("update") == "append" and "X" in kwargs and "Y" in kwargs:
            key = (fn, kwargs.get("env"), win, kwargs.get("name"))
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(fn, kwargs)
            series.add(kwargs["X"], kwargs["Y"])
            series.trim(self.max_history)
        else:
            self._calls.append((fn, kwargs))
            if len(self._calls) > self.max_history:
                del self._calls[0]
                self.dropped += 1

    def _take(self, item: Any, flushes: list[tuple[threading.Event, list[bool]]]) -> bool:
        kind, a, b = item
        if kind == "call":
            self._add_call(a, b)
        elif kind == "lazy":
            try:
                for fn, kwargs in a(b):
                    self._add_call(fn, kwargs)
            except Exception as err:  # a bug in make_calls must not kill the thread
                self._fail(err)
        elif kind == "flush":
            flushes.append((a, b))
        elif kind == "stop":
            return True
        return False

    def _warn(self, err: BaseException) -> None:
        if self._warned:
            return
        self._warned = True
        message = (
            f"{self.name}: posting failed ({type(err).__name__}: {err}); training continues without "
            "waiting for it, the plots catch up if the server answers again"
        )
        if self.hint:
            message += f"; {self.hint}"
        warnings.warn(message + ". (Shown once.)", DashboardWarning, stacklevel=2)

    def _fail(self, err: BaseException) -> None:
        self.failures += 1
        if self.first_error is None:
            self.first_error = err
        self._warn(err)

    def _round(self) -> bool:
        """Post all pending data; False (and back-off) on failure."""
        try:
            posted_any = bool(self._calls)
            if self._resync:
                for series in self._series.values():
                    if series.xs:
                        before = series.posted
                        series.post(full=True)
                        self.posted_points += len(series.xs) - min(before, len(series.xs))
                        posted_any = True
                self._resync = False
            else:
                for series in self._series.values():
                    new = len(series.xs) - series.posted
                    if new > 0:
                        series.post(full=False)
                        self.posted_points += new
                        posted_any = True
            while self._calls:
                fn, kwargs = self._calls[0]
                fn(**kwargs)
                del self._calls[0]
            self._after_round_due = self._after_round_due or (posted_any and self.after_round is not None)
            now = time.monotonic()
            if self._after_round_due and now - self._last_after_round >= self.after_round_interval:
                self.after_round()  # type: ignore[misc]
                self._last_after_round = now
                self._after_round_due = False
        except Exception as err:
            self._fail(err)
            self._failing = True
            self._resync = True
            self._next_try = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self.retry_max)
            return False
        self._failing = False
        self._backoff = self.retry_min
        return True

    def _final_after_round(self) -> None:
        if self._after_round_due and not self._failing and self.after_round is not None:
            try:
                self.after_round()
                self._last_after_round = time.monotonic()
                self._after_round_due = False
            except Exception as err:
                self._fail(err)

    def _run(self) -> None:
        next_round = 0.0
        while True:
            timeout = None
            if self._has_pending():
                due = self._next_try if self._failing else next_round
                timeout = max(0.0, due - time.monotonic())
            items = []
            try:
                items.append(self._queue.get(timeout=timeout))
            except queue.Empty:
                pass
            for _ in itertools.count():  # drain without blocking
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            flushes: list[tuple[threading.Event, list[bool]]] = []
            stop = False
            for item in items:
                stop = self._take(item, flushes) or stop
            now = time.monotonic()
            forced = bool(flushes) or stop
            due = self._next_try if self._failing else next_round
            if self._has_pending() and (forced or now >= due):
                if self._round():
                    took = time.monotonic() - now
                    next_round = time.monotonic() + max(self.interval, took * (1 / self.max_duty - 1))
                    if forced:
                        self._final_after_round()
            for done, result in flushes:
                result.append(not self._failing and not self._has_pending())
                done.set()
            if stop:
                return
