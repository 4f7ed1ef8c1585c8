"""``dqn-atari``: DQN on Atari (default ``BreakoutNoFrameskip-v4``) with rl-baselines3-zoo's Atari values.

rl-zoo's ``hyperparams/dqn.yml`` (``atari``): 10M frames, ``buffer_size=100000``, Adam lr 1e-4,
``batch_size=32``, ``learning_starts=100000``, target network copied every 1,000 frames,
``train_freq=4`` with one gradient step (one update per 4 frames), epsilon 1 -> 0.01 over 10% of
the run, Atari wrapper and 4 stacked frames, ``CnnPolicy`` (the Nature CNN and a linear head);
Stable-Baselines3's defaults for the rest: gamma 0.99, Huber loss, gradient norm clipped at 10,
no double DQN, rewards clipped to their sign. Here 8 env copies fill 256-frame batches followed
by 64 gradient steps (the same one update per 4 frames), the target copied every 250 updates
(1,000 frames), and the preprocessing is :data:`engine_rl.collectors.atari.ATARI_WRAPPERS`
(FIRE at each life's start; a lost life does not end the episode). Frames stay uint8 in
replay: 100,000 transitions hold 2 x 100,000 x 4 x 84 x 84 bytes, about 5.6 GB
(``--set replay_storage=memmap`` puts them in memory-mapped files). Reported returns are game scores.
Evaluation: 10 greedy episodes every 100,352 frames (392 batches) and at the end. Needs the ``atari`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_rl.collectors.atari import ATARI_WRAPPERS, single_frame_kwargs
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.dqn_cartpole import DQNConfig, build_dqn

__all__ = ["DQNAtariConfig"]


@dataclass(kw_only=True)
class DQNAtariConfig(DQNConfig):
    env_id: str = "BreakoutNoFrameskip-v4"
    wrappers: tuple[str, ...] = ATARI_WRAPPERS
    num_envs: int = 8
    """Environment copies stepped together by the collector (rl-zoo: 1; 8 here, same updates per
    frame)."""
    total_frames: int = 10_000_000
    """Frames (agent steps) to collect in the whole run (rl-zoo: n_timesteps 1e7)."""
    optim_steps_per_batch: int = 64
    """Gradient steps after each batch: one per 4 frames (rl-zoo: train_freq 4, gradient_steps 1)."""
    learning_starts: int = 100_000
    """Frames collected before the first gradient step (rl-zoo: 100000)."""
    batch_size: int = 32
    """Transitions per gradient step (rl-zoo: 32)."""
    lr: float = 1e-4
    """Adam learning rate (rl-zoo: 1e-4)."""
    lr_end: float | None = None
    """Constant learning rate (rl-zoo)."""
    hidden: tuple[int, ...] = ()
    """No hidden layer after the Nature CNN's 512 features: a linear Q head (SB3's CnnPolicy)."""
    double: bool = False
    """Plain DQN targets (SB3's DQN)."""
    clip_rewards: bool = True
    """Store the sign of each reward in replay (SB3's AtariWrapper); reported returns stay the game
    score."""
    eps_end: float = 0.01
    """Final exploration epsilon (rl-zoo: 0.01)."""
    eps_frames: int = 1_000_000
    """Frames over which epsilon decays linearly (rl-zoo: 10% of 10M)."""
    target_update_every: int = 250
    """Hard target-network copy every 250 optim steps = 1,000 frames (rl-zoo: target_update_interval
    1000)."""
    eval_every: int = 392
    """Evaluate every this many batches (392 x 256 = 100,352 frames) and at the end of the run."""
    frames_per_batch: int = 256
    """Frames per collected batch (32 steps of 8 copies)."""
    buffer_size: int = 100_000
    """Replay capacity in transitions (rl-zoo: 100000)."""

    def __post_init__(self) -> None:
        if self.make_env is None:  # ALE/*-v5 skips frames itself: made with frameskip=1 for the wrappers
            self.env_kwargs = single_frame_kwargs(self.env_id, self.env_kwargs)
        super().__post_init__()


@register("dqn-atari", DQNAtariConfig, "DQN on Atari Breakout (rl-zoo's Atari values, Nature CNN); any Atari game")
def build_dqn_atari(cfg: DQNAtariConfig) -> Setup:
    return build_dqn(cfg)
