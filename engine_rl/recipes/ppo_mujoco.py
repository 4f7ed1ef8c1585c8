"""``ppo-mujoco``: PPO on MuJoCo (default ``Hopper-v5``) with CleanRL's continuous-action defaults.

CleanRL's ``ppo_continuous_action.py``: one env, 2,048 steps per batch, 32 minibatches of 64,
10 epochs, Adam lr 3e-4 (eps 1e-5) annealed linearly to 0, clip range 0.2 (constant) for the ratio
and for the value prediction, gamma 0.99, GAE lambda 0.95, no entropy bonus, value coefficient 0.5,
gradient norm clipped at 0.5, advantages normalized per minibatch; separate 64x64 tanh actor
and critic (orthogonal init), a Gaussian policy with a state-independent log std starting at 0,
actions clipped to the bounds, observations normalized by running statistics and rewards
scaled by the running std of the discounted return (both clamped to ±10); 1M frames. This is
the PPO of ``ppo-cartpole`` with those values: ``--set env_id=HalfCheetah-v5`` (or any
Box-action env) trains the same way. Needs the ``mujoco`` extra (``pip install -e .[mujoco]``).

Reported returns are the environment's own: reward scaling changes only what the loss sees.
Evaluation: 10 deterministic (mean action) episodes every 25 batches (51,200 frames) and at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.ppo_cartpole import PPOConfig, build_ppo

__all__ = ["PPOMujocoConfig"]


@dataclass(kw_only=True)
class PPOMujocoConfig(PPOConfig):
    env_id: str = "Hopper-v5"
    """Gymnasium id of a Box-action env (CleanRL's benchmark: Hopper, HalfCheetah, Walker2d, ...)."""
    num_envs: int = 1
    """Environment copies stepped together by the collector (CleanRL: num_envs=1)."""
    total_frames: int = 1_000_000
    """Frames to collect in the whole run (CleanRL: total_timesteps=1M)."""
    steps_per_env: int = 2048
    """Steps per env copy in each batch (CleanRL: num_steps=2048)."""
    batch_size: int = 64
    """Frames per minibatch (CleanRL: 2048 / num_minibatches=32)."""
    num_epochs: int = 10
    """Optim epochs per batch (CleanRL: update_epochs=10)."""
    lr: float = 3e-4
    """Adam learning rate at the start, annealed linearly to lr_end (CleanRL: 3e-4)."""
    clip_epsilon_end: float = 0.2
    """Clip range at the end of the run: constant 0.2 (CleanRL: clip_coef=0.2, not annealed)."""
    value_clip: float | None = 0.2
    """Clip range of the value prediction around the batch's old values (CleanRL: clip_vloss, 0.2)."""
    gamma: float = 0.99
    """Discount factor (CleanRL: 0.99)."""
    gae_lambda: float = 0.95
    """GAE lambda (CleanRL: 0.95)."""
    normalize_observations: bool = True
    """Running mean/std observation normalization inside the policy, clamped to ±10 (CleanRL: on)."""
    normalize_rewards: bool = True
    """Scale rewards by the running std of the discounted return, clamped to ±10 (CleanRL: on)."""
    eval_every: int = 25
    """Evaluate every this many batches (25 x 2,048 = 51,200 frames) and at the end of the run."""


@register("ppo-mujoco", PPOMujocoConfig, "PPO on MuJoCo Hopper-v5 (CleanRL's defaults, 1M frames); any Box-action env")
def build_ppo_mujoco(cfg: PPOMujocoConfig) -> Setup:
    return build_ppo(cfg)
