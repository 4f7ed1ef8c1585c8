"""A lock file in a run folder, so that two trainings never write into one ``--out`` at once.

:class:`RunLock` holds an exclusive ``flock`` on ``FOLDER/run.lock`` for as long as the run goes,
with the holder's PID, host and start time written in the file for the error message. The kernel
drops a ``flock`` when its process dies, however it dies, so a lock left by a killed run
(``SIGKILL``, a crash, a power cut) is taken over by the next one, with a warning naming the
process that left it; a live holder, in this process or another, makes :meth:`RunLock.acquire`
raise :class:`RunLockError`. ``flock`` needs a local file system or one that supports it (NFSv4
does; Linux and macOS).

Examples:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> lock = RunLock(folder).acquire()
    >>> lock.path.name, lock.path.read_text().split()[0] == f"pid={os.getpid()}"
    ('run.lock', True)
    >>> RunLock(folder).acquire()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    engine_rl.run.lock.RunLockError: .../run.lock: the folder is in use by another run: process ... holds this lock (started ...); wait for it to end or use another --out
    >>> lock.release()
    >>> with RunLock(folder):  # released: a new run takes it
    ...     pass
    >>> (Path(folder) / "run.lock").exists()  # and the file is gone
    False
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["LOCK_NAME", "RunLock", "RunLockError"]

#: The lock file's name in the run folder.
LOCK_NAME = "run.lock"


class RunLockError(RuntimeError):
    """The run folder is locked by a live run, or the lock file cannot be made; names the file."""


def _warn(message: str) -> None:
    print(f"engine-rl: warning: {message}", file=sys.stderr, flush=True)


def _describe(text: str) -> dict[str, str]:
    """``key=value`` words of a lock file (a damaged or empty file gives what it can)."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


class RunLock:
    """An exclusive lock on a run folder: ``FOLDER/run.lock``, held from :meth:`acquire` to
    :meth:`release` (or for a ``with`` block).

    Args:
        folder: the run folder (it must exist).
        warn: called with one line when a lock left by a dead process is taken over (default:
            ``engine-rl: warning: ...`` on stderr).

    Raises (from :meth:`acquire`):
        RunLockError: another live process (or this one, through another ``RunLock``) holds the
            folder; the message names the lock file and the holder's PID. Or the lock file cannot
            be created (a read-only folder): the message names the file and the OS reason.
    """

    def __init__(self, folder: str | Path, *, warn: Callable[[str], None] = _warn) -> None:
        self.path = Path(folder) / LOCK_NAME
        self.warn = warn
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock (once; a second call while held does nothing) and return ``self``."""
        if self._fd is not None:
            return self
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise RunLockError(f"{self.path}: cannot create the lock file ({err.strerror})") from err
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(os.pread(fd, 4096, 0).decode(errors="replace"))
                os.close(fd)
                raise RunLockError(
                    f"{self.path}: the folder is in use by another run: process {holder.get('pid', '?')}"
                    f"{'' if holder.get('host') in (None, socket.gethostname()) else ' on ' + holder['host']} "
                    f"holds this lock (started {holder.get('started', '?')}); wait for it to end or use another --out"
                ) from None
            # between our open and our flock the holder may have released (and unlinked) the file
            # and a third process created a new one: only a lock on the file at self.path counts
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        left = _describe(os.pread(fd, 4096, 0).decode(errors="replace"))
        if "pid" in left:  # its process died (or ended without releasing it): the flock was free
            pid = left["pid"]
            state = "running, but not holding it" if pid.isdigit() and _alive(int(pid)) else "not running"
            self.warn(
                f"taking over the stale lock {self.path} of process {pid} ({state}; started "
                f"{left.get('started', '?')}): that run was killed or ended without releasing it"
            )
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()} started={started}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up and delete the file (nothing happens if it is not held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # before unlocking: a waiting process re-checks the inode
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"RunLock({str(self.path.parent)!r}, held={self.held})"
