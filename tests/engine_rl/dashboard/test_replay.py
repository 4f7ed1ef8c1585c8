import json
import socket

import pytest

from engine_rl.dashboard import VisdomServer, count_points, make_client, read_metrics, replay_metrics
from engine_rl.dashboard.replay import metrics_series

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


@pytest.mark.parametrize("content, problem", [
    (b"", "is empty: its run logged nothing yet, so there is nothing to plot"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "is not a run's metrics.jsonl: it is not text (byte 0x89 at offset 0)"),
    (b'{\n  "recipe": "dqn-cartpole",\n  "seed": 0\n}\n',  # a config.json: "0 points", exit 0 before
     "is not a run's metrics.jsonl: none of its lines is a JSON object with 'frames'"),
    (b'{"kind": "train", "frames": 1', "is not a run's metrics.jsonl: none of its lines is a JSON object with 'frames'"),
])
def test_a_file_without_metrics_records_is_one_error_naming_it(tmp_path, content, problem):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        metrics_series(tmp_path)
    assert str(err.value) == f"replay_metrics: {path} {problem}"
    with pytest.raises(ValueError, match="^replay_metrics: "):  # before any server is asked
        replay_metrics(path, server="http://127.0.0.1:1")


def test_lines_that_are_not_text_are_skipped_like_torn_ones(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"kind": "train", "frames": 8, "loss": 1.0}\n\xff\xfe\n{"kind": "train", "frames": 16, "loss": 0.5}\n')
    assert [r["frames"] for r in read_metrics(path)] == [8, 16]
    assert metrics_series(path) == {"loss": ([8.0, 16.0], [[1.0], [0.5]])}
