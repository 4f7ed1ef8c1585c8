"""Benchmark: one SAC gradient step (batch 256, 256x256 nets, Pendulum sizes), engine_rl vs an
SB3-structured update, plus the whole sac-pendulum recipe per frame.

Variants, interleaved and repeated (medians reported):

- ``sb3_style``: the update structured as Stable-Baselines3 does it (two separate ``nn.Sequential``
  critics, critic loss backward + step, then actor loss backward through the critics + step,
  then temperature loss backward + step; PyTorch's default (per-parameter) Adam on the CPU).
- ``engine``: :class:`engine_rl.algos.SACLoss` over a stacked :class:`QEnsemble` (one batched
  matmul per layer for both critics, critics' parameters detached in the actor loss), the three
  losses summed and back-propagated once, ``torch.optim.Adam(fused=True)``, one soft target update.

``output_layer_us``: forward plus backward of the critics' last layer (2 critics, 256 rows,
256 -> 1) as a batched matmul (``torch.baddbmm``) vs the broadcast multiply-sum that
:class:`QEnsemble` uses.

``recipe_ms_per_frame``: the full ``sac-pendulum`` recipe (collection, replay, events, one
gradient step per frame) over a short run, wall time per frame after learning starts.

Usage: ``python tests/benchmarks/sac_update.py [--quick] [--threads N]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import gymnasium as gym
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.networks import mlp
from engine_rl.algos.optimizers import adam
from engine_rl.algos.sac import QEnsemble, SACLoss
from engine_rl.algos.targets import SoftUpdate
from engine_rl.events import RLEvents
from engine_rl.recipes import get_recipe
from engine_rl.run.driver import make_config

OBS, ACT, BATCH, HIDDEN = 3, 1, 256, (256, 256)


def _sample() -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(BATCH, OBS),
            "action": torch.rand(BATCH, ACT) * 4 - 2,
            ("next", "observation"): torch.randn(BATCH, OBS),
            ("next", "reward"): torch.randn(BATCH),
            ("next", "terminated"): torch.zeros(BATCH, dtype=torch.bool),
        },
        [BATCH],
    )


def make_engine_step():
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(OBS, gym.spaces.Box(-2.0, 2.0, (ACT,)), hidden=HIDDEN)
    critic = QEnsemble(OBS, ACT, HIDDEN)
    loss = SACLoss(actor, critic)
    groups = (actor.parameters(), critic.parameters(), [loss.log_alpha])
    opts = [adam(p, lr=1e-3) for p in groups]
    target = SoftUpdate(critic, loss.target_critic, tau=0.005)
    td = _sample()

    def step() -> None:
        out = loss(td)
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        total.backward()
        for opt in opts:
            opt.step()
        target.step()

    return step


def make_sb3_style_step():
    """SB3's SAC.train() structure, re-expressed: separate critics, three backward passes."""
    torch.manual_seed(0)
    actor = TanhGaussianActor.build(OBS, gym.spaces.Box(-2.0, 2.0, (ACT,)), hidden=HIDDEN)
    critics = nn.ModuleList([mlp(OBS + ACT, 1, HIDDEN) for _ in range(2)])
    critics_target = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = torch.zeros((), requires_grad=True)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    critic_opt = torch.optim.Adam(critics.parameters(), lr=1e-3)
    alpha_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    target_params, params = list(critics_target.parameters()), list(critics.parameters())
    td = _sample()
    obs, next_obs = td["observation"], td["next", "observation"]
    action = actor.unscale(td["action"])
    reward, not_done = td["next", "reward"].unsqueeze(-1), (~td["next", "terminated"]).float().unsqueeze(-1)

    def q_values(nets, o, a):
        x = torch.cat([o, a], -1)
        return [net(x) for net in nets]

    def step() -> None:
        pi, log_prob = actor.sample(obs)
        log_prob = log_prob.unsqueeze(-1)
        alpha_loss = -(log_alpha * (log_prob + -1.0).detach()).mean()
        alpha = log_alpha.detach().exp()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        with torch.no_grad():
            next_a, next_lp = actor.sample(next_obs)
            next_q = torch.min(*q_values(critics_target, next_obs, next_a)) - alpha * next_lp.unsqueeze(-1)
            y = reward + not_done * 0.99 * next_q
        critic_loss = 0.5 * sum(F.mse_loss(q, y) for q in q_values(critics, obs, action))
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        q_pi = torch.min(*q_values(critics, obs, pi))
        actor_loss = (alpha * log_prob - q_pi).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        with torch.no_grad():
            for t, s in zip(target_params, params):
                t.mul_(1 - 0.005).add_(s, alpha=0.005)

    return step


def make_output_layer(kind: str):
    """Forward + backward of the critics' 256 -> 1 output layer, 2 critics x 256 rows."""
    x = torch.randn(2, BATCH, HIDDEN[-1], requires_grad=True)
    w = (torch.randn(2, HIDDEN[-1], 1) * 0.06).requires_grad_()
    b = torch.zeros(2, 1, 1, requires_grad=True)
    grad = torch.randn(2, BATCH, 1)
    if kind == "baddbmm":
        return lambda: torch.baddbmm(b, x, w).backward(grad)
    return lambda: (torch.sum(x * w.transpose(1, 2), dim=-1, keepdim=True) + b).backward(grad)  # QEnsemble's


def interleaved(arms: dict, reps: int, n: int, scale: float) -> dict[str, float]:
    """Median time per call of each arm (times ``scale``), arms alternating in blocks of ``n``."""
    for fn in arms.values():
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(reps):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append(scale * (time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in times.items()}


def recipe_ms_per_frame(frames: int) -> float:
    cfg = make_config("sac-pendulum", {"total_frames": frames, "eval_every_frames": 10 * frames, "eval_episodes": 1})
    setup = get_recipe("sac-pendulum").build(cfg)
    start: list[float] = []
    setup.trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE(once=1), lambda _: start.append(time.perf_counter()))
    setup.trainer.run()
    wall = time.perf_counter() - start[0]
    setup.close()
    return 1e3 * wall / (frames - cfg.learning_starts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    reps, n = (3, 10) if args.quick else (9, 30)
    steps = {"engine": make_engine_step(), "sb3_style": make_sb3_style_step()}
    med = interleaved(steps, reps, n, 1e3)
    layer = interleaved({"baddbmm": make_output_layer("baddbmm"), "multiply_sum": make_output_layer("sum")},
                        reps, 10 * n, 1e6)
    result = {
        "benchmark": "sac_update",
        "threads": args.threads,
        "batch": BATCH,
        "hidden": list(HIDDEN),
        "engine_ms_per_update": round(med["engine"], 3),
        "sb3_style_ms_per_update": round(med["sb3_style"], 3),
        "ratio_engine_over_sb3_style": round(med["engine"] / med["sb3_style"], 3),
        "output_layer_us": {k: round(v, 1) for k, v in layer.items()},
        "ratio_multiply_sum_over_baddbmm": round(layer["multiply_sum"] / layer["baddbmm"], 3),
        "recipe_ms_per_frame": round(recipe_ms_per_frame(300 if args.quick else 1100), 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
