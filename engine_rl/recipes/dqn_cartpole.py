"""``dqn-cartpole``: double DQN on CartPole-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo trains one env with ``train_freq=256`` and ``gradient_steps=128`` (half an update per
frame), lr 2.3e-3, batch 64, a 100k replay, learning from 1,000 frames on, gamma 0.99, 256x256
MLP, epsilon 1 -> 0.04 over 16% of 50k frames, target refreshed between training phases. Here:
32 env copies filling a 256-frame batch (each batch 8 steps of 32 episodes rather than 256 steps
of one; 32 copies ended higher than 1 to 16, ``docs/benchmarks.md``), then 128 optim steps; the
target network is hard-copied every 128 optim steps (once per batch);
double-DQN targets; and the learning rate decays linearly to 0 (``lr_end``), which keeps the
final policy from the late collapses DQN is known for on CartPole.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import gymnasium as gym
import torch
from ignite.engine import Engine, Events
from ignite.handlers import PiecewiseLinear
from torch import nn

from engine_rl.algos import DQNLoss, QValuePolicy, dueling_mlp, mlp
from engine_rl.algos.compile import compile_loss
from engine_rl.algos.encoders import make_encoder
from engine_rl.algos.exploration import EpsilonGreedy
from engine_rl.algos.optimizers import adam
from engine_rl.collectors import AsyncCollector
from engine_rl.collectors.env_factory import callable_name
from engine_rl.device import config_devices
from engine_rl.engine import create_trainer
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import EnvNeeds, FieldChecks
from engine_rl.recipes.config_base import ReplayConfig
from engine_rl.recipes.collection import attach_collector, train_collector
from engine_rl.recipes.env_source import env_label, recipe_env, recipe_spaces, recipe_vec_env
from engine_rl.recipes.memory_checks import check_sizes
from engine_rl.recipes.search import OFF_POLICY_NETS, discount, network, power_of_two
from engine_rl.replay import PrioritizedSampler, ReplayBuffer, SharedReplayBuffer, UniformSampler
from handlers import (
    GradClipper,
    NaNGuard,
    NStepTransitions,
    PriorityUpdater,
    ReplayExtender,
    ReplaySampler,
    RewardClipper,
    TargetNetUpdater,
    ValidationRollout,
    WeightSync,
)

__all__ = ["DQNConfig", "Learner", "build_dqn", "dqn_learner", "dqn_search_space"]


@dataclass(kw_only=True)
class DQNConfig(ReplayConfig):
    env_id: str = "CartPole-v1"
    num_envs: int = 32
    """Environment copies stepped together by the collector (rl-zoo: 1). More copies decorrelate
    each batch (8 steps of 32 episodes rather than 256 steps of one); 32 ended higher than 1-16
    over seeds 0-9 (``docs/benchmarks.md``)."""
    total_frames: int = 50_000
    frames_per_batch: int = 256
    optim_steps_per_batch: int = 128
    """Gradient steps after each batch (rl-zoo: gradient_steps)."""
    learning_starts: int = 1_000
    buffer_size: int = 100_000
    replay_storage: str = "memory"
    """'memory' (preallocated tensors) or 'memmap' (memory-mapped files in a temporary folder, for
    replays of pixels larger than RAM; samples are read into the training device)."""
    batch_size: int = 64
    lr: float = 2.3e-3
    """Adam learning rate at the start of the run."""
    lr_end: float | None = 0.0
    """Learning rate reached linearly at the end of the run (None: constant ``lr``, as rl-zoo).
    The decay steadies the end-of-run policy against DQN's late collapses on CartPole."""
    gamma: float = 0.99
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the Q network's MLP; for image observations (uint8, kept uint8 in
    replay) the MLP sits on the Nature CNN's 512 features (``engine_rl.algos.encoders``)."""
    double: bool = True
    """Double DQN targets (online net picks, target net values)."""
    dueling: bool = False
    """Dueling Q head (Wang et al. 2016): a value and an advantage stream on the last hidden layer (or
    the Nature CNN's features), ``Q = V + A - mean_a A`` (``engine_rl.algos.networks.DuelingHead``)."""
    clip_rewards: bool = False
    """Store the sign of each reward in replay (-1, 0, +1; Mnih et al. 2015, for Atari scores);
    reported returns stay the env's own."""
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
    max_grad_norm: float = 10.0
    """Gradient clipping by global norm (<= 0 disables)."""
    prioritized: bool = False
    """Prioritized replay (sum tree) instead of uniform sampling."""
    alpha: float = 0.6
    """Prioritized replay: priority exponent."""
    beta: float = 0.4
    """Prioritized replay: initial importance-sampling exponent (annealed to 1 over the run)."""
    eval_every: int = 4
    """Evaluate every this many batches (1,024 frames; and at the end of the run); the best
    evaluation's policy is kept as the run's best checkpoint (``RUN/best/``)."""
    async_collection: bool = False
    """Collect in a background process (:class:`~engine_rl.collectors.AsyncCollector`) that writes
    the replay buffer while the learner optimizes; learner weights go to it after every batch."""
    eval_episodes: int = 10
    """Deterministic (greedy) evaluation episodes per evaluation."""

    env_needs: ClassVar[EnvNeeds] = EnvNeeds(algo="dqn", actions="discrete")

    def __post_init__(self) -> None:
        super().__post_init__()
        check = FieldChecks(self)
        check.positive_ints("optim_steps_per_batch", "eval_every", "target_update_every")
        check.nonnegative_ints("eps_frames")
        check.nonnegative("lr_end", optional=True)
        check.fractions("eps_start", "eps_end", "beta")
        check.fractions("target_tau", zero=False, optional=True)
        check.finite("max_grad_norm")
        check.nonnegative("alpha")
        check.bools("double", "dueling", "prioritized", "async_collection", "clip_rewards")
        check.choice("replay_storage", ("memory", "memmap"))
        check.at_least("eps_start", "eps_end")

    @property
    def num_batches(self) -> int:
        """Batches in the run."""
        return -(-self.total_frames // self.frames_per_batch)


def _check_async(cfg: DQNConfig, device: torch.device, replay_device: torch.device) -> None:
    """``async_collection``: what its worker process (a CPU policy, gymnasium envs, writing the replay) allows."""
    if cfg.env_backend == "torch":
        raise ValueError(
            "DQNConfig: async_collection steps gymnasium envs in a worker process, so env_backend 'torch' does not "
            "apply; drop async_collection (the torch envs step fast in the trainer's process)"
        )
    if cfg.clip_rewards or cfg.replay_storage != "memory":
        raise ValueError(
            "DQNConfig: async_collection writes the replay from its worker process, so clip_rewards and "
            f"replay_storage 'memmap' do not apply (got clip_rewards={cfg.clip_rewards}, replay_storage="
            f"{cfg.replay_storage!r}); drop async_collection"
        )
    if cfg.n_step > 1:
        raise ValueError(
            f"DQNConfig: async_collection writes one-step transitions into the replay from its worker process, "
            f"so n_step {cfg.n_step} does not apply; drop async_collection or set n_step=1"
        )
    if "cuda" in (device.type, replay_device.type):
        raise ValueError(
            f"DQNConfig: async_collection steps a CPU copy of the policy in a worker process into a CPU replay; "
            f"it runs with device and replay_device on the CPU only, got device {cfg.device!r} ({device}) and "
            f"replay_device {cfg.replay_device!r} ({replay_device}); drop async_collection or use --device cpu"
        )
    if cfg.make_env is not None:
        try:
            pickle.dumps(cfg.make_env)
        except Exception as err:  # noqa: BLE001  (PicklingError, AttributeError, TypeError by object)
            raise ValueError(
                f"DQNConfig: async_collection makes the envs in a worker process, which needs a make_env that "
                f"pickles (a function or class at the top level of a module, or a partial of one); "
                f"{callable_name(cfg.make_env)} does not ({err})"
            ) from None


def dqn_search_space(trial: Any, config: DQNConfig) -> dict[str, Any]:
    """``engine-rl tune``'s DQN space: rl-baselines3-zoo's ``sample_dqn_params`` (``rl_zoo3/hyperparams_opt.py``,
    :mod:`engine_rl.recipes.search`) as this recipe's fields.

    ``gamma`` 1 - [1e-4, 0.03] (log-uniform); ``batch_size`` 2**2..2**11; ``lr`` [1e-5, 2e-3] (log;
    the start of the recipe's decay to ``lr_end``); rl-zoo's ``train_freq`` 1..10 steps of each env
    copy per batch, so ``frames_per_batch = train_freq * num_envs``, and its ``max(train_freq //
    subsample_steps, 1)`` gradient steps (``subsample_steps`` 1..min(train_freq, 8)) per env copy, so
    ``optim_steps_per_batch`` keeps rl-zoo's updates per frame (rl-zoo tunes with one env);
    ``eps_end`` [0, 0.2]; ``eps_frames`` a fraction [0, 0.5] of ``total_frames``; rl-zoo's
    ``target_update_interval`` 1..20,000 frames (log), as optim steps: ``target_update_every =
    max(1, round(interval * optim_steps_per_batch / frames_per_batch))``; ``hidden`` small (64, 64),
    medium (256, 256) or big (400, 300).

    Examples:
        >>> import optuna
        >>> trial = optuna.trial.FixedTrial({
        ...     "one_minus_gamma": 0.01, "batch_size_pow": 6, "learning_rate": 1e-3, "train_freq": 4,
        ...     "subsample_steps": 2, "exploration_final_eps": 0.05, "exploration_fraction": 0.25,
        ...     "target_update_interval": 1000, "net_arch": "medium"})
        >>> space = dqn_search_space(trial, DQNConfig(num_envs=8, total_frames=20_000))
        >>> [space[k] for k in ("frames_per_batch", "optim_steps_per_batch", "eps_frames", "target_update_every")]
        [32, 16, 5000, 500]
    """
    gamma, batch_size = discount(trial), power_of_two(trial, "batch_size", 2, 11)
    lr = trial.suggest_float("learning_rate", 1e-5, 2e-3, log=True)
    train_freq = trial.suggest_int("train_freq", 1, 10)
    subsample_steps = trial.suggest_int("subsample_steps", 1, min(train_freq, 8))
    eps_end = trial.suggest_float("exploration_final_eps", 0.0, 0.2)
    eps_fraction = trial.suggest_float("exploration_fraction", 0.0, 0.5)
    interval = trial.suggest_int("target_update_interval", 1, 20_000, log=True)
    frames_per_batch = train_freq * config.num_envs
    optim_steps = max(train_freq // subsample_steps, 1) * config.num_envs
    return {
        "gamma": gamma, "batch_size": batch_size, "lr": lr,
        "frames_per_batch": frames_per_batch, "optim_steps_per_batch": optim_steps,
        "eps_end": eps_end, "eps_frames": round(eps_fraction * config.total_frames),
        "target_update_every": max(1, round(interval * optim_steps / frames_per_batch)),
        "hidden": network(trial, OFF_POLICY_NETS),
    }


def dqn_learner(
    cfg: DQNConfig, qnet: nn.Module, num_actions: int
) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
    """DQN's loss, greedy policy and optimizer on ``qnet`` (a :data:`Learner`)."""
    return DQNLoss(qnet, gamma=cfg.gamma, double=cfg.double), QValuePolicy(qnet), adam(qnet.parameters(), lr=cfg.lr)


#: What :func:`build_dqn` makes on the Q network ``(cfg, qnet, num_actions) -> (loss, greedy policy, optimizer)``:
#: the loss has a ``target_qnet``, the policy writes ``"action"``.
Learner = Callable[[DQNConfig, nn.Module, int], tuple[nn.Module, nn.Module, torch.optim.Optimizer]]


@register("dqn-cartpole", DQNConfig,
          "Double DQN on CartPole-v1 (rl-zoo hyperparameters); solves it in 50k frames on most seeds",
          search_space=dqn_search_space)
def build_dqn(cfg: DQNConfig, *, learner: Learner = dqn_learner, outputs_per_action: str | None = None) -> Setup:
    """DQN's run; another value-based loss swaps ``learner`` (its loss, greedy policy and optimizer on the
    Q network: :func:`dqn_learner` by default) and names the config field of the network's outputs per
    action (QR-DQN's ``"num_quantiles"``; None: one Q value per action)."""
    cfg.check_env()
    torch.manual_seed(cfg.seed)
    device, replay_device = config_devices(cfg)
    if cfg.async_collection:
        _check_async(cfg, device, replay_device)
    qnet, num_actions = _make_qnet(cfg, device, outputs_per_action)
    loss, greedy, optimizer = learner(cfg, qnet, num_actions)
    explore = EpsilonGreedy(
        greedy, num_actions=num_actions, eps_start=cfg.eps_start, eps_end=cfg.eps_end,
        annealing_frames=cfg.eps_frames, seed=cfg.seed,
    )
    buffer, collector = _make_replay_and_collector(cfg, explore, device, replay_device)

    trainer = create_trainer(
        collector, compile_loss(loss, enabled=cfg.compile), optimizer,
        total_frames=cfg.total_frames,
        learning_starts=cfg.learning_starts,
        optim_steps_per_batch=cfg.optim_steps_per_batch,
    )
    _attach_learning(cfg, trainer, qnet=qnet, loss=loss, optimizer=optimizer, buffer=buffer, collector=collector,
                     explore=explore, device=device)

    eval_env = recipe_env(cfg, min(cfg.eval_episodes, 16), device, evaluation=True)
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
        closers=[collector.shutdown, eval_env.close],
    )


def _make_qnet(cfg: DQNConfig, device: torch.device, outputs_per_action: str | None = None) -> tuple[nn.Module, int]:
    """The Q-network for one env copy's spaces, on ``device`` (as many outputs per action as the config
    field ``outputs_per_action`` says, action-major; one without it), and the number of actions."""
    observation_space, action_space = recipe_spaces(cfg)  # one copy's
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(
            f"dqn needs a discrete action space; {env_label(cfg)} has {type(action_space).__name__} "
            "actions (use a continuous-control algorithm such as SAC)"
        )
    num_actions = int(action_space.n)
    check_sizes(cfg, observation_space, action_space, device=device, networks=1, target=True,
                outputs_per_action=outputs_per_action)
    per_action = 1 if outputs_per_action is None else getattr(cfg, outputs_per_action)
    # pixels: the Nature CNN, then the MLP head; a Dict: an encoder per key (engine_rl.algos.encoders)
    encoder = make_encoder(observation_space, owner=f"dqn ({env_label(cfg)})")
    features = encoder.features if encoder is not None else int(observation_space.shape[0])
    if cfg.dueling:
        head = dueling_mlp(features, num_actions, cfg.hidden, outputs_per_action=per_action)
    else:
        head = mlp(features, num_actions * per_action, cfg.hidden)
    qnet = head if encoder is None else nn.Sequential(encoder, head)
    qnet.to(device)
    return qnet, num_actions


def _make_replay_and_collector(
    cfg: DQNConfig, explore: EpsilonGreedy, device: torch.device, replay_device: torch.device
) -> tuple[ReplayBuffer | SharedReplayBuffer, Any]:
    """The replay buffer (uniform or prioritized) and the collector exploring with ``explore``: in
    the trainer's process, or with ``async_collection`` in a worker writing a shared-memory buffer."""
    total_steps = cfg.num_batches * cfg.optim_steps_per_batch
    sampler = (
        PrioritizedSampler(alpha=cfg.alpha, beta=cfg.beta, beta_end=1.0, beta_annealing_steps=total_steps)
        if cfg.prioritized
        else UniformSampler()
    )
    replay_label = f"{type(cfg).__name__}: buffer_size"  # what a replay too large for the memory names
    if cfg.async_collection:  # the worker builds its own env copies and writes the buffer (shared memory)
        buffer = SharedReplayBuffer(cfg.buffer_size, sampler=sampler, seed=cfg.seed, capacity_label=replay_label)
        env_fn = partial(recipe_vec_env, cfg, cfg.num_envs)
        collector = AsyncCollector(env_fn, explore, frames_per_batch=cfg.frames_per_batch, buffer=buffer, seed=cfg.seed,
                                   info_keys=cfg.info_keys)
    else:
        buffer = ReplayBuffer(cfg.buffer_size, sampler=sampler, seed=cfg.seed, device=replay_device,
                              storage=cfg.replay_storage, capacity_label=replay_label)
        collector = train_collector(cfg, partial(recipe_env, cfg, device=device), explore, device=device,
                                    storing_device=replay_device, sync=False)
    return buffer, collector


def _attach_learning(
    cfg: DQNConfig, trainer: Engine, *, qnet: nn.Module, loss: nn.Module, optimizer: torch.optim.Optimizer,
    buffer: ReplayBuffer | SharedReplayBuffer, collector: Any, explore: EpsilonGreedy, device: torch.device,
) -> None:
    """The handlers of a DQN update, in the order they must run: the NaN guard, the learning-rate
    schedule, weight sync or reward clipping and replay storage (n-step rows with ``n_step > 1``), sampling, priorities, gradient
    clipping, the target network."""
    # first: it checks the batch before replay stores it, and the loss (and gradients) before the
    # clipper; with "stop" the clipper checks the gradients, from the norm it computes anyway
    clipper_checks = cfg.max_grad_norm > 0 and cfg.nonfinite == "stop"
    NaNGuard(parameters=None if clipper_checks else qnet, nonfinite=cfg.nonfinite).attach(trainer)
    if cfg.lr_end is not None:
        # stock Ignite scheduler, stepped once per batch
        schedule = PiecewiseLinear(optimizer, "lr", milestones_values=[(0, cfg.lr), (cfg.num_batches, cfg.lr_end)])
        trainer.add_event_handler(Events.ITERATION_STARTED, schedule)
    if cfg.async_collection:
        WeightSync(explore, collector).attach(trainer)
        collector.attach(trainer)  # stop the worker before the final evaluation
    else:
        attach_collector(trainer, collector, explore)  # with collector='ray': weights to the actors
        if cfg.clip_rewards:  # before replay stores the batch; the episode returns are already summed
            RewardClipper().attach(trainer)
        if cfg.n_step > 1:  # each env copy's frames folded into n-step rows; state.batch stays as collected
            NStepTransitions(buffer, n=cfg.n_step, gamma=cfg.gamma, num_envs=cfg.num_envs).attach(trainer)
        else:
            ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, cfg.batch_size, device=device).attach(trainer)
    if cfg.prioritized:
        PriorityUpdater(buffer).attach(trainer)
    if cfg.max_grad_norm > 0:
        GradClipper(qnet, max_norm=cfg.max_grad_norm, error_if_nonfinite=clipper_checks).attach(trainer)
    if cfg.target_tau is None:
        TargetNetUpdater(qnet, loss.target_qnet, every=cfg.target_update_every).attach(trainer)
    else:
        TargetNetUpdater(qnet, loss.target_qnet, tau=cfg.target_tau).attach(trainer)
