"""Ray collection end to end: 2 local actors for PPO (synchronous) and DQN (asynchronous), a
checkpoint resumed, an actor SIGKILLed mid-run, a two-node cluster on this machine joined with
``--ray-address``.

Every run starts its own local Ray (2 CPUs) and stops it; the cluster test stops its nodes with
``ray stop``.
"""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ignite.engine import Events

ray = pytest.importorskip("ray")

from engine_rl.cli import main  # noqa: E402
from engine_rl.run.driver import make_config, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PPO = ["train", "ppo-cartpole", "--frames", "1024", "--set", "collector=ray", "--set", "ray_workers=2", "--no-progress"]


def lines(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def without_times(records):
    return [{k: v for k, v in r.items() if k not in ("time", "fps", "optim_steps_per_s")} for r in records]


def test_ppo_with_two_actors_resumes_bitwise(tmp_path, capsys):
    assert main([*PPO, "--out", str(tmp_path / "straight")]) == 0
    straight = lines(tmp_path / "straight")
    assert {r["policy_lag"] for r in straight if r["kind"] == "train"} == {0}  # synchronous
    assert json.loads(capsys.readouterr().out)["frames"] == 1024
    paused = [*PPO, "--out", str(tmp_path / "resumed"), "--checkpoint-every", "2"]
    assert main([*paused, "--until-frames", "512"]) == 0
    assert main([*paused, "--resume"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["resumed_from_frames"] == 512 and "collector_not_checkpointed" not in summary
    assert without_times(lines(tmp_path / "resumed")) == without_times(straight)


def test_dqn_with_two_actors_is_asynchronous(tmp_path, capsys):
    out = tmp_path / "dqn"
    assert main(["train", "dqn-cartpole", "--frames", "1536", "--set", "learning_starts=512", "--set",
                 "optim_steps_per_batch=16", "--set", "collector=ray", "--set", "ray_workers=2", "--no-progress",
                 "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["frames"] == 1536 and "in flight" in summary["collector_not_checkpointed"]
    lags = [r["policy_lag"] for r in lines(out) if r["kind"] == "train"]
    assert max(lags) == 2 * 16  # round-robin over 2 actors: each batch's weights 2 batches of updates old


def test_a_killed_actor_restarts_and_the_run_finishes_its_frames(tmp_path):
    config = make_config("ppo-cartpole", ["collector=ray", "ray_workers=2", "total_frames=2048"])
    killed = []

    def kill_an_actor(run):
        collector = run.setup.trainer.collector

        @run.setup.trainer.on(Events.ITERATION_COMPLETED(once=2))
        def _(_):
            killed.append(collector.pids()[1])
            os.kill(killed[0], signal.SIGKILL)

    with pytest.warns(RuntimeWarning, match="actor 1 died"):
        summary = train("ppo-cartpole", config, tmp_path / "run", progress=False, attach=kill_an_actor)
    assert killed and summary["frames"] == 2048
    frames = [r["frames"] for r in lines(tmp_path / "run") if r["kind"] == "train"]
    assert frames == [256 * k for k in range(1, 9)]  # the dropped share was never counted


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_two_node_cluster_joined_with_ray_address(tmp_path):
    # two nodes of one CPU each: each actor asks for a CPU, so one runs on each node; the nodes'
    # workers import this checkout; token authentication on every side (Ray's default for a head)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "RAY_AUTH_MODE": "token"}
    port = _free_port()
    start = ["ray", "start", "--num-cpus=1", "--disable-usage-stats"]
    try:
        subprocess.run([*start, "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false"],
                       env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([*start, f"--address=127.0.0.1:{port}"], env=env, check=True, capture_output=True, timeout=120)
        res = subprocess.run([sys.executable, "-m", "engine_rl", *PPO, "--ray-address", f"127.0.0.1:{port}",
                              "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        assert json.loads(res.stdout)["frames"] == 1024
    finally:
        subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_bad_ray_input_is_one_line_with_status_2(tmp_path, capsys):
    for extra, message in (
        (["--set", "ray_workers=0"], "ray_workers must be a positive int, got 0"),
        (["--ray-address", "127.0.0.1:1"], "ray_address '127.0.0.1:1': no Ray head answers there"),
        (["--set", "env_backend=torch"], "env_backend 'torch' does not apply"),
        (["--set", "core=lstm", "--set", "batch_size=64"], "not core='lstm'"),
    ):
        assert main(["train", "ppo-cartpole", "--set", "collector=ray", "--out", str(tmp_path / "bad"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["train", "dqn-cartpole", "--set", "collector=ray", "--set", "async_collection=true",
                 "--out", str(tmp_path / "bad")]) == 2
    assert "async_collection (a worker process) does not apply" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
