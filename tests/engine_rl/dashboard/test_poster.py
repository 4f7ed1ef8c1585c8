import threading
import time
import warnings

import pytest

from engine_rl.dashboard.poster import BackgroundPoster, DashboardWarning


class FakeServer:
    """Mimics visdom's line(): update=None replaces a window, "append" extends it."""

    def __init__(self):
        self.windows = {}
        self.calls = []
        self.down = False

    def line(self, X, Y, win, update=None, **kwargs):
        if self.down:
            raise ConnectionError("server down")
        self.calls.append((win, update, len(X)))
        xs = [float(x) for x in X]
        if update is None:
            self.windows[win] = xs
        else:
            self.windows.setdefault(win, []).extend(xs)


def test_points_for_one_window_are_merged_in_order():
    server = FakeServer()
    poster = BackgroundPoster(interval=0.2)
    for i in range(100):
        poster.submit(server.line, X=[i], Y=[[i, 2 * i]], win="a", update="append")
        if i % 2:
            poster.submit(server.line, X=[i], Y=[i], win="b", update="append")
    assert poster.flush(timeout=10)
    assert server.windows["a"] == [float(i) for i in range(100)]
    assert server.windows["b"] == [float(i) for i in range(1, 100, 2)]
    assert len(server.calls) <= 6  # a few merged requests, not 150
    assert poster.posted_points == 150 and poster.failures == 0
    assert poster.shutdown()


def test_new_window_gets_an_id_at_once():
    server = FakeServer()
    poster = BackgroundPoster(interval=0.01)
    future = poster.submit(server.line, X=[1], Y=[2.0], win=None, opts={"title": "training/loss"})
    assert future.result() == "training_loss"
    assert poster.flush(timeout=10) and server.windows == {"training_loss": [1.0]}
    poster.shutdown()


def test_failure_warns_once_and_resends_each_window_whole():
    server = FakeServer()
    poster = BackgroundPoster(interval=0.01, retry_min=0.01, retry_max=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(5):
            poster.submit(server.line, X=[i], Y=[i], win="a", update="append")
        assert poster.flush(timeout=10)
        server.down = True
        for i in range(5, 40):
            poster.submit(server.line, X=[i], Y=[i], win="a", update="append")
            time.sleep(0.002)
        assert not poster.flush(timeout=10)
        server.down = False
        server.windows["a"] = server.windows["a"][:3]  # e.g. a restarted server that lost points
        assert poster.flush(timeout=10)
        assert poster.shutdown()
    ours = [w for w in caught if issubclass(w.category, DashboardWarning)]
    assert len(ours) == 1 and "server down" in str(ours[0].message)
    assert server.windows["a"] == [float(i) for i in range(40)]
    assert server.calls[-1] == ("a", None, 40)  # the catch-up replaced the window with everything
    assert poster.failures >= 1 and poster.posted_points == 40


def test_history_is_bounded():
    server = FakeServer()
    server.down = True
    poster = BackgroundPoster(interval=0.0, max_history=10, retry_min=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DashboardWarning)
        for i in range(100):
            poster.submit(server.line, X=[i], Y=[i], win="a", update="append")
        poster.flush(timeout=10)
        server.down = False
        assert poster.flush(timeout=10)
    kept = server.windows["a"]
    assert 10 <= len(kept) <= 12 and kept[-1] == 99.0 and kept == sorted(kept)
    poster.shutdown()


def test_submit_never_blocks_and_counts_what_it_drops():
    release = threading.Event()

    def slow(**kwargs):
        release.wait(10)

    poster = BackgroundPoster(interval=0.0, maxsize=5)
    poster.submit(slow, msg=0)  # a plain call, posted once, in order
    time.sleep(0.1)  # the posting thread is now stuck in slow()
    start = time.perf_counter()
    for i in range(50):
        poster.submit(slow, msg=i)
    assert time.perf_counter() - start < 0.5
    assert poster.dropped == 45
    release.set()
    assert poster.shutdown(timeout=10)
    poster.submit(slow, msg=1)
    assert poster.dropped == 46 and not poster.alive


def test_after_round_runs_after_posting_and_at_flush():
    server = FakeServer()
    saves = []
    poster = BackgroundPoster(interval=0.01, after_round=lambda: saves.append(1), after_round_interval=60)
    poster.submit(server.line, X=[1], Y=[1], win="a", update="append")
    assert poster.flush(timeout=10)
    poster.submit(server.line, X=[2], Y=[1], win="a", update="append")
    time.sleep(0.2)
    assert saves == [1]  # rate-limited to once a minute...
    assert poster.flush(timeout=10)
    assert saves == [1, 1]  # ...but a flush saves
    assert poster.flush(timeout=10) and saves == [1, 1]  # nothing new: no save
    poster.shutdown()


def test_bad_arguments():
    with pytest.raises(ValueError, match="BackgroundPoster: argument maxsize must be a positive int, got 0"):
        BackgroundPoster(maxsize=0)
    with pytest.raises(ValueError, match="BackgroundPoster: argument interval must be a non-negative number"):
        BackgroundPoster(interval=-1)
