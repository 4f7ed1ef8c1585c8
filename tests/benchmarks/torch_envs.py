"""Frames/s of the batched torch envs, from 1 to 16,384 envs, vs gymnasium's numpy CartPole.

Run ``python tests/benchmarks/torch_envs.py [--quick] [--device cuda]``; prints one JSON line.

Arms (random actions drawn on the env's device every step, nothing stored):

- ``torch_cartpole``: :class:`engine_rl.envs.CartPole` (float32 state) ``env.step``;
- ``torch_pendulum``: :class:`engine_rl.envs.Pendulum` ``env.step``;
- ``gym_cartpole``: gymnasium's numpy-vectorized ``CartPole-v1``
  (``vectorization_mode="vector_entry_point"``) with ``env.action_space.sample()`` (CPU only);
- ``collector``: :class:`~engine_rl.collectors.TorchEnvCollector` on CartPole with a 4-64-64-2
  MLP argmax policy, every frame stored into ``[num_envs, 32]`` batches, and (CPU only)
  ``gym_collector``: :class:`~engine_rl.collectors.GymCollector` with the same policy on the
  numpy CartPole.

For each size the arms' repetitions are interleaved and medians reported; ``ratio_*`` is torch /
gymnasium. With ``--device cuda`` the sizes are 4,096 to 65,536 envs (262,144 too without
``--quick``), times include ``torch.cuda.synchronize()`` and there is no gymnasium arm.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.collectors import GymCollector, TorchEnvCollector, make_vec_env
from engine_rl.envs import CartPole, Pendulum, TorchEnv


class MLPArgmax(nn.Module):
    """The benchmark's policy: a 4-64-64-2 MLP whose argmax is the action."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", self.net(td.get("observation")).argmax(-1))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def torch_env_fps(cls: type[TorchEnv], num_envs: int, steps: int, device: torch.device) -> float:
    """Frames/s of ``env.step`` with random actions sampled on the device."""
    env = cls(num_envs, device=device)
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)
    spec = env.action_spec
    size = (num_envs, *spec.shape)
    if spec.n is not None:
        def sample() -> torch.Tensor:
            return torch.randint(spec.n, size, generator=gen, device=device)
    else:
        low, high = spec.low.to(device), spec.high.to(device)  # moved once, not per step

        def sample() -> torch.Tensor:
            return torch.rand(size, generator=gen, device=device).mul_(high - low).add_(low)
    for _ in range(3):  # warm-up (allocator, CUDA kernels)
        env.step(sample())
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(sample())
    _sync(device)
    return steps * num_envs / (time.perf_counter() - start)


def gym_cartpole_fps(num_envs: int, steps: int) -> float:
    """Frames/s of gymnasium's numpy CartPole vector env with ``action_space.sample()``."""
    env = make_vec_env("CartPole-v1", num_envs, mode="vector_entry_point")
    env.reset(seed=0)
    env.action_space.seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.action_space.sample())
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def collector_fps(make: Callable[[], object], batches: int, device: torch.device) -> float:
    """Frames/s of iterating a collector (policy included), after one warm-up batch."""
    collector = make()
    it = iter(collector)
    next(it)
    _sync(device)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    _sync(device)
    elapsed = time.perf_counter() - start
    collector.shutdown()
    return batches * collector.frames_per_batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer frames, sizes and repetitions")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    torch.set_num_threads(1)
    cpu = device.type == "cpu"
    if cpu:
        sizes = [1, 16, 256, 4096, 16384] if args.quick else [1, 4, 16, 64, 256, 1024, 4096, 16384]
        collector_sizes = [16, 256, 4096] if not args.quick else [16, 1024]
    else:
        sizes = [4096, 16384, 65536] if args.quick else [4096, 16384, 65536, 262144]
        collector_sizes = sizes
    reps, frames, min_steps, max_steps = (3, 2**16, 20, 500) if args.quick else (5, 2**19, 50, 2000)
    t_batch = 32
    result: dict[str, object] = {"device": str(device), "reps": reps, "frames": frames, "torch_threads": 1}

    for n in sizes:
        steps = max(min_steps, min(max_steps, frames // n))
        runs: dict[str, list[float]] = {"torch_cartpole": [], "torch_pendulum": [], "gym_cartpole": []}
        for _ in range(reps):  # interleave the arms so machine noise hits all of them
            runs["torch_cartpole"].append(torch_env_fps(CartPole, n, steps, device))
            runs["torch_pendulum"].append(torch_env_fps(Pendulum, n, steps, device))
            if cpu:
                runs["gym_cartpole"].append(gym_cartpole_fps(n, steps))
        for arm, values in runs.items():
            if values:
                result[f"{arm}_fps_{n}"] = round(statistics.median(values))
        if cpu:
            ratio = result[f"torch_cartpole_fps_{n}"] / result[f"gym_cartpole_fps_{n}"]
            result[f"ratio_cartpole_{n}"] = round(ratio, 3)

    for n in collector_sizes:
        fpb = n * t_batch
        batches = max(2, min(50, frames // fpb))
        policy = MLPArgmax().to(device)
        col, gym_col = [], []
        for _ in range(reps):
            col.append(collector_fps(
                lambda: TorchEnvCollector(CartPole(n, device=device), policy, frames_per_batch=fpb, seed=0),
                batches, device,
            ))
            if cpu:
                gym_col.append(collector_fps(
                    lambda: GymCollector(make_vec_env("CartPole-v1", n), policy, frames_per_batch=fpb, seed=0),
                    batches, device,
                ))
        result[f"collector_fps_{n}"] = round(statistics.median(col))
        if cpu:
            result[f"gym_collector_fps_{n}"] = round(statistics.median(gym_col))
            result[f"ratio_collector_{n}"] = round(result[f"collector_fps_{n}"] / result[f"gym_collector_fps_{n}"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
