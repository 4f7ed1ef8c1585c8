"""Start and stop a local visdom server: a context manager for tests and notebooks, a
foreground loop for ``engine-rl dashboard``.

The server is a child process (:mod:`engine_rl.dashboard.serve`) bound to 127.0.0.1; it makes
no network call (visdom's page assets are installed once, from npm, by
:func:`~engine_rl.dashboard.install_assets` — on the first start if they are missing). Its
lifetime is explicit: ``with VisdomServer(...)`` stops it on exit; it also exits by itself when
the process that started it is gone.
"""

from __future__ import annotations

import ipaddress
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from engine_rl.checks import int_in
from engine_rl.dashboard.assets import install_assets, missing_assets
from engine_rl.dashboard.serve import FAILED, READY

__all__ = ["VisdomServer", "VisdomServerError"]

_SERVE = str(Path(__file__).with_name("serve.py"))


class VisdomServerError(RuntimeError):
    """The server did not start (the port is in use, assets are missing, ...); the message says why."""


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.x.x.x``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class VisdomServer:
    """A visdom server in a child process, bound to ``host`` (127.0.0.1), serving offline.

    Args:
        port: the port (0: a free one, see :attr:`port` once started).
        host: the loopback address to bind (``127.0.0.1``, ``::1`` or ``localhost``); any other
            is refused: visdom has no authentication, so the server is for this machine only.
        env_path: where visdom saves envs (default: visdom's, ``~/.visdom``).
        install: install missing page assets from npm before starting (first-start fallback);
            with False a missing asset is an error.
        startup_timeout: seconds to wait for the server to accept connections.
        log_path: file for the server's log (default: a temporary file, see :attr:`log_path`);
            ``"-"``: the caller's stderr (the foreground command).
        extra_env: variables added to the child's environment.

    Examples:
        >>> server = VisdomServer(port=0)
        >>> server.running, server.url
        (False, None)
    """

    def __init__(
        self,
        *,
        port: int = 8097,
        host: str = "127.0.0.1",
        env_path: str | os.PathLike | None = None,
        install: bool = True,
        startup_timeout: float = 60.0,
        log_path: str | os.PathLike | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        port = int_in(port, 0, 65535, name="argument port", owner="VisdomServer")
        if not _is_loopback(host):
            raise ValueError(
                f"VisdomServer: argument host must be a loopback address (127.0.0.1, ::1 or localhost), got {host!r}: "
                "visdom has no authentication, so the dashboard serves this machine only"
            )
        self.requested_port = port
        self.host = host
        self.env_path = None if env_path is None else Path(env_path)
        self.install = install
        self.startup_timeout = float(startup_timeout)
        self.log_path: Path | None = None if log_path in (None, "-") else Path(log_path)  # type: ignore[arg-type]
        self._log_to_stderr = log_path == "-"
        self.extra_env = dict(extra_env or {})
        #: the bound port, once started
        self.port: int | None = None
        #: ``http://host:port``, once started
        self.url: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None

    # -- start / stop ---------------------------------------------------------------------------
    def _ensure_assets(self) -> None:
        missing = missing_assets()
        if missing and self.install:
            install_assets()
            missing = missing_assets()
        if missing:
            raise VisdomServerError(
                f"VisdomServer: visdom's page assets are missing ({', '.join(missing[:4])}"
                f"{', ...' if len(missing) > 4 else ''}); run `engine-rl dashboard --install-assets` "
                "(needs npm and the npm registry once)"
            )

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return self.log_path.read_text(errors="replace")[-3000:]

    def start(self) -> VisdomServer:
        """Start the server and wait until it accepts connections; returns ``self``."""
        if self.running:
            return self
        self._ensure_assets()
        cmd = [sys.executable, _SERVE, "--host", self.host, "--port", str(self.requested_port),
               "--parent-pid", str(os.getpid())]
        if self.env_path is not None:
            self.env_path.mkdir(parents=True, exist_ok=True)
            cmd += ["--env-path", str(self.env_path)]
        if self._log_to_stderr:
            stderr: Any = None
        else:
            if self.log_path is None:
                fd, name = tempfile.mkstemp(prefix="visdom-server-", suffix=".log")
                os.close(fd)
                self.log_path = Path(name)
            self._log = open(self.log_path, "ab")
            stderr = self._log
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                      text=True, env=env)
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, min(0.5, deadline - time.monotonic())))
            if ready:
                line = self._proc.stdout.readline()
                if line.startswith((READY, FAILED)) or not line:
                    break
            elif self._proc.poll() is not None:
                break
        if not line.startswith(READY):
            try:  # stdout closed or timed out: give an exiting child a moment to report its code
                code = self._proc.wait(2.0)
            except subprocess.TimeoutExpired:
                code = None
            self.stop()
            if line.startswith(FAILED):
                why = line[len(FAILED):].strip()
            elif code is not None:
                why = f"it exited with code {code}"
            else:
                why = f"no answer within {self.startup_timeout:.0f} s"
            log = f" (log: {self.log_path})" if self.log_path is not None else ""
            tail = self._log_tail()
            raise VisdomServerError(
                f"VisdomServer: the server did not start on {self.host}:{self.requested_port}: {why}{log}"
                + (f":\n{tail}" if tail else "")
            )
        self._proc.stdout.close()
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    @property
    def pid(self) -> int | None:
        """The server process id (None before start)."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``timeout`` s); envs saved so far stay."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """Kill the server at once (SIGKILL): what a crash looks like to its clients."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def wait(self) -> int:
        """Block until the server exits (the foreground command); returns its exit code."""
        if self._proc is None:
            raise RuntimeError("VisdomServer.wait: the server was not started")
        return self._proc.wait()

    def env_url(self, env: str) -> str:
        """The page showing visdom env ``env``."""
        if self.url is None:
            raise RuntimeError("VisdomServer.env_url: the server was not started")
        return f"{self.url}/env/{env}"

    def __enter__(self) -> VisdomServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.url}" if self.running else "stopped"
        return f"VisdomServer({state})"
