"""``dqn-cartpole``: double DQN on CartPole-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo trains one env with ``train_freq=256`` and ``gradient_steps=128`` (half an update per
frame), lr 2.3e-3, batch 64, 256x256 MLP, epsilon 1 -> 0.04 over 16% of 50k frames, target
refreshed between training phases. Here: 32 env copies filling a 256-frame batch, then
128 optim steps; the target network is hard-copied every 128 optim steps (once per batch);
double-DQN targets; and the learning rate decays linearly to 0 (``lr_end``), which keeps the
final policy from the late collapses DQN is known for on CartPole. Each batch's 128 samples are
drawn in one go, with the target network's values for all of them from a few large forward
passes (``sample_ahead``; the target network only changes between batches), run on a worker
thread, 1024 rows at a time, while the optim steps train on the rows already done
(``target_worker``). The loss computes the Q network's gradients itself, with the backward
written by hand (``fused_loss``: bitwise autograd's gradients, without autograd's bookkeeping).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import gymnasium as gym
import torch
from ignite.engine import Events
from ignite.handlers import PiecewiseLinear

from engine_rl.algos import DQNLoss, QValuePolicy, mlp
from engine_rl.algos.dqn import TARGET_CHUNK_ROWS
from engine_rl.collectors import AsyncCollector, GymCollector, SharedReplayBuffer, make_vec_env
from engine_rl.engine import create_trainer
from engine_rl.optim import FastAdam
from engine_rl.exploration import EpsilonGreedy
from engine_rl.recipes.base import Setup, register
from engine_rl.replay import PrioritizedSampler, ReplayBuffer, UniformSampler
from handlers import (
    GradClipper,
    PriorityUpdater,
    ReplayExtender,
    ReplaySampler,
    TargetNetUpdater,
    ValidationRollout,
    WeightSync,
)

__all__ = ["DQNConfig", "build_dqn"]


@dataclass(kw_only=True)
class DQNConfig:
    env_id: str = "CartPole-v1"
    """Gymnasium id of an environment with a discrete action space."""
    num_envs: int = 32
    """Environment copies stepped together by the collector (rl-zoo: 1). More copies decorrelate
    each batch: over seeds 0-9 the run ends at a mean return of 341 with 1 copy, 384 with 4,
    430 with 8, 432 with 16, 485 with 32 and 391 with 64; over seeds 0-19, 453 with 8 and 469
    with 32 (``README.md``)."""
    vectorization: str = "vector_entry_point"
    """Gymnasium vectorization: 'vector_entry_point' (numpy-batched, fastest when the env has one), 'sync' or 'async'."""
    total_frames: int = 50_000
    """Frames to collect in the whole run."""
    frames_per_batch: int = 256
    """Frames per collected batch (a multiple of num_envs)."""
    optim_steps_per_batch: int = 128
    """Gradient steps after each batch (rl-zoo: gradient_steps)."""
    learning_starts: int = 1_000
    """Frames collected before the first gradient step."""
    buffer_size: int = 100_000
    """Replay capacity in transitions."""
    batch_size: int = 64
    """Transitions per gradient step."""
    lr: float = 2.3e-3
    """Adam learning rate at the start of the run."""
    lr_end: float | None = 0.0
    """Learning rate reached linearly at the end of the run (None: constant ``lr``). The decay
    steadies the end-of-run policy (on the first development CPU seeds 0/1/2 ended at 500/500/500,
    and one of three collapsed to 36 with a constant lr; with 8 env copies on an AVX-512 CPU seeds 0-4 end at
    296/500/500/500/479)."""
    gamma: float = 0.99
    """Discount factor."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the Q network."""
    double: bool = True
    """Double DQN targets (online net picks, target net values)."""
    eps_start: float = 1.0
    """Initial exploration epsilon."""
    eps_end: float = 0.04
    """Final exploration epsilon."""
    eps_frames: int = 8_000
    """Frames over which epsilon decays linearly (rl-zoo: 16% of 50k)."""
    target_update_every: int = 128
    """Hard target-network copy every this many optim steps (ignored when ``target_tau`` is set)."""
    target_tau: float | None = None
    """Soft (Polyak) target update rate applied every optim step instead of hard copies (None: hard)."""
    sample_ahead: bool = True
    """Draw a batch's ``optim_steps_per_batch`` samples in one go and run the target network over
    all of them in 1024-row passes (``ReplaySampler(prefetch=...)`` with
    ``DQNLoss.add_target_values``): the same rows as one draw per step, and the same targets
    while the target network is unchanged (the loss checks; with ``target_tau`` it changes every
    step, so only the sampling is done ahead). Ignored with ``prioritized`` or ``async_collection``."""
    target_worker: bool | None = None
    """With ``sample_ahead`` and hard target copies: run those target-network passes on a worker
    thread, 1024 rows at a time, while the optim steps train on the rows already done
    (``ReplaySampler(background=True)``). The same values; on CPU the passes use the second core.
    ``None`` (the default): on if torch runs one intra-op thread when the recipe is built, off with
    more (``--threads 2``), where both threads' ops would split over the same cores and
    oversubscribe them (seed 0 without evaluations on this 2-core box: 97 and 100 s with the
    worker, 48 and 45 s without)."""
    fused_loss: bool = True
    """Compute the Q network's gradients in the loss with a hand-written backward, outside
    autograd, when the network qualifies (the default MLP; ``engine_rl.algos.dqn_fused``,
    ``DQNLoss(write_gradients=True)``): bitwise autograd's gradients, so the same training, in
    less time (``tests/benchmarks/dqn_step.py``, ``README.md``); false gives autograd's path."""
    max_grad_norm: float = 10.0
    """Gradient clipping by global norm (<= 0 disables)."""
    prioritized: bool = False
    """Prioritized replay (sum tree) instead of uniform sampling."""
    alpha: float = 0.6
    """Prioritized replay: priority exponent."""
    beta: float = 0.4
    """Prioritized replay: initial importance-sampling exponent (annealed to 1 over the run)."""
    eval_every: int = 4
    """Evaluate every this many batches (and at the end of the run); the best evaluation's policy
    is the run's best checkpoint. Every 4 batches (1,024 frames) the best checkpoints of seeds 0-9
    score 497.0 on average on fresh episodes (all >= 475), every 20 batches 491.6 (9 of 10); the
    extra evaluations cost a few seconds per run."""
    eval_episodes: int = 10
    """Deterministic (greedy) evaluation episodes per evaluation."""
    eval_seed: int = 10_000
    """Seed of the evaluation env (the same at every evaluation, so scores compare)."""
    async_collection: bool = False
    """Collect in a background process (:class:`~engine_rl.collectors.AsyncCollector`) that writes
    the replay buffer while the learner optimizes; learner weights go to it after every batch."""
    info_keys: tuple[str, ...] = ()
    """Scalar entries of the env's ``info`` to record per frame and average over the episodes that
    finish in each batch (``train_info_<key>`` in metrics.jsonl) and over the evaluation episodes
    (``eval_info_<key>``), e.g. ``--set info_keys=is_success``."""
    seed: int = 0
    """Seed of torch, the collector's envs and exploration, and the replay sampler."""

    def __post_init__(self) -> None:
        for name in ("num_envs", "total_frames", "frames_per_batch", "optim_steps_per_batch", "buffer_size",
                     "batch_size", "eval_every", "eval_episodes", "target_update_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DQNConfig: {name} must be a positive int, got {value!r}")
        if self.frames_per_batch % self.num_envs:
            raise ValueError(
                f"DQNConfig: frames_per_batch ({self.frames_per_batch}) must be a multiple of num_envs ({self.num_envs})"
            )
        if self.learning_starts > self.total_frames:
            raise ValueError(
                f"DQNConfig: learning_starts ({self.learning_starts}) exceeds total_frames ({self.total_frames})"
            )
        if not 0 <= self.eps_end <= self.eps_start <= 1:
            raise ValueError(f"DQNConfig: need 0 <= eps_end <= eps_start <= 1, got {self.eps_end}, {self.eps_start}")

    @property
    def num_batches(self) -> int:
        """Batches in the run."""
        return -(-self.total_frames // self.frames_per_batch)


@register("dqn-cartpole", DQNConfig,
          "Double DQN on CartPole-v1 (rl-zoo hyperparameters), 50k frames; 17 of 20 seeds end >= 475, "
          "the best checkpoint (RUN/best/) 19 of 20 on fresh episodes")
def build_dqn(cfg: DQNConfig) -> Setup:
    torch.manual_seed(cfg.seed)
    env = make_vec_env(cfg.env_id, cfg.num_envs, mode=cfg.vectorization)
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        env.close()
        raise ValueError(
            f"dqn needs a discrete action space; {cfg.env_id} has {type(env.single_action_space).__name__} "
            "actions (use a continuous-control algorithm such as SAC)"
        )
    obs_dim = int(env.single_observation_space.shape[0])
    num_actions = int(env.single_action_space.n)

    qnet = mlp(obs_dim, num_actions, cfg.hidden)
    greedy = QValuePolicy(qnet)
    explore = EpsilonGreedy(
        greedy, num_actions=num_actions, eps_start=cfg.eps_start, eps_end=cfg.eps_end,
        annealing_frames=cfg.eps_frames, seed=cfg.seed,
    )
    if not cfg.async_collection:
        collector = GymCollector(env, explore, frames_per_batch=cfg.frames_per_batch, seed=cfg.seed,
                                 info_keys=cfg.info_keys)
    loss = DQNLoss(qnet, gamma=cfg.gamma, double=cfg.double, write_gradients=cfg.fused_loss)
    optimizer = FastAdam(qnet.parameters(), lr=cfg.lr)  # the fused kernel, with a lean step()

    total_steps = cfg.num_batches * cfg.optim_steps_per_batch
    sampler = (
        PrioritizedSampler(alpha=cfg.alpha, beta=cfg.beta, beta_end=1.0, beta_annealing_steps=total_steps)
        if cfg.prioritized
        else UniformSampler()
    )
    buffer_cls = SharedReplayBuffer if cfg.async_collection else ReplayBuffer
    buffer = buffer_cls(cfg.buffer_size, sampler=sampler, seed=cfg.seed)
    if cfg.async_collection:  # the worker builds its own env copies and writes the buffer itself
        env.close()
        env_fn = partial(make_vec_env, cfg.env_id, cfg.num_envs, mode=cfg.vectorization)
        collector = AsyncCollector(env_fn, explore, frames_per_batch=cfg.frames_per_batch, buffer=buffer, seed=cfg.seed,
                                   info_keys=cfg.info_keys)

    trainer = create_trainer(
        collector, loss, optimizer,
        total_frames=cfg.total_frames,
        learning_starts=cfg.learning_starts,
        optim_steps_per_batch=cfg.optim_steps_per_batch,
    )
    if cfg.lr_end is not None:
        # stock Ignite scheduler, stepped once per batch
        schedule = PiecewiseLinear(optimizer, "lr", milestones_values=[(0, cfg.lr), (cfg.num_batches, cfg.lr_end)])
        trainer.add_event_handler(Events.ITERATION_STARTED, schedule)
    if cfg.async_collection:
        WeightSync(explore, collector).attach(trainer)
        collector.attach(trainer)  # stop the worker before the final evaluation
    else:
        ReplayExtender(buffer).attach(trainer)
    ahead = cfg.sample_ahead and not cfg.prioritized and not cfg.async_collection
    targets_ahead = ahead and cfg.target_tau is None
    replay_sampler = ReplaySampler(
        buffer, cfg.batch_size,
        prefetch=cfg.optim_steps_per_batch if ahead else 1,
        transform=loss.add_target_values if targets_ahead else None,
        transform_rows=-(-TARGET_CHUNK_ROWS // cfg.batch_size) * cfg.batch_size if targets_ahead else None,
        background=targets_ahead and (cfg.target_worker if cfg.target_worker is not None
                                      else torch.get_num_threads() == 1),
        # what the loss and the priority updates read: uniform weights (all ones) are left out,
        # so the loss skips multiplying by them (the same values)
        keys=[*loss.in_keys, "index", *(["weight"] if cfg.prioritized else [])],
    )
    replay_sampler.attach(trainer)
    if cfg.prioritized:
        PriorityUpdater(buffer).attach(trainer)
    if cfg.max_grad_norm > 0:
        GradClipper(qnet, max_norm=cfg.max_grad_norm).attach(trainer)
    if cfg.target_tau is None:
        TargetNetUpdater(qnet, loss.target_qnet, every=cfg.target_update_every).attach(trainer)
    else:
        TargetNetUpdater(qnet, loss.target_qnet, tau=cfg.target_tau).attach(trainer)

    eval_env = make_vec_env(cfg.env_id, min(cfg.eval_episodes, 16), mode=cfg.vectorization)
    validation = ValidationRollout(eval_env, greedy, num_episodes=cfg.eval_episodes, every=cfg.eval_every,
                                   seed=cfg.eval_seed, info_keys=cfg.info_keys)
    validation.attach(trainer)

    return Setup(
        trainer=trainer,
        to_save={
            "trainer": trainer, "qnet": qnet, "target_qnet": loss.target_qnet, "optimizer": optimizer,
            "replay": buffer, "collector": collector, "exploration": explore,
        },
        eval_policy=greedy,
        total_frames=cfg.total_frames,
        closers=[collector.shutdown, eval_env.close, replay_sampler.close],
    )
