"""What the continuous-control off-policy recipes share: config fields, the env check, the build tail.

:class:`OffPolicyConfig` adds the fields of SAC and TD3 to the replay recipes' shared ones
(:class:`~engine_rl.recipes.config_base.ReplayConfig`), with Stable-Baselines3's SAC defaults and
rl-zoo's Pendulum budget (``sac-pendulum``'s docstring); ``sac-pendulum`` and ``td3-pendulum``
subclass it and set the fields whose defaults differ; :func:`box_spaces` reads the env's spaces and
refuses one without a continuous action space; :func:`build_off_policy` assembles the rest
(replay, trainer, evaluation) around a recipe's networks, loss and optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from engine_rl.algos.compile import compile_loss
from engine_rl.algos.encoders import make_encoder
from engine_rl.device import config_devices
from engine_rl.engine import create_trainer
from engine_rl.recipes.base import Setup
from engine_rl.recipes.checks import FieldChecks
from engine_rl.recipes.config_base import ReplayConfig
from engine_rl.recipes.env_source import env_label, recipe_env, recipe_spaces
from engine_rl.replay import ReplayBuffer
from handlers import NaNGuard, NStepTransitions, ReplayExtender, ReplaySampler, ValidationRollout

__all__ = ["OffPolicyConfig", "box_spaces", "build_off_policy", "observation_encoders"]


@dataclass(kw_only=True)
class OffPolicyConfig(ReplayConfig):
    env_id: str = "Pendulum-v1"
    num_envs: int = 1
    total_frames: int = 20_000
    frames_per_batch: int = 1
    optim_steps_per_batch: int | None = None
    """Gradient steps after each batch; None: one per frame collected (SB3: gradient_steps=1 per train_freq=1)."""
    learning_starts: int = 100
    buffer_size: int = 1_000_000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    """Polyak rate of the target networks: SAC's target critics, after every gradient step; TD3's target
    actor and critics, on the actor's update steps."""
    hidden: tuple[int, ...] = (256, 256)
    eval_every_frames: int = 2_000
    """Evaluate every this many frames (and at the end of the run)."""
    log_every_frames: int = 1
    """Frames between train lines of ``metrics.jsonl`` (a batch in which training episodes ended is
    logged too, so every episode's return is kept); 1: every batch. The MuJoCo recipes log every 1,000
    frames: a 1M-frame run of one frame per batch would otherwise write a million lines (400 MB)."""

    def __post_init__(self) -> None:
        """Checks the shared fields, then these (subclasses check their own after); the env itself is
        checked when the recipe is built (``check_env``, with the subclass's ``env_needs``)."""
        super().__post_init__()
        check = FieldChecks(self)
        check.positive_ints("eval_every_frames", "log_every_frames")
        check.positive_ints("optim_steps_per_batch", optional=True)
        check.fractions("tau", zero=False)

    @property
    def steps_per_batch(self) -> int:
        """Gradient steps after each batch (``optim_steps_per_batch`` or ``frames_per_batch``)."""
        return self.frames_per_batch if self.optim_steps_per_batch is None else self.optim_steps_per_batch

    @property
    def eval_every(self) -> int:
        """Batches between evaluations."""
        return max(1, self.eval_every_frames // self.frames_per_batch)

    @property
    def log_every(self) -> int:
        """Batches between train lines."""
        return max(1, self.log_every_frames // self.frames_per_batch)


def box_spaces(cfg: OffPolicyConfig, *, algo: str) -> tuple[gym.Space, gym.spaces.Box]:
    """``(observation_space, action_space)`` of one copy of the config's env; a ``ValueError``
    naming ``algo`` if its actions are not a Box.

    Examples:
        >>> box_spaces(OffPolicyConfig(env_id="CartPole-v1"), algo="sac")
        Traceback (most recent call last):
        ...
        ValueError: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions (use a discrete-action algorithm such as DQN)
    """
    observation_space, action_space = recipe_spaces(cfg)
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"{algo} needs a continuous (Box) action space; {env_label(cfg)} has {type(action_space).__name__} actions "
            "(use a discrete-action algorithm such as DQN)"
        )
    return observation_space, action_space


def observation_encoders(
    cfg: OffPolicyConfig, observation_space: gym.Space, *, algo: str
) -> tuple[nn.Module | None, nn.Module | None]:
    """``(actor_encoder, critic_encoder)`` for ``observation_space``: two independent
    :func:`~engine_rl.algos.encoders.make_encoder` (``(None, None)`` for a 1-D Box)."""
    owner = f"{algo} ({env_label(cfg)})"
    return make_encoder(observation_space, owner=owner), make_encoder(observation_space, owner=owner)


def build_off_policy(
    cfg: OffPolicyConfig,
    *,
    collector: Any,
    loss: torch.nn.Module,
    optimizers: dict[str, torch.optim.Optimizer],
    eval_policy: torch.nn.Module,
    to_save: dict[str, Any],
) -> Setup:
    """The part of an off-policy recipe after its networks: replay, trainer, evaluation.

    A uniform :class:`~engine_rl.replay.ReplayBuffer` of ``min(buffer_size, total_frames)`` rows
    filled on every batch (``n_step`` frames per row: :class:`~handlers.NStepTransitions`) and
    sampled ``batch_size`` rows per optim step; the loss under the config's ``compile``;
    ``steps_per_batch`` optim steps per batch once
    ``learning_starts`` frames are in; a deterministic evaluation every ``eval_every`` batches.
    The recipe moves its loss and exploration to ``config_devices(cfg)[0]`` before building the optimizers
    and attaches its target-network updaters to the returned ``Setup.trainer``.
    """
    device, replay_device = config_devices(cfg)
    rows = min(cfg.buffer_size, cfg.total_frames)  # a too large replay names the field that set its rows
    buffer = ReplayBuffer(rows, seed=cfg.seed, device=replay_device, capacity_label=f"{type(cfg).__name__}: "
                          f"{'buffer_size' if cfg.buffer_size <= cfg.total_frames else 'total_frames'}")
    trainer = create_trainer(
        collector, compile_loss(loss, enabled=cfg.compile), optimizers,
        total_frames=cfg.total_frames,
        learning_starts=cfg.learning_starts,
        optim_steps_per_batch=cfg.steps_per_batch,
    )
    # first: it checks the batch before replay stores it; the loss's parameters name the gradients
    NaNGuard(parameters=loss, nonfinite=cfg.nonfinite).attach(trainer)
    if cfg.n_step > 1:  # each env copy's frames folded into n-step rows; state.batch stays as collected
        NStepTransitions(buffer, n=cfg.n_step, gamma=cfg.gamma, num_envs=cfg.num_envs).attach(trainer)
    else:
        ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, cfg.batch_size, device=device).attach(trainer)

    eval_env = recipe_env(cfg, min(cfg.eval_episodes, 16), device, evaluation=True)
    ValidationRollout(eval_env, eval_policy, num_episodes=cfg.eval_episodes, every=cfg.eval_every,
                      seed=cfg.eval_seed, info_keys=cfg.info_keys).attach(trainer)
    return Setup(
        trainer=trainer,
        to_save={
            "trainer": trainer, "loss": loss, "replay": buffer, "collector": collector, **to_save,
            **{f"{name}_optimizer": opt for name, opt in optimizers.items()},
        },
        eval_policy=eval_policy,
        total_frames=cfg.total_frames,
        log_every=cfg.log_every,
        closers=[collector.shutdown, eval_env.close],
    )
