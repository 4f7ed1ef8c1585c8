"""``ppo-atari``: PPO on Atari (default ``BreakoutNoFrameskip-v4``) with CleanRL's ``ppo_atari.py`` defaults.

CleanRL: 8 envs x 128 steps per batch (1,024 frames), 4 minibatches of 256, 4 epochs, Adam lr
2.5e-4 (eps 1e-5) annealed linearly to 0, clip range 0.1 (constant) for the ratio and the value prediction,
gamma 0.99, GAE lambda 0.95, entropy coefficient 0.01, value coefficient 0.5, gradient norm
clipped at 0.5, advantages normalized per minibatch, rewards clipped to their sign for the loss;
the Nature CNN (Mnih et al., 2015) shared by a linear policy head and a linear value head
(orthogonal init); 10M frames (agent steps, each 4 emulator frames). The preprocessing is
:data:`engine_rl.collectors.atari.ATARI_WRAPPERS` (no-op starts, frame skip 4 with max pooling,
84x84 grayscale, FIRE at each life's start, 4 stacked frames); unlike CleanRL, a lost life does
not end the episode for the loss. Pixels stay uint8 in the batches; the network scales them.

Reported returns (training and evaluation) are the game's scores, unclipped. Evaluation: 10
greedy (argmax) episodes every 100 batches (102,400 frames) and at the end. ``--set
env_id=PongNoFrameskip-v4`` (any ``NoFrameskip-v4`` game with FIRE) trains the same way; needs
the ``atari`` extra (``pip install -e .[atari]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.collectors.atari import ATARI_WRAPPERS, single_frame_kwargs
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.ppo_cartpole import PPOConfig, build_ppo

__all__ = ["PPOAtariConfig"]


@dataclass(kw_only=True)
class PPOAtariConfig(PPOConfig):
    env_id: str = "BreakoutNoFrameskip-v4"
    wrappers: tuple[str, ...] = ATARI_WRAPPERS
    total_frames: int = 10_000_000
    steps_per_env: int = 128
    num_epochs: int = 4
    lr: float = 2.5e-4
    clip_epsilon: float = 0.1
    clip_epsilon_end: float = 0.1
    value_clip: float | None = 0.1
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    hidden: tuple[int, ...] = ()
    activation: str = "relu"
    clip_rewards: bool = True
    eval_every: int = 100

    def __post_init__(self) -> None:
        if self.make_env is None:  # ALE/*-v5 skips frames itself: made with frameskip=1 for the wrappers
            self.env_kwargs = single_frame_kwargs(self.env_id, self.env_kwargs)
        super().__post_init__()


@register("ppo-atari", PPOAtariConfig, "PPO on Atari Breakout (CleanRL's ppo_atari defaults, Nature CNN); any Atari game")
def build_ppo_atari(cfg: PPOAtariConfig) -> Setup:
    return build_ppo(cfg)
