"""GymCollector frames/s vs raw gymnasium stepping with random actions, on the same vector env.

Run ``python tests/benchmarks/collection.py [--quick]``; prints one JSON line. Three arms step
``CartPole-v1`` (numpy-vectorized entry point) for the same number of frames:

- ``raw``: ``env.step(env.action_space.sample())``, nothing stored;
- ``policy_loop``: the 4-64-64-2 MLP argmax policy acting in a bare loop, nothing stored (the
  floor for any collector running that policy);
- ``collector``: :class:`GymCollector` with that policy, every frame stored into batches (reset
  steps of next-step autoreset are not frames: the collector steps them but does not count them).

Repetitions of the arms are interleaved and medians reported. ``ratio`` is collector / raw,
``ratio_vs_policy_loop`` is collector / policy_loop (the collector's own overhead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.collectors import GymCollector, make_vec_env


class MLPArgmax(nn.Module):
    """The benchmark's policy: a 4-64-64-2 MLP whose argmax is the action."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", self.net(td.get("observation")).argmax(-1))


def raw_fps(num_envs: int, frames: int) -> float:
    """Frames/s of ``env.step(env.action_space.sample())``."""
    env = make_vec_env("CartPole-v1", num_envs, mode="vector_entry_point")
    env.reset(seed=0)
    env.action_space.seed(0)
    steps = frames // num_envs
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.action_space.sample())
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def policy_loop_fps(num_envs: int, frames: int) -> float:
    """Frames/s of the policy acting in a bare loop (one reused TensorDict, nothing stored)."""
    env = make_vec_env("CartPole-v1", num_envs, mode="vector_entry_point")
    obs, _ = env.reset(seed=0)
    policy = MLPArgmax()
    td = TensorDict({"observation": torch.as_tensor(obs)}, batch_size=[num_envs])
    obs_view = td.get("observation").numpy()
    steps = frames // num_envs
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            obs, *_ = env.step(policy(td).get("action").numpy())
            obs_view[...] = obs
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def collector_fps(num_envs: int, frames: int, frames_per_batch: int) -> float:
    """Frames/s of iterating a GymCollector (policy included)."""
    env = make_vec_env("CartPole-v1", num_envs, mode="vector_entry_point")
    collector = GymCollector(env, MLPArgmax(), frames_per_batch=frames_per_batch, seed=0)
    batches = iter(collector)
    next(batches)  # warm-up: first reset and staging allocation
    n_batches = max(frames // frames_per_batch, 1)
    start = time.perf_counter()
    for _ in range(n_batches):
        next(batches)
    elapsed = time.perf_counter() - start
    collector.shutdown()
    return n_batches * frames_per_batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer frames and repetitions")
    args = parser.parse_args()
    torch.set_num_threads(1)
    reps, frames = (3, 8_192) if args.quick else (7, 32_768)
    result: dict[str, float | int] = {"reps": reps, "frames": frames}
    for num_envs in (8, 32):
        fpb = 32 * num_envs
        raw, loop, col = [], [], []
        for _ in range(reps):  # interleave the arms so machine noise hits all of them
            raw.append(raw_fps(num_envs, frames))
            loop.append(policy_loop_fps(num_envs, frames))
            col.append(collector_fps(num_envs, frames, fpb))
        raw_med, loop_med, col_med = (statistics.median(x) for x in (raw, loop, col))
        result[f"raw_fps_{num_envs}envs"] = round(raw_med)
        result[f"policy_loop_fps_{num_envs}envs"] = round(loop_med)
        result[f"collector_fps_{num_envs}envs"] = round(col_med)
        result[f"ratio_{num_envs}envs"] = round(col_med / raw_med, 3)
        result[f"ratio_vs_policy_loop_{num_envs}envs"] = round(col_med / loop_med, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
