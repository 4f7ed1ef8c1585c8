"""Engine overhead: the same DQN workload through the engine + handlers vs a hand-written loop.

Both sides use the same collector, replay buffer (prioritized), loss, optimizer, gradient
clipping function (torch's clip_grad_norm_, foreach) and target update class (engine_rl.algos.targets); only the
dispatch differs: events + handlers (plus episode statistics and throughput metrics) vs inline
calls. Times are process CPU seconds (one torch thread, envs in-process): on a shared 2-core
box they are far steadier than wall time, which other processes inflate at random. A/B runs are interleaved and repeated;
the JSON line reports the median wall time of each and the ratio engine / hand loop.

    python tests/benchmarks/engine_overhead.py [--quick] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn.utils import clip_grad_norm_

from engine_rl import create_trainer
from engine_rl.algos import DQNLoss, QValuePolicy, mlp
from engine_rl.algos.exploration import EpsilonGreedy
from engine_rl.algos.targets import HardUpdate
from engine_rl.collectors import GymCollector, make_vec_env
from engine_rl.replay import PrioritizedSampler, ReplayBuffer
from handlers import GradClipper, PriorityUpdater, ReplayExtender, ReplaySampler, TargetNetUpdater
from handlers.episodes import EpisodeStats, Throughput

FPB, STEPS, BATCH, TARGET_EVERY, MAX_NORM = 256, 64, 64, 128, 10.0


def _parts(seed: int):
    torch.manual_seed(seed)
    env = make_vec_env("CartPole-v1", 8)
    qnet = mlp(4, 2, (64, 64))
    explore = EpsilonGreedy(QValuePolicy(qnet), num_actions=2, annealing_frames=5_000, seed=seed)
    collector = GymCollector(env, explore, frames_per_batch=FPB, seed=seed)
    loss = DQNLoss(qnet)
    opt = torch.optim.Adam(qnet.parameters(), lr=1e-3)
    buffer = ReplayBuffer(100_000, sampler=PrioritizedSampler(), seed=seed)
    return collector, qnet, loss, opt, buffer


def run_engine(frames: int, seed: int = 0) -> float:
    collector, qnet, loss, opt, buffer = _parts(seed)
    trainer = create_trainer(collector, loss, opt, total_frames=frames, optim_steps_per_batch=STEPS)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, BATCH).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    GradClipper(qnet, max_norm=MAX_NORM).attach(trainer)
    TargetNetUpdater(qnet, loss.target_qnet, every=TARGET_EVERY).attach(trainer)
    EpisodeStats().attach(trainer)
    Throughput().attach(trainer)
    t0 = time.process_time()
    trainer.run()
    elapsed = time.process_time() - t0
    collector.shutdown()
    return elapsed


def run_hand_loop(frames: int, seed: int = 0) -> float:
    collector, qnet, loss, opt, buffer = _parts(seed)
    params = list(qnet.parameters())
    target = HardUpdate(qnet, loss.target_qnet)
    t0 = time.process_time()
    collected, steps = 0, 0
    for batch in collector:
        collected += batch.numel()
        buffer.extend(batch)
        for _ in range(STEPS):
            sample = buffer.sample(BATCH)
            out = loss(sample)
            opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            clip_grad_norm_(params, MAX_NORM, foreach=True).item()  # GradClipper records the norm as a float too
            opt.step()
            buffer.update_priority(sample["index"], sample["td_error"].abs())
            steps += 1
            if steps % TARGET_EVERY == 0:
                target.step()
        if collected >= frames:
            break
    elapsed = time.process_time() - t0
    collector.shutdown()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    frames = 2_048 if args.quick else 8_192
    reps = args.reps or (2 if args.quick else 7)
    run_engine(512), run_hand_loop(512)  # warm-up
    engine_t, hand_t = [], []
    for i in range(reps):
        order = (run_engine, run_hand_loop) if i % 2 == 0 else (run_hand_loop, run_engine)
        for fn in order:
            (engine_t if fn is run_engine else hand_t).append(fn(frames))
    e, h = statistics.median(engine_t), statistics.median(hand_t)
    print(json.dumps({
        "benchmark": "engine_overhead", "frames": frames, "optim_steps": frames // FPB * STEPS, "reps": reps,
        "engine_cpu_s": round(e, 3), "hand_loop_cpu_s": round(h, 3), "ratio_engine_over_hand": round(e / h, 3),
        "engine_all_cpu_s": [round(x, 3) for x in engine_t], "hand_all_cpu_s": [round(x, 3) for x in hand_t],
        "target_ratio": 1.05,
    }))


if __name__ == "__main__":
    main()
