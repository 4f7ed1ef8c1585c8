"""What the continuous-control off-policy recipes share: config fields, the env check, the build tail.

``sac-pendulum`` and ``td3-pendulum`` subclass :class:`OffPolicyConfig` and redeclare the fields
whose defaults (and rl-zoo notes) differ; :func:`box_spaces` reads the env's spaces and
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
from engine_rl.recipes.checks import VECTORIZATIONS, FieldChecks
from engine_rl.recipes.env_options import EnvOptions
from engine_rl.recipes.env_source import env_label, recipe_env, recipe_spaces
from engine_rl.replay import ReplayBuffer
from handlers import NaNGuard, ReplayExtender, ReplaySampler, ValidationRollout

__all__ = ["OffPolicyConfig", "box_spaces", "build_off_policy", "observation_encoders"]


@dataclass(kw_only=True)
class OffPolicyConfig(EnvOptions):
    env_id: str = "Pendulum-v1"
    """Gymnasium id of an environment with a continuous (Box) action space."""
    num_envs: int = 1
    """Environment copies stepped together by the collector (rl-zoo: 1)."""
    vectorization: str = "auto"
    """Gymnasium vectorization: 'auto' (the env's numpy-batched vector entry point if it registers
    one, else 'sync'), 'vector_entry_point', 'sync' or 'async'."""
    total_frames: int = 20_000
    """Frames to collect in the whole run (rl-zoo: n_timesteps 20000)."""
    frames_per_batch: int = 1
    """Frames per collected batch, a multiple of num_envs (SB3: train_freq * num_envs)."""
    optim_steps_per_batch: int | None = None
    """Gradient steps after each batch; None: one per frame collected (SB3: gradient_steps=1 per train_freq=1)."""
    learning_starts: int = 100
    """Frames of uniform random actions collected before the first gradient step (SB3: 100)."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (SB3: 1e6; capped at total_frames, which never fill more)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam learning rate of every network (rl-zoo: 1e-3)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target networks."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic (on their encoders' features for image
    and Dict observations: ``engine_rl.algos.encoders``)."""
    eval_every_frames: int = 2_000
    """Evaluate every this many frames (and at the end of the run)."""
    log_every_frames: int = 1
    """Frames between train lines of ``metrics.jsonl`` (a batch in which training episodes ended is
    logged too, so every episode's return is kept); 1: every batch."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes per evaluation."""
    eval_seed: int = 10_000
    """Seed of the evaluation env (the same at every evaluation, so scores compare)."""
    info_keys: tuple[str, ...] = ()
    """Scalar entries of the env's ``info`` to record per frame and average over the episodes that
    finish in each batch (``train_info_<key>`` in metrics.jsonl) and over the evaluation episodes
    (``eval_info_<key>``), e.g. ``--set info_keys=is_success``."""
    wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers applied to each env copy (training and evaluation), in order: class names
    in ``gymnasium.wrappers``, keyword arguments as literals, e.g. ``--set wrappers=FlattenObservation``
    (Discrete, Tuple or Dict observations to a 1-D Box) or ``--set 'wrappers=TimeLimit(max_episode_steps=200)'``.
    None by default."""
    compile: bool = False
    """Run the loss (forward and backward) under ``torch.compile`` (``engine_rl.algos.compile``; CUDA
    graphs on a GPU); falls back to eager with one warning if compiling fails. Off by default:
    on CPU it has not been faster than eager (``docs/benchmarks.md``)."""
    nonfinite: str = "stop"
    """What a NaN or Inf in a loss or a gradient does: 'stop' (the reference: raise NonFiniteError
    naming the loss entry or parameter, the optim step and the frames, before the optimizer step,
    so the weights and checkpoints stay finite) or 'skip' (drop that step's gradients, so no weight
    or optimizer state changes, and count it: ``nonfinite_skipped`` in metrics.jsonl). A NaN or Inf
    in observations or rewards always stops (handlers.NaNGuard)."""
    device: str = "auto"
    """Where the networks, the loss, the collected batches and the updates live: 'auto' (CUDA when
    available, else the CPU), 'cpu', 'cuda' or 'cuda:N' (``--device``). A run may resume on another
    device (``--resume --device cpu``), continuing from its checkpoint (not bitwise like a same-device resume)."""
    replay_device: str = "auto"
    """Where the replay rows live: 'auto' (the training device), 'cpu', 'cuda' or 'cuda:N'; samples
    move to the training device."""
    seed: int = 0
    """Seed of torch, the collector's envs, the exploration and the replay sampler."""

    def __post_init__(self) -> None:
        """Checks every field (subclasses check their own after); the env itself is checked when the
        recipe is built (``check_env``, with the subclass's ``env_needs``)."""
        owner = type(self).__name__
        check = FieldChecks(self)
        check.positive_ints("num_envs", "total_frames", "frames_per_batch", "buffer_size", "batch_size",
                            "eval_every_frames", "log_every_frames", "eval_episodes")
        check.positive_ints("optim_steps_per_batch", optional=True)
        check.nonnegative_ints("learning_starts", "eval_seed", "seed")
        check.seeds("eval_seed", "seed")
        check.choice("vectorization", VECTORIZATIONS)
        check.choice("env_backend", ("gymnasium", "torch"))
        if self.env_backend == "torch":
            check.torch_env()
        check.choice("nonfinite", ("stop", "skip"))
        check.devices("device", "replay_device")
        check.positive("lr")
        check.fractions("gamma")
        check.fractions("tau", zero=False)
        check.widths("hidden")
        check.names("info_keys", "wrappers")
        check.kwargs("env_kwargs")
        check.bools("compile")
        if self.frames_per_batch % self.num_envs:
            raise ValueError(
                f"{owner}: frames_per_batch ({self.frames_per_batch}) must be a multiple of num_envs ({self.num_envs})"
            )
        if self.learning_starts > self.total_frames:
            raise ValueError(
                f"{owner}: learning_starts ({self.learning_starts}) exceeds total_frames ({self.total_frames})"
            )
        check.at_least("buffer_size", "batch_size")
        check.env_fields()  # the env itself: check_env(), when the recipe is built

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
    filled on every batch and sampled ``batch_size`` rows per optim step; the loss under the
    config's ``compile``; ``steps_per_batch`` optim steps per batch once
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
