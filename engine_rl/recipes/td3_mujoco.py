"""``td3-mujoco``: TD3 on MuJoCo (default ``HalfCheetah-v5``) with rl-baselines3-zoo's hyperparameters.

rl-zoo's ``hyperparams/td3.yml`` for HalfCheetah (and the other MuJoCo envs): ``n_timesteps: 1e6``,
``learning_starts: 10000``, ``noise_type: normal``, ``noise_std: 0.1``; the rest is
Stable-Baselines3's TD3 default: one env, ``buffer_size=1e6``, ``batch_size=256``,
``learning_rate=1e-3``, ``gamma=0.99``, ``tau=0.005``, ``train_freq=1``, ``gradient_steps=1``,
``policy_delay=2``, ``target_policy_noise=0.2``, ``target_noise_clip=0.5``, ``net_arch=[400, 300]``.
This is the TD3 of ``td3-pendulum`` with those values; ``--set env_id=Hopper-v5`` (or any 1-D
Box-action env) trains the same way. Needs the ``mujoco`` extra. Measured at 100k frames (about 25
minutes per seed here): README's results table.

Evaluation: 10 deterministic (noise-free) episodes every 25,000 frames and at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.td3_pendulum import TD3Config, build_td3

__all__ = ["TD3MujocoConfig"]


@dataclass(kw_only=True)
class TD3MujocoConfig(TD3Config):
    env_id: str = "HalfCheetah-v5"
    """Gymnasium id of a 1-D Box-action env (rl-zoo's MuJoCo set: HalfCheetah, Hopper, Walker2d,
    Ant)."""
    total_frames: int = 1_000_000
    """Frames to collect in the whole run (rl-zoo: n_timesteps 1e6)."""
    frames_per_batch: int = 1
    """Frames per collected batch (SB3: train_freq=1)."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (SB3: 1e6)."""
    gamma: float = 0.99
    """Discount factor (SB3: 0.99)."""
    eval_every_frames: int = 25_000
    log_every_frames: int = 1_000


@register("td3-mujoco", TD3MujocoConfig, "TD3 on MuJoCo HalfCheetah-v5 (rl-zoo hyperparameters); any Box-action env")
def build_td3_mujoco(cfg: TD3MujocoConfig) -> Setup:
    return build_td3(cfg)
