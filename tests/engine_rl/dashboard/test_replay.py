import json
import socket

import pytest

from engine_rl.dashboard import VisdomServer, count_points, make_client, read_metrics, replay_metrics

pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")


def _write_run(run, n=12):
    run.mkdir(parents=True)
    lines = []
    for i in range(1, n + 1):
        lines.append({"kind": "train", "frames": 100 * i, "optim_steps": 10 * i, "iteration": i, "time": 0.1 * i,
                      "loss": 1.0 / i, "fps": 500.0, "train_return_mean": float(i), "train_return_std": 1.0})
        if i % 4 == 0:
            lines.append({"kind": "eval", "frames": 100 * i, "optim_steps": 10 * i, "iteration": i, "time": 0.0,
                          "eval_return_mean": 2.0 * i, "eval_return_std": 0.5, "eval_frames": 100 * i})
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (run / "metrics.jsonl").write_text(text + '{"kind": "train", "frames": 13')  # the crash tore the last line
    return lines


def test_replay_rebuilds_every_window_once(tmp_path):
    run = tmp_path / "crashed-run"
    lines = _write_run(run)
    assert list(read_metrics(run)) == lines
    with VisdomServer(port=0, env_path=tmp_path / "envs") as server:
        counts = replay_metrics(run, server=server.url)
        assert counts == count_points(lines) == {"train_return": 12, "loss": 12, "fps": 12, "eval_return": 3}
        counts = replay_metrics(run / "metrics.jsonl", server=server.url)  # again: replaced, not doubled
        client = make_client(server.url, env="crashed-run")
        for win, n in counts.items():
            data = json.loads(client.get_window_data(win, env="crashed-run"))
            assert all(len(trace["x"]) == n for trace in data["content"]["data"]), win
        data = json.loads(client.get_window_data("loss", env="crashed-run"))
        assert data["content"]["data"][0]["y"] == [1.0 / i for i in range(1, 13)]
        assert replay_metrics(run, server=server.url, env="other") == counts


def test_replay_errors_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="replay_metrics: no metrics file at"):
        replay_metrics(tmp_path)
    _write_run(tmp_path / "run")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="start one with `engine-rl dashboard`"):
        replay_metrics(tmp_path / "run", server=f"http://127.0.0.1:{port}", timeout=2)
