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
    """Gymnasium id of an Atari game: a ``NoFrameskip-v4`` id, or an ``ALE/*-v5`` id (made with
    frameskip=1, keeping v5's sticky actions) without frame skip (the wrappers skip frames;
    CleanRL: BreakoutNoFrameskip-v4)."""
    wrappers: tuple[str, ...] = ATARI_WRAPPERS
    total_frames: int = 10_000_000
    """Frames (agent steps) to collect in the whole run (CleanRL: total_timesteps=10M)."""
    steps_per_env: int = 128
    """Steps per env copy in each batch (CleanRL: num_steps=128)."""
    num_epochs: int = 4
    """Optim epochs per batch (CleanRL: update_epochs=4)."""
    lr: float = 2.5e-4
    """Adam learning rate at the start, annealed linearly to lr_end (CleanRL: 2.5e-4)."""
    clip_epsilon: float = 0.1
    """Clip range of the probability ratio (CleanRL: clip_coef=0.1, not annealed)."""
    clip_epsilon_end: float = 0.1
    """Clip range at the end of the run: constant 0.1 (CleanRL)."""
    value_clip: float | None = 0.1
    """Clip range of the value prediction around the batch's old values (CleanRL: clip_vloss with
    clip_coef 0.1)."""
    gamma: float = 0.99
    """Discount factor (CleanRL: 0.99)."""
    gae_lambda: float = 0.95
    """GAE lambda (CleanRL: 0.95)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (CleanRL: ent_coef=0.01)."""
    hidden: tuple[int, ...] = ()
    """Hidden widths of the actor and critic heads on the shared Nature CNN (CleanRL: none, linear
    heads)."""
    activation: str = "relu"
    """Activation of any hidden head layers (the Nature CNN uses ReLU)."""
    clip_rewards: bool = True
    """Give the loss the sign of each reward (CleanRL: ClipRewardEnv); reported returns stay the
    game score."""
    eval_every: int = 100
    """Evaluate every this many batches (100 x 1,024 = 102,400 frames) and at the end of the run."""
    num_envs: int = 8
    """Environment copies stepped together by the collector (CleanRL: num_envs=8)."""
    batch_size: int = 256
    """Frames per minibatch (CleanRL: 1,024 / num_minibatches=4)."""

    def __post_init__(self) -> None:
        if self.make_env is None:  # ALE/*-v5 skips frames itself: made with frameskip=1 for the wrappers
            self.env_kwargs = single_frame_kwargs(self.env_id, self.env_kwargs)
        super().__post_init__()


@register("ppo-atari", PPOAtariConfig, "PPO on Atari Breakout (CleanRL's ppo_atari defaults, Nature CNN); any Atari game")
def build_ppo_atari(cfg: PPOAtariConfig) -> Setup:
    return build_ppo(cfg)
