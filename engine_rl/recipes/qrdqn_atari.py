"""``qrdqn-atari``: QR-DQN on Atari (default ``BreakoutNoFrameskip-v4``) with rl-baselines3-zoo's Atari values.

rl-zoo's ``hyperparams/qrdqn.yml`` (``atari``): 10M frames, ``learning_starts=50000``, epsilon
1 -> 0.01 over 2.5% of the run (250k frames), Atari wrapper and 4 stacked frames, ``CnnPolicy``;
SB3-contrib's QR-DQN defaults for the rest: 200 quantiles, Adam lr 5e-5 with epsilon 0.01/32,
``batch_size=32``, ``train_freq=4`` with one gradient step, the target network copied every 10,000
frames, gamma 0.99, no gradient clipping, no double-DQN choice, and a 1M-transition replay. Here as
``dqn-atari`` (:mod:`engine_rl.recipes.dqn_atari`): 8 env copies fill 256-frame batches followed by
64 gradient steps (one per 4 frames), rewards clipped to their sign in replay, the Nature CNN with a
linear head (200 quantiles per action), and a 100k replay, not 1M: 100k stacked frames take about
5.6 GB (``--set buffer_size=1000000 --set replay_storage=memmap`` for SB3-contrib's, about 56 GB of
files). rl-zoo's ``benchmark.md`` reports 393.6 ± 79.8 on Breakout at 10M (one trained agent).
Needs the ``atari`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import FieldChecks
from engine_rl.recipes.dqn_atari import DQNAtariConfig
from engine_rl.recipes.qrdqn_cartpole import build_qrdqn

__all__ = ["QRDQNAtariConfig"]


@dataclass(kw_only=True)
class QRDQNAtariConfig(DQNAtariConfig):
    num_quantiles: int = 200
    """Quantiles of the return estimated per action (rl-zoo: SB3-contrib's default n_quantiles 200)."""
    max_grad_norm: float = 0.0
    """Gradient clipping by global norm (<= 0 disables; SB3-contrib's QR-DQN: max_grad_norm None)."""
    double: bool = False
    """The target network's mean quantiles pick the next action (SB3-contrib's QR-DQN; True: the online
    network's, as double DQN)."""
    learning_starts: int = 50_000
    """Frames collected before the first gradient step (rl-zoo: 50000)."""
    lr: float = 5e-5
    """Adam learning rate (rl-zoo: SB3-contrib's default 5e-5)."""
    eps_frames: int = 250_000
    """Frames over which epsilon decays linearly (rl-zoo: exploration_fraction 0.025 of 10M)."""
    target_update_every: int = 2_500
    """Hard target-network copy every 2,500 optim steps = 10,000 frames (rl-zoo: SB3-contrib's default
    target_update_interval 10000)."""
    buffer_size: int = 100_000
    """Replay capacity in transitions (rl-zoo: SB3-contrib's default 1000000, about 56 GB of stacked
    frames; 100,000 here, as dqn-atari)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        FieldChecks(self).positive_ints("num_quantiles")


@register("qrdqn-atari", QRDQNAtariConfig,
          "QR-DQN on Atari Breakout (rl-zoo's Atari values, Nature CNN, 200 quantiles); any Atari game")
def build_qrdqn_atari(cfg: QRDQNAtariConfig) -> Setup:
    """``qrdqn-cartpole``'s build (``dqn-cartpole``'s with QR-DQN's learner) on this config."""
    return build_qrdqn(cfg)
