"""A visdom client for posting from a background thread: no network call when it is built,
a timeout on every request, errors raised (not printed), no extra round trip per append, and
one kept-alive connection.

visdom's own ``Visdom(...)`` posts to the server in its constructor (and, by default, opens a
websocket and waits up to 5 s for it), sends requests without a timeout (a hung server hangs
the caller forever), asks ``win_exists`` before every ``update="append"``, and posts through
``requests``, whose per-request bookkeeping (proxy look-ups in the environment, ...) costs
several times the request itself on loopback.
"""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlparse, urlsplit

from engine_rl.checks import fail, is_number

__all__ = ["DEFAULT_URL", "make_client", "split_url"]

#: Where ``engine-rl dashboard`` serves by default.
DEFAULT_URL = "http://127.0.0.1:8097"


def split_url(url: str) -> tuple[str, int, str]:
    """``"http://host:port/base"`` -> ``("http://host", port, "/base")`` (port defaults to 8097).

    Examples:
        >>> split_url("http://127.0.0.1:8098")
        ('http://127.0.0.1', 8098, '/')
        >>> split_url("localhost")
        ('http://localhost', 8097, '/')
    """
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"dashboard: server URL must be a non-empty string like {DEFAULT_URL!r}, got {url!r}")
    parsed = urlparse(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"dashboard: server URL must look like {DEFAULT_URL!r}, got {url!r}")
    try:
        port = parsed.port or 8097
    except ValueError as err:
        raise ValueError(f"dashboard: server URL {url!r} has an invalid port") from err
    host = parsed.hostname if ":" not in parsed.hostname else f"[{parsed.hostname}]"
    base = parsed.path.rstrip("/") or "/"
    return f"{parsed.scheme}://{host}", port, base


def _post_kept_alive(client: Any, url: str, data: Any) -> str:
    """POST ``data`` to ``url`` on ``client``'s kept-alive connection (``client._conn``, made on
    first use, made again once if the server closed it); failures raise ``requests``' errors, as
    visdom's own requests session does."""
    import requests  # visdom's dependency: make_client has imported it

    parts = urlsplit(url)
    body = (data if data is not None else "{}").encode() if not isinstance(data, bytes) else data
    for attempt in (0, 1):  # a kept-alive connection the server closed: reconnect once
        if client._conn is None:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            client._conn = cls(parts.hostname, parts.port, timeout=client.request_timeout)
        try:
            client._conn.request("POST", parts.path or "/", body=body, headers={"Content-Type": "application/json"})
            response = client._conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            break
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as err:
            client._conn.close()
            client._conn = None
            if attempt:
                raise requests.ConnectionError(f"{url}: {err}") from err
        except (OSError, http.client.HTTPException) as err:  # refused, timed out, ...
            client._conn.close()
            client._conn = None
            raise requests.ConnectionError(f"{url}: {err}") from err
    if response.status >= 400:
        raise requests.HTTPError(f"{url}: HTTP {response.status}")
    return text


def make_client(url: str = DEFAULT_URL, *, env: str = "main", timeout: float = 5.0) -> Any:
    """A ``visdom.Visdom`` client for ``url`` that makes no request until it is used.

    Requests time out after ``timeout`` seconds and raise ``ConnectionError`` (or
    ``requests`` errors) instead of printing. ``win_exists`` is answered from memory for
    windows this client already posted to (if the server lost one, e.g. after a restart, the
    append fails and :class:`~engine_rl.dashboard.BackgroundPoster` re-sends the window whole).

    Raises:
        ModuleNotFoundError: visdom is not installed (the message says how to install it).
    """
    try:
        import requests
        import visdom
    except ImportError as err:
        raise ModuleNotFoundError(
            "dashboard: the visdom package is missing; install the extra with "
            "`PIP_CONSTRAINT=<file containing 'setuptools<81'> pip install \"engine_rl[visdom]\"` "
            "(visdom 0.2.4 builds only with setuptools<81)"
        ) from err
    if not (is_number(timeout) and timeout > 0):
        fail(timeout, "a positive number of seconds", name="argument timeout", owner="dashboard")
    server, port, base = split_url(url)

    class _Client(visdom.Visdom):
        # Built with send=False, so visdom's constructor makes no request and opens no socket;
        # sending is switched on right after.
        request_timeout = float(timeout)

        @property
        def session(self) -> Any:  # visdom's logs a warning each time it makes one
            if self._session is None:
                self._session = requests.Session()
                if self.proxies:
                    self._session.proxies.update(self.proxies)
            return self._session

        def _handle_post(self, url: str, data: Any = None) -> str:
            if self.username or self.proxies:  # login cookies and proxies: visdom's requests session
                response = self.session.post(url, data=data if data is not None else {}, timeout=self.request_timeout)
                response.raise_for_status()
                return response.text
            return _post_kept_alive(self, url, data)

        def _send(self, msg: dict[str, Any], endpoint: str = "events", quiet: bool = False,
                  from_log: bool = False, create: bool = True) -> Any:
            result = super()._send(msg, endpoint=endpoint, quiet=quiet, from_log=from_log, create=create)
            if endpoint in ("events", "update") and msg.get("win") is not None:
                self._known.add((msg.get("eid"), msg["win"]))
            return result

        def win_exists(self, win: str, env: str | None = None) -> bool | None:
            key = (env or self.env, win)
            if key in self._known:
                return True
            answer = self._win_exists_wrap(win, env)  # raises on connection errors
            return {"true": True, "false": False}.get(answer)

    client = _Client(server=server, port=port, base_url=base, env=env, send=False,
                     raise_exceptions=True, use_incoming_socket=False)
    client._known = set()
    client._conn = None
    client.send = True
    return client
