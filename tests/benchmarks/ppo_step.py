"""Benchmark: one PPO optim step with :class:`PPOLoss`'s autograd path vs its fused path.

The ppo-cartpole networks (two 4-64-64 tanh MLPs, orthogonal init) on one 256-row minibatch,
one torch thread: loss, backward, gradient clipping (max norm 0.5) and a :class:`FastAdam`
step, µs per step. Four variants: ``autograd`` (``PPOLoss(fused=False)``), ``fused_tanh``
(``PPOLoss(sigmoid_tanh=False)``: :mod:`engine_rl.algos.ppo_fused` with ``torch.tanh``, bitwise
autograd's gradients), ``fused`` (what ``PPOLoss`` runs on CPU by default: tanh as
``2 * sigmoid(2z) - 1``) and ``fused_written`` (the same node with ``write_gradients=True``, what
ppo-cartpole runs: its backward in the loss call, no ``backward()``).
They are interleaved in short blocks (10 steps; the order reversed every round) within one
process, because this box's speed drifts within seconds; ``ratio_*`` are medians of the
per-round ratios to autograd. Usage: ``python tests/benchmarks/ppo_step.py [--rounds N]
[--quick]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch


def make_step(variant: str) -> Callable[[], None]:
    import gymnasium as gym
    from tensordict import TensorDict

    from engine_rl.algos.policies import make_actor_critic
    from engine_rl.algos.ppo import PPOLoss
    from engine_rl.gradients import clip_grad_norm_
    from engine_rl.optim import FastAdam

    torch.manual_seed(0)
    policy = make_actor_critic(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2), write_value=False, seed=0)
    loss = PPOLoss(policy, clip_epsilon=0.2, value_coef=0.5, fused=variant != "autograd",
                   sigmoid_tanh=variant in ("fused", "fused_written"), write_gradients=variant == "fused_written")
    optimizer = FastAdam(policy.parameters(), lr=1e-3, eps=1e-5)
    with torch.no_grad():
        batch = policy(TensorDict({"observation": torch.randn(256, 4)}, [256]))
    batch["advantage"] = torch.randn(256)
    batch["value_target"] = torch.randn(256)
    batch = batch.select(*loss.in_keys)

    def step() -> None:
        optimizer.zero_grad()  # before the loss, as the trainer does: a loss may write gradients
        out = loss(batch)
        if not loss.wrote_gradients:
            (out["loss_objective"] + out["loss_critic"]).backward()
        clip_grad_norm_(policy.parameters(), 0.5)
        optimizer.step()

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="20 rounds (smoke test)")
    args = p.parse_args()
    torch.set_num_threads(1)
    rounds = 20 if args.quick else args.rounds
    variants = ("autograd", "fused_tanh", "fused", "fused_written")
    steps = {v: make_step(v) for v in variants}
    for step in steps.values():
        for _ in range(30):
            step()
    runs: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            start = time.perf_counter()
            for _ in range(10):
                steps[v]()
            runs[v].append((time.perf_counter() - start) / 10 * 1e6)
    med = statistics.median
    out = {
        "benchmark": "ppo_step", "threads": 1, "rounds": rounds, "steps_per_block": 10,
        **{f"{v}_us": round(med(runs[v]), 1) for v in variants},
        **{f"ratio_{v}": round(med([a / b for a, b in zip(runs[v], runs["autograd"])]), 3) for v in variants[1:]},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
