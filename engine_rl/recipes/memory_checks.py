"""What a recipe's build checks of its sizes before it allocates: the batch and the networks.

Each recipe's build calls :func:`check_sizes` once it knows its env's spaces and its devices, before
it makes its env copies or networks: a size the machine cannot hold is one ``ValueError`` naming
the field (:func:`engine_rl.device.check_fits`), and a build that will work but stay silent for
long says so first in one line on stderr (:func:`announce_long_batches`). The replay, allocated
when the first batch comes, checks itself then (:class:`~engine_rl.replay.ReplayBuffer`'s
``capacity_label`` names the field).

Examples:
    >>> import gymnasium as gym
    >>> from engine_rl.recipes.dqn_cartpole import DQNConfig
    >>> cfg = DQNConfig(hidden=(10**7,))
    >>> check_sizes(cfg, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), device="cpu", networks=1, target=True,
    ...              limit=(4 * 2**30, "this machine has 4.0 GiB of memory"))
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: hidden=(10000000,) needs about 6.1 GiB for the networks' updates (1 network of 70,000,002 parameters with gradients, Adam's moments and a target copy; activations of 64-row batches) but this machine has 4.0 GiB of memory; lower hidden or batch_size
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import gymnasium as gym
import ignite.distributed as idist
import torch

from engine_rl.device import check_fits, format_bytes, frame_nbytes, mlp_parameters
from engine_rl.recipes.env_source import env_label

__all__ = ["LONG_BATCH_FRAMES", "MANY_ENV_COPIES", "announce_long_batches", "check_sizes"]

#: Features the image and Dict encoders give the MLPs (the Nature CNN's); their own weights are not counted.
ENCODER_FEATURES = 512

#: Gymnasium env copies from which making them is announced: gymnasium makes and resets a copy of
#: even CartPole in about 0.3 ms ('sync'), a MuJoCo or Atari copy in several ms, so 10,000 copies
#: are seconds to minutes of silence before the first batch.
MANY_ENV_COPIES = 10_000

#: Frames per batch from which batches are announced: the progress bar moves once a batch, and a
#: batch of a million frames is tens of seconds of collection at gymnasium's speeds (PPO then runs
#: 20 epochs of 256-frame minibatches over it: 78,000 optim steps, minutes) before it moves.
LONG_BATCH_FRAMES = 1_000_000


def _batch_setting(cfg: Any) -> tuple[str, str]:
    """The batch size as the config sets it, and what lowers it."""
    if "frames_per_batch" in {f.name for f in dataclasses.fields(cfg)}:
        return f"frames_per_batch={cfg.frames_per_batch}", "frames_per_batch"
    return f"num_envs * steps_per_env={cfg.frames_per_batch}", "num_envs or steps_per_env"


def _shape(space: gym.Space) -> str:
    """A space in a few words: ``shape (10000000, 4) float32`` for a Box (its repr prints its bounds)."""
    if isinstance(space, gym.spaces.Box):
        return f"shape {space.shape} {space.dtype}"
    return type(space).__name__


def check_sizes(
    cfg: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    device: torch.device | str,
    networks: int,
    target: bool,
    outputs_per_action: str | None = None,
    limit: tuple[int | None, str] | None = None,
) -> None:
    """Refuse a config whose batch or networks need more memory than the machine (or the CUDA
    device they live on) has: a ``ValueError`` naming the field, checked in that order; then
    :func:`announce_long_batches`. (A replay is checked by its storage when its first rows fix
    their size: it allocates nothing before, so an evaluation never pays for it.)

    Args:
        cfg: the recipe's config (``num_envs``, ``frames_per_batch``, ``hidden``, ``batch_size``,
            ``wrappers``, ``env_backend``).
        observation_space, action_space: one env copy's.
        device: where the networks and updates live (and a torch env's batches).
        networks: MLPs of widths ``cfg.hidden`` trained on ``batch_size`` rows (DQN 1, PPO 2: actor
            and critic, SAC and TD3 3: actor and two critics).
        target: the networks have target copies.
        outputs_per_action: the config field whose value multiplies the networks' outputs per action
            (QR-DQN's ``num_quantiles``); None: one output per action.
        limit: ``(bytes, how to say it)`` instead of each device's memory (tests).
    """
    owner = type(cfg).__name__
    frame = frame_nbytes(observation_space, action_space)
    wrappers = tuple(getattr(cfg, "wrappers", ()))
    shaped = f": observations of {_shape(observation_space)} after wrappers {', '.join(wrappers)}" if wrappers else ""
    setting, fix = _batch_setting(cfg)
    if wrappers:
        fix += " or the observations the wrappers make"
    check_fits(
        frame * cfg.frames_per_batch, owner=owner, setting=setting, what="to collect a batch",
        each=f"{format_bytes(frame)} a frame{shaped}", fix=fix, device=device if cfg.env_backend == "torch" else "cpu",
        limit=limit,
    )
    vector = isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1
    inputs = int(observation_space.shape[0]) if vector else ENCODER_FEATURES
    per_action = 1 if outputs_per_action is None else getattr(cfg, outputs_per_action)
    parameters = mlp_parameters(inputs, gym.spaces.flatdim(action_space) * per_action, cfg.hidden)
    setting = f"hidden={cfg.hidden}" + ("" if outputs_per_action is None else f", {outputs_per_action}={per_action}")
    copies = 5 if target else 4  # weights, gradients, Adam's two moments (and the target's weights), float32
    activations = cfg.batch_size * sum(cfg.hidden) * 2  # each layer's output and its activation, kept for backward
    check_fits(
        networks * 4 * (parameters * copies + activations), owner=owner, setting=setting,
        what="for the networks' updates",
        each=f"{networks} network{'s' if networks > 1 else ''} of {parameters:,} parameters with gradients, "
             f"Adam's moments{' and a target copy' if target else ''}; activations of {cfg.batch_size}-row batches",
        fix="hidden or batch_size" if outputs_per_action is None else f"hidden, batch_size or {outputs_per_action}",
        device=device, limit=limit,
    )
    announce_long_batches(cfg, observation_space, action_space)


def announce_long_batches(cfg: Any, observation_space: gym.Space, action_space: gym.Space) -> None:
    """One line on stderr (rank 0) before a build that makes :data:`MANY_ENV_COPIES` gymnasium env
    copies or more, or collects batches of :data:`LONG_BATCH_FRAMES` frames or more: how many, how
    large, and that the progress bar moves once a batch."""
    copies = cfg.num_envs if cfg.env_backend != "torch" else 0
    frames = cfg.frames_per_batch
    if (copies < MANY_ENV_COPIES and frames < LONG_BATCH_FRAMES) or idist.get_rank() != 0:
        return
    making = f"making {copies:,} copies of {env_label(cfg)} (num_envs) for " if copies >= MANY_ENV_COPIES else ""
    size = format_bytes(frames * frame_nbytes(observation_space, action_space))
    print(f"engine-rl: {type(cfg).__name__}: {making}batches of {frames:,} frames (about {size} each); "
          "the progress bar moves once a batch", file=sys.stderr, flush=True)
