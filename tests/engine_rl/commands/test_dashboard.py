"""``engine-rl dashboard``: foreground server, replay into a running or a fresh server, errors."""

import json
import urllib.request

import pytest

from engine_rl.cli import main
from engine_rl.dashboard import VisdomServer, make_client

pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")


def _run(tmp_path, name="cmd-run"):
    run = tmp_path / name
    run.mkdir()
    lines = [{"kind": "train", "frames": 10 * i, "loss": 1.0 / i} for i in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_foreground_server_prints_its_url_and_serves(monkeypatch, capsys, tmp_path):
    seen = {}

    def wait(self):  # instead of blocking until Ctrl-C: check the server, then "exit"
        with urllib.request.urlopen(self.url, timeout=10) as resp:
            seen["status"] = resp.status
        seen["url"] = self.url
        return 0

    monkeypatch.setattr(VisdomServer, "wait", wait)
    assert main(["dashboard", "--port", "0", "--env-path", str(tmp_path)]) == 0
    assert seen["status"] == 200 and seen["url"].startswith("http://127.0.0.1:")
    assert f"visdom dashboard at {seen['url']} (Ctrl-C stops it)" in capsys.readouterr().out


def test_replay_into_a_running_server(tmp_path, capsys):
    run = _run(tmp_path)
    with VisdomServer(port=0, env_path=tmp_path / "envs") as server:
        assert main(["dashboard", "--replay", str(run), "--port", str(server.port)]) == 0
        assert f"replayed 5 points into 1 windows: {server.url}/env/cmd-run" in capsys.readouterr().out
        data = json.loads(make_client(server.url, env="cmd-run").get_window_data("loss", env="cmd-run"))
        assert data["content"]["data"][0]["x"] == [10, 20, 30, 40, 50]


def test_replay_starts_a_server_when_none_answers(monkeypatch, tmp_path, capsys):
    run = _run(tmp_path, "fresh")
    seen = {}

    def wait(self):
        seen["loss"] = make_client(self.url, env="fresh").win_exists("loss", env="fresh")
        return 0

    monkeypatch.setattr(VisdomServer, "wait", wait)
    assert main(["dashboard", "--replay", str(run / "metrics.jsonl"), "--port", "0",
                 "--env-path", str(tmp_path / "envs")]) == 0
    assert seen["loss"] is True
    assert "/env/fresh" in capsys.readouterr().out


def test_errors(tmp_path, capsys):
    assert main(["dashboard", "--replay", str(tmp_path / "nope")]) == 2
    assert "--replay: no run folder or metrics file at" in capsys.readouterr().err
    assert main(["dashboard", "--screenshot", "x.png"]) == 2
    assert "--screenshot needs --replay RUN_DIR" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, problem", [
    ("garbage.bin", b"\x89PNG\r\n\x1a\n\x00\xff", "is not a run's metrics.jsonl: it is not text (byte 0x89 at offset 0)"),
    ("config.json", b'{\n  "recipe": "dqn-cartpole"\n}\n',
     "is not a run's metrics.jsonl: none of its lines is a JSON object with 'frames'"),
    ("metrics.jsonl", b"", "is empty: its run logged nothing yet, so there is nothing to plot"),
])
def test_replay_of_a_file_without_metrics_is_refused_before_any_server(name, content, problem, tmp_path, monkeypatch,
                                                                        capsys):
    def start(self):
        raise AssertionError("a server was started")

    monkeypatch.setattr(VisdomServer, "start", start)
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["dashboard", "--replay", str(path)]) == 2
    assert capsys.readouterr().err == f"engine-rl: error: --replay: {path} {problem}\n"
    (tmp_path / "run").mkdir()
    assert main(["dashboard", "--replay", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"engine-rl: error: --replay: {tmp_path / 'run'} holds no metrics.jsonl (a run folder has one from its first "
        "logged batch); name a run folder or its metrics.jsonl\n")
