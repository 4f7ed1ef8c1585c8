"""``ppo-lstm``: recurrent PPO on CartPole with the velocities hidden, rl-baselines3-zoo's ``ppo_lstm`` values.

The env is rl-zoo's ``CartPoleNoVel-v1``: CartPole-v1 with the cart's and the pole's velocities
set to zero (``wrappers=("MaskVelocity",)``, :mod:`engine_rl.collectors.partial_obs`), so the policy
must remember earlier positions. rl-zoo (``hyperparams/ppo_lstm.yml``, tuned): 8 envs x 32 steps,
one minibatch of 256 (the 8 env rows, each a whole 32-step sequence), 20 epochs, gamma 0.98, GAE
lambda 0.8, lr and clip range linear from 1e-3 and 0.2 to 0, no entropy bonus, observations and
rewards normalized (VecNormalize), 100k frames; sb3-contrib's ``MlpLstmPolicy`` with
``lstm_hidden_size=64``, ``enable_critic_lstm=True`` (the critic has its own LSTM),
``net_arch=dict(pi=[64], vf=[64])``, ReLU, ``ortho_init=False``. Its published agent scores 500
(``benchmark.md``). This is ``ppo-cartpole`` with those values: ``--set core=gru``,
``--set critic_core=shared`` or ``--set env_id=...`` train the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.ppo_cartpole import PPOConfig, build_ppo

__all__ = ["PPOLSTMConfig"]


@dataclass(kw_only=True)
class PPOLSTMConfig(PPOConfig):
    wrappers: tuple[str, ...] = ("MaskVelocity",)
    """Gymnasium wrappers of each env copy: velocities zeroed (rl-zoo's CartPoleNoVel-v1)."""
    hidden: tuple[int, ...] = (64,)
    """Hidden widths of the actor's and the critic's MLPs after their LSTMs (rl-zoo: net_arch pi=[64], vf=[64])."""
    activation: str = "relu"
    """Activation of the hidden layers (rl-zoo: activation_fn=nn.ReLU)."""
    ortho_init: bool = False
    """Orthogonal initialisation (rl-zoo: ortho_init=False, torch's default init)."""
    normalize_observations: bool = True
    """Running mean/std observation normalization (rl-zoo: normalize: True)."""
    normalize_rewards: bool = True
    """Scale rewards by the running std of the discounted return (rl-zoo: normalize: True)."""
    core: str | None = "lstm"
    """A recurrent core between the features and the MLPs: 'lstm' or 'gru' (rl-zoo: MlpLstmPolicy)."""
    core_size: int = 64
    """Units of the recurrent core (rl-zoo: lstm_hidden_size=64)."""
    critic_core: str = "own"
    """What the critic reads: its own LSTM (rl-zoo: enable_critic_lstm=True), 'shared' or 'none'."""


@register("ppo-lstm", PPOLSTMConfig,
          "recurrent PPO (LSTM) on CartPole without velocities (rl-zoo's CartPoleNoVel-v1 ppo_lstm values, 100k frames)")
def build_ppo_lstm(cfg: PPOLSTMConfig) -> Setup:
    return build_ppo(cfg)
