"""``sac-mujoco``: SAC on MuJoCo (default ``HalfCheetah-v5``) with rl-baselines3-zoo's hyperparameters.

rl-zoo's ``hyperparams/sac.yml`` for HalfCheetah (and Hopper, Walker2d, Ant): ``n_timesteps: 1e6``,
``policy: MlpPolicy``, ``learning_starts: 10000``; the rest is Stable-Baselines3's SAC default:
one env, ``buffer_size=1e6``, ``batch_size=256``, ``learning_rate=3e-4`` (one Adam each for the
actor, the critics and the temperature), ``tau=0.005``, ``gamma=0.99``, ``train_freq=1``,
``gradient_steps=1``, ``ent_coef="auto"`` (initial 1.0, ``target_entropy=-action_dim``), 256x256
ReLU MLPs. This is the SAC of ``sac-pendulum`` with those values; ``--set env_id=Hopper-v5`` (or
any 1-D Box-action env) trains the same way. Needs the ``mujoco`` extra (``pip install -e .[mujoco]``).

Evaluation: 10 deterministic (mean action) episodes every 25,000 frames and at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.sac_pendulum import SACConfig, build_sac

__all__ = ["SACMujocoConfig"]


@dataclass(kw_only=True)
class SACMujocoConfig(SACConfig):
    env_id: str = "HalfCheetah-v5"
    """Gymnasium id of a 1-D Box-action env (rl-zoo's MuJoCo set: HalfCheetah, Hopper, Walker2d,
    Ant)."""
    total_frames: int = 1_000_000
    """Frames to collect in the whole run (rl-zoo: n_timesteps 1e6)."""
    learning_starts: int = 10_000
    """Frames of uniform random actions collected before the first gradient step (rl-zoo: 10000)."""
    lr: float = 3e-4
    """Adam learning rate of the actor, the critics and the temperature (SB3 default: 3e-4)."""
    eval_every_frames: int = 25_000
    log_every_frames: int = 1_000


@register("sac-mujoco", SACMujocoConfig, "SAC on MuJoCo HalfCheetah-v5 (rl-zoo hyperparameters); any Box-action env")
def build_sac_mujoco(cfg: SACMujocoConfig) -> Setup:
    return build_sac(cfg)
