"""Training throughput with and without the visdom dashboard attached (target: <= 3% overhead).

Run ``python tests/benchmarks/dashboard_overhead.py [--quick]``; prints one JSON line. A real
visdom server runs on 127.0.0.1 (started once, for every arm) and the ``dqn-cartpole`` recipe
trains with what ``engine-rl train`` attaches (episode stats, throughput, metrics.jsonl), in
three arms:

- ``off``: no dashboard;
- ``on``: :func:`handlers.dashboard.attach_dashboard` posting to the live server;
- ``dead``: the dashboard pointed at a port where no server listens (its failure path).

Two workloads: ``zoo`` (the recipe's 128 optim steps per 256-frame batch) and ``light`` (8 optim
steps per batch, 4x the frames: ~10x more dashboard records per second of training). Arms are interleaved and
medians of frames/s reported; ``overhead_*`` is ``1 - on / off``. On a shared, noisy machine
wall-clock frames/s swing by tens of percent between runs, so the CPU seconds per frame are
reported too (this process, posting thread included, plus the server process):
``cpu_overhead_*`` is ``on / off - 1`` of those. ``log_us`` is the training thread's cost of one
dashboard record (median of many calls).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from engine_rl.dashboard import DashboardWarning, VisdomServer
from engine_rl.recipes import get_recipe
from engine_rl.run.driver import make_config
from handlers.dashboard import TrainPlots, attach_dashboard
from handlers.episodes import EpisodeStats, Throughput
from handlers.metrics_log import MetricsLogger


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_fps(frames: int, steps: int, url: str | None, out: Path, rep: int, server_pid: int) -> tuple[float, float]:
    """(frames/s, CPU µs per frame) of one dqn-cartpole run; ``url``: attach the dashboard there."""
    cfg = make_config("dqn-cartpole", {"total_frames": frames, "optim_steps_per_batch": steps,
                                       "learning_starts": 512, "eval_every": 8, "eval_episodes": 4, "seed": rep})
    setup = get_recipe("dqn-cartpole").build(cfg)
    trainer = setup.trainer
    EpisodeStats().attach(trainer)
    Throughput().attach(trainer)
    MetricsLogger(out / "metrics.jsonl").attach(trainer)
    dashboard = None
    if url is not None:
        dashboard = attach_dashboard(trainer, env=f"bench-{out.name}", server=url, timeout=2.0, flush_timeout=0.0)
    start, cpu0, server0 = time.perf_counter(), time.process_time(), _cpu_seconds(server_pid)
    trainer.run()
    elapsed = time.perf_counter() - start
    if dashboard is not None:
        dashboard.close(timeout=10)  # its last posts count as its cost
    cpu = time.process_time() - cpu0 + _cpu_seconds(server_pid) - server0
    setup.close()
    return trainer.state.frames / elapsed, cpu / trainer.state.frames * 1e6


def log_cost_us(url: str, n: int) -> float:
    """Median training-thread cost (µs) of one dashboard record, with realistic metrics."""
    cfg = make_config("dqn-cartpole", {"total_frames": 512, "learning_starts": 256, "optim_steps_per_batch": 2})
    setup = get_recipe("dqn-cartpole").build(cfg)
    trainer = setup.trainer
    EpisodeStats().attach(trainer)
    Throughput().attach(trainer)
    dashboard = attach_dashboard(trainer, env="bench-log", server=url)
    trainer.run()
    handler = TrainPlots(trainer.optimizers)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        handler(trainer, dashboard, None)
        times.append(time.perf_counter() - t0)
    dashboard.close(timeout=10)
    setup.close()
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer frames and repetitions")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", DashboardWarning)  # the `dead` arm warns once per run, by design
    reps, frames = (3, 4096) if args.quick else (7, 8192)
    dead = f"http://127.0.0.1:{_free_port()}"
    result: dict[str, float | int] = {"reps": reps, "frames": frames}
    with tempfile.TemporaryDirectory() as tmp, VisdomServer(port=0, env_path=Path(tmp) / "envs") as server:
        for name, steps in (("zoo", 128), ("light", 8)):
            fps: dict[str, list[float]] = {"off": [], "on": [], "dead": []}
            cpu: dict[str, list[float]] = {"off": [], "on": [], "dead": []}
            for rep in range(reps):  # interleave the arms so machine noise hits all of them
                for arm, url in (("off", None), ("on", server.url), ("dead", dead)):
                    out = Path(tmp) / f"{name}-{arm}-{rep}"
                    out.mkdir()
                    f, c = run_fps(frames * (4 if name == "light" else 1), steps, url, out, rep, server.pid)
                    fps[arm].append(f)
                    cpu[arm].append(c)
            med = {arm: statistics.median(v) for arm, v in fps.items()}
            cmed = {arm: statistics.median(v) for arm, v in cpu.items()}
            for arm, value in med.items():
                result[f"fps_{name}_{arm}"] = round(value)
            for arm, value in cmed.items():
                result[f"cpu_us_per_frame_{name}_{arm}"] = round(value, 1)
            result[f"overhead_{name}_on"] = round(1 - med["on"] / med["off"], 4)
            result[f"overhead_{name}_dead"] = round(1 - med["dead"] / med["off"], 4)
            result[f"cpu_overhead_{name}_on"] = round(cmed["on"] / cmed["off"] - 1, 4)
            result[f"cpu_overhead_{name}_dead"] = round(cmed["dead"] / cmed["off"] - 1, 4)
        result["log_us"] = round(log_cost_us(server.url, 2000 if args.quick else 10_000), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
