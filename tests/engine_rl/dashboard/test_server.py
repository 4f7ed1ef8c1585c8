"""The real server: offline, bound to 127.0.0.1, every page asset served, a clear lifetime."""

import posixpath
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from engine_rl.dashboard import VisdomServer, make_client
from engine_rl.dashboard.serve import READY

pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")

# Loaded into the server process: any connection or name lookup off this machine is refused and logged.
GUARD = '''
import os, socket
LOG = os.environ["NETWORK_GUARD_LOG"]
def _local(host):
    return str(host) in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "") or str(host).startswith("127.")
def _refuse(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")
    raise OSError("network guard: " + what)
_connect = socket.socket.connect
def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        _refuse("connect %r" % (address,))
    return _connect(self, address)
socket.socket.connect = connect
_getaddrinfo = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    if host is not None and not _local(host):
        _refuse("getaddrinfo %r" % (host,))
    return _getaddrinfo(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
'''


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def test_serves_every_page_asset_offline_on_loopback(tmp_path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "network.log"
    start = time.perf_counter()
    with VisdomServer(port=0, env_path=tmp_path / "envs",
                      extra_env={"PYTHONPATH": str(guard), "NETWORK_GUARD_LOG": str(log)}) as server:
        startup = time.perf_counter() - start
        assert server.url == f"http://127.0.0.1:{server.port}" and server.running
        assert _get(server.url + "/")[0] == 200  # tornado 6.6 answers 403 here; 6.5 is pinned
        status, page = _get(server.env_url("some-run"))
        assert status == 200
        assets = sorted(set(re.findall(r'(/static/[^"\'\s>?]+)', page.decode())))
        assert len(assets) >= 15 and "/static/js/plotly-plotly.min.js" in assets
        # loaded later by the CSS (fonts) and by MathJax itself
        assets += [f"/static/fonts/glyphicons-halflings-regular.{ext}" for ext in ("eot", "woff2", "woff", "ttf", "svg")]
        assets += ["/static/js/mathjax/2.7.5/jax/output/SVG/jax.js", "/static/js/mathjax/2.7.5/extensions/Safe.js"]
        for path in assets:
            status, body = _get(server.url + posixpath.normpath(path))  # as a browser resolves "/static/../user"
            assert status == 200 and (body or path.endswith("user/style.css")), path  # the user style is empty
        client = make_client(server.url, env="offline")
        client.line(X=[[1.0], [2.0]], Y=[[1.0], [4.0]], win="w", env="offline")
        assert client.win_exists("w", env="offline")
        client.save(["offline"])
    assert not server.running
    assert (tmp_path / "envs" / "offline.json").is_file()  # saved envs outlive the server
    assert (guard / "sitecustomize.py").exists() and not log.exists(), log.read_text()  # no network call at all
    assert startup < 30


def test_bound_to_loopback_only(tmp_path):
    with VisdomServer(port=0, env_path=tmp_path) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
        try:  # this machine's non-loopback address, if it has one, must not reach the server
            other = socket.gethostbyname(socket.gethostname())
        except OSError:
            other = "127.0.0.1"
        if not other.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((other, server.port), timeout=2).close()


def test_exits_when_the_process_that_started_it_is_gone(tmp_path):
    serve = str(__import__("engine_rl.dashboard.serve", fromlist=["x"]).__file__)
    shell = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" "{serve}" --port 0 --env-path "{tmp_path}" --parent-pid $$ & sleep 2'],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = shell.stdout.readline()
    assert line.startswith(READY)
    port = int(line.split(":")[-1])
    shell.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the server outlived its parent")


def test_start_failure_shows_the_log(tmp_path):
    with VisdomServer(port=0, env_path=tmp_path) as first:
        with pytest.raises(RuntimeError, match=f"did not start on 127.0.0.1:{first.port}: cannot bind: Address already in use "
                                               r"\(another server on this port\? port 0 picks a free one\)"):
            VisdomServer(port=first.port, env_path=tmp_path, startup_timeout=30).start()


def test_bad_port():
    with pytest.raises(ValueError, match="VisdomServer: argument port must be an int in \\[0, 65535\\], got -1"):
        VisdomServer(port=-1)
