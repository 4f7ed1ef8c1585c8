"""``ppo-cartpole``: PPO on CartPole-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo: 8 envs x 32 steps per batch (256 frames), one minibatch of 256, 20 epochs, gamma 0.98,
GAE lambda 0.8, lr and clip range linear from 1e-3 and 0.2 to 0, no entropy bonus, 100k frames;
Stable-Baselines3's defaults for the rest (separate 64x64 tanh actor and critic, orthogonal init,
Adam eps 1e-5, value coefficient 0.5, gradient norm clipped at 0.5, advantages normalized per
minibatch). The policy is picked from the action space, so ``--set env_id=Pendulum-v1`` trains a
Gaussian policy (actions clipped to the bounds by the env wrapper).

Per batch, on ``BATCH_COLLECTED`` in this order: NaN guard, observation statistics, reward
clipping and scaling, lr and clip schedules, GAE; then ``num_epochs`` x ``frames_per_batch // batch_size``
minibatch steps (``MinibatchSampler``), gradient clipping, optional KL early stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import gymnasium as gym
import torch
from gymnasium.wrappers.vector import ClipAction
from torch import nn

from engine_rl.algos.compile import compile_loss
from engine_rl.algos.optimizers import adam
from engine_rl.algos.policy_factory import make_actor_critic
from engine_rl.algos.ppo import PPOLoss
from engine_rl.algos.recurrent import make_recurrent_actor_critic
from engine_rl.device import resolve_device
from engine_rl.engine import create_trainer
from engine_rl.envs import TorchEnv
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import EnvNeeds, FieldChecks
from engine_rl.recipes.config_base import RecipeConfig
from engine_rl.recipes.collection import attach_collector, train_collector
from engine_rl.recipes.env_source import env_label, recipe_env, recipe_spaces
from engine_rl.recipes.memory_checks import check_sizes
from engine_rl.recipes.search import discount, network, power_of_two
from handlers.advantage import GAEAdvantage
from handlers.gradients import GradClipper
from handlers.kl_stop import KLEarlyStop
from handlers.minibatch import MinibatchSampler
from handlers.nan_guard import NaNGuard
from handlers.normalization import ObservationNormalizer, RewardClipper, RewardNormalizer
from handlers.schedule import FrameSchedule
from handlers.validation import ValidationRollout

__all__ = ["PPOConfig", "build_ppo", "ppo_search_space"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


@dataclass(kw_only=True)
class PPOConfig(RecipeConfig):
    env_id: str = "CartPole-v1"
    num_envs: int = 8
    """Environment copies stepped together by the collector (rl-zoo: n_envs)."""
    total_frames: int = 100_000
    steps_per_env: int = 32
    """Steps per env copy in each batch (rl-zoo: n_steps); a batch is num_envs * steps_per_env frames."""
    batch_size: int = 256
    num_epochs: int = 20
    """Optim epochs (passes over the batch) per batch (rl-zoo: n_epochs)."""
    lr: float = 1e-3
    """Adam learning rate at the start (decays linearly to lr_end over total_frames)."""
    lr_end: float = 0.0
    """Learning rate at the end of the run (set it to lr for a constant rate)."""
    adam_eps: float = 1e-5
    """Adam epsilon (Stable-Baselines3's PPO default)."""
    clip_epsilon: float = 0.2
    """Clip range of the probability ratio at the start (decays linearly to clip_epsilon_end)."""
    clip_epsilon_end: float = 0.0
    """Clip range at the end of the run (set it to clip_epsilon for a constant range)."""
    value_clip: float | None = None
    """Clip range of the value prediction around the batch's old values (None: no clipping)."""
    gamma: float = 0.98
    gae_lambda: float = 0.8
    """GAE lambda."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Gradient clipping by global norm (<= 0 disables)."""
    normalize_advantage: bool = True
    """Standardize advantages per minibatch."""
    target_kl: float | None = None
    """Stop a batch's epochs once approx_kl exceeds 1.5 * target_kl (None: never)."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the actor and of the critic (separate networks; for image observations both
    sit on a shared Nature CNN trunk of 512 features, ``engine_rl.algos.encoders``)."""
    activation: str = "tanh"
    """Activation of the hidden layers: 'tanh' or 'relu'."""
    ortho_init: bool = True
    """Orthogonal initialisation (gains sqrt 2; 0.01 policy head; 1 value head)."""
    log_std_init: float = 0.0
    """Initial log std of a Gaussian policy (continuous actions only)."""
    normalize_observations: bool = False
    """Running mean/std observation normalization inside the policy."""
    normalize_rewards: bool = False
    """Scale rewards by the running std of the discounted return."""
    clip_rewards: bool = False
    """Give the loss the sign of each reward (-1, 0, +1; Mnih et al. 2015, for Atari scores);
    reported returns stay the env's own."""
    eval_every: int = 40
    """Evaluate every this many batches (and at the end of the run)."""
    core: str | None = None
    """A recurrent core between the features and the actor and critic MLPs: 'lstm' or 'gru' (None: a
    feed-forward policy). Minibatches are then whole env rows of steps_per_env steps, so batch_size must
    be a multiple of steps_per_env (``engine_rl.algos.recurrent``; the ppo-lstm recipe)."""
    core_size: int = 64
    """Units of the recurrent core (sb3-contrib's lstm_hidden_size: 256 by default, 64 in rl-zoo's
    CartPoleNoVel values, 128 in its and CleanRL's Atari ones)."""
    critic_core: str = "own"
    """What the critic reads with a recurrent core: 'own' (a core of its own: sb3-contrib's
    enable_critic_lstm=True, its default), 'shared' (the actor's: CleanRL's ppo_atari_lstm) or 'none'
    (the features, no core: sb3-contrib's enable_critic_lstm=False, rl-zoo's Atari value)."""

    env_needs: ClassVar[EnvNeeds] = EnvNeeds(algo="ppo", actions="discrete, multidiscrete or box")

    def __post_init__(self) -> None:
        super().__post_init__()
        check = FieldChecks(self)
        check.positive_ints("steps_per_env", "num_epochs", "eval_every")
        check.choice("activation", tuple(sorted(_ACTIVATIONS)))
        check.positive("adam_eps", "clip_epsilon")
        check.nonnegative("lr_end", "clip_epsilon_end", "value_coef", "entropy_coef")
        check.positive("value_clip", "target_kl", optional=True)
        check.fractions("gae_lambda")
        check.finite("max_grad_norm", "log_std_init")
        check.bools("normalize_advantage", "ortho_init", "normalize_observations", "normalize_rewards", "clip_rewards")
        self._check_core()
        if self.batch_size > self.frames_per_batch:
            raise ValueError(
                f"PPOConfig: batch_size ({self.batch_size}) exceeds the frames per batch "
                f"(num_envs * steps_per_env = {self.frames_per_batch})"
            )

    def _check_core(self) -> None:
        """The recurrent fields: known values, minibatches of whole env rows, a gymnasium env."""
        check = FieldChecks(self)
        check.choice("core", ("gru", "lstm"), optional=True)
        check.choice("critic_core", ("none", "own", "shared"))
        check.positive_ints("core_size")
        if self.core is None:
            return
        if self.batch_size % self.steps_per_env:
            raise ValueError(
                f"{type(self).__name__}: with core={self.core!r} a minibatch is whole env rows of steps_per_env="
                f"{self.steps_per_env} steps, so batch_size must be a multiple of it; got batch_size {self.batch_size}"
            )
        if self.env_backend == "torch":
            raise ValueError(
                f"{type(self).__name__}: core={self.core!r} needs env_backend 'gymnasium' (its collector carries the "
                "recurrent state; the torch envs' does not)"
            )

    @property
    def frames_per_batch(self) -> int:
        """Frames per collected batch: ``num_envs * steps_per_env``."""
        return self.num_envs * self.steps_per_env

    @property
    def minibatches(self) -> int:
        """Optim steps per optim epoch: ``frames_per_batch // batch_size``."""
        return self.frames_per_batch // self.batch_size


def _make_env(
    cfg: PPOConfig, num_envs: int, device: torch.device, *, evaluation: bool = False
) -> gym.vector.VectorEnv | TorchEnv:
    # the torch envs clamp actions to the bounds themselves
    env = recipe_env(cfg, num_envs, device, evaluation=evaluation)
    if not isinstance(env, TorchEnv) and isinstance(env.single_action_space, gym.spaces.Box):
        env = ClipAction(env)  # the policy's Gaussian samples are unbounded
    return env


_PPO_NETS: dict[str, tuple[int, ...]] = {"tiny": (64,), "small": (64, 64), "medium": (256, 256)}


def ppo_search_space(trial: Any, config: PPOConfig) -> dict[str, Any]:
    """``engine-rl tune``'s PPO space: rl-baselines3-zoo's ``sample_ppo_params`` (``rl_zoo3/hyperparams_opt.py``,
    :mod:`engine_rl.recipes.search`) as this recipe's fields.

    ``steps_per_env`` 2**5..2**12 (rl-zoo's ``n_steps``); ``batch_size`` 2**2..2**10, at most the
    batch (``num_envs * steps_per_env``, which PPOConfig requires); ``gamma`` 1 - [1e-4, 0.03] and
    ``gae_lambda`` 1 - [1e-4, 0.1] (log-uniform); ``lr`` [1e-5, 2e-3] (log; the start of the
    recipe's linear decay to ``lr_end``, where rl-zoo's is constant); ``entropy_coef`` [1e-8, 0.1]
    (log); ``clip_epsilon`` 0.1, 0.2, 0.3 or 0.4 (the start of its decay to ``clip_epsilon_end``);
    ``num_epochs`` 1, 5, 10 or 20; ``max_grad_norm`` [0.3, 2]; ``hidden`` tiny (64,), small
    (64, 64) or medium (256, 256) for the actor and the critic; ``activation`` tanh or relu.

    Examples:
        >>> import optuna
        >>> trial = optuna.trial.FixedTrial({
        ...     "n_steps_pow": 5, "batch_size_pow": 10, "one_minus_gamma": 0.02, "one_minus_gae_lambda": 0.05,
        ...     "learning_rate": 3e-4, "ent_coef": 1e-3, "clip_range": 0.3, "n_epochs": 10,
        ...     "max_grad_norm": 0.5, "net_arch": "tiny", "activation_fn": "relu"})
        >>> space = ppo_search_space(trial, PPOConfig())
        >>> space["steps_per_env"], space["batch_size"], space["hidden"]  # 1024 > 8 envs x 32 steps: 256
        (32, 256, (64,))
    """
    steps_per_env = power_of_two(trial, "n_steps", 5, 12)
    batch_size = power_of_two(trial, "batch_size", 2, 10)
    return {
        "steps_per_env": steps_per_env,
        "batch_size": min(batch_size, config.num_envs * steps_per_env),
        "gamma": discount(trial),
        "gae_lambda": 1.0 - trial.suggest_float("one_minus_gae_lambda", 1e-4, 0.1, log=True),
        "lr": trial.suggest_float("learning_rate", 1e-5, 2e-3, log=True),
        "entropy_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "clip_epsilon": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
        "num_epochs": trial.suggest_categorical("n_epochs", [1, 5, 10, 20]),
        "max_grad_norm": trial.suggest_float("max_grad_norm", 0.3, 2.0),
        "hidden": network(trial, _PPO_NETS),
        "activation": trial.suggest_categorical("activation_fn", ["tanh", "relu"]),
    }


@register("ppo-cartpole", PPOConfig, "PPO on CartPole-v1 (rl-zoo hyperparameters); solves it in 100k frames",
          search_space=ppo_search_space)
def build_ppo(cfg: PPOConfig) -> Setup:
    cfg.check_env()
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device, owner=type(cfg).__name__)
    observation_space, action_space = recipe_spaces(cfg)  # one copy's
    check_sizes(cfg, observation_space, action_space, device=device, networks=2, target=False)
    options = dict(
        hidden=cfg.hidden, activation=_ACTIVATIONS[cfg.activation], normalize_observations=cfg.normalize_observations,
        log_std_init=cfg.log_std_init, ortho_init=cfg.ortho_init, seed=cfg.seed, owner=f"ppo ({env_label(cfg)})",
    )
    if cfg.core is None:
        policy = make_actor_critic(observation_space, action_space, **options).to(device)
    else:
        policy = make_recurrent_actor_critic(observation_space, action_space, core=cfg.core,
                                             core_size=cfg.core_size, critic_core=cfg.critic_core,
                                             **options).to(device)
    greedy = policy.greedy()
    collector = train_collector(cfg, partial(_make_env, cfg, device=device), policy, device=device,
                                storing_device=device, sync=True)
    loss = PPOLoss(
        policy, clip_epsilon=cfg.clip_epsilon, value_clip=cfg.value_clip, value_coef=cfg.value_coef,
        entropy_coef=cfg.entropy_coef, normalize_advantage=cfg.normalize_advantage,
    )
    optimizer = adam(policy.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    trainer = create_trainer(
        collector, compile_loss(loss, enabled=cfg.compile), optimizer,
        total_frames=cfg.total_frames,
        num_epochs=cfg.num_epochs,
        optim_steps_per_batch=cfg.minibatches,
    )

    attach_collector(trainer, collector, policy)  # with collector='ray': weights to the actors
    # BATCH_COLLECTED, in this order
    # the guard first: the raw batch, and the loss (and gradients) before the clipper; with "stop"
    # the clipper checks the gradients, from the norm it computes anyway
    clipper_checks = cfg.max_grad_norm > 0 and cfg.nonfinite == "stop"
    NaNGuard(parameters=None if clipper_checks else policy, nonfinite=cfg.nonfinite).attach(trainer)
    if policy.obs_normalizer is not None:
        ObservationNormalizer(policy.obs_normalizer).attach(trainer)
    if cfg.clip_rewards:
        RewardClipper().attach(trainer)
    reward_normalizer = RewardNormalizer(gamma=cfg.gamma) if cfg.normalize_rewards else None
    if reward_normalizer is not None:
        reward_normalizer.attach(trainer)
    FrameSchedule(optimizer, "lr", start=cfg.lr, end=cfg.lr_end, total_frames=cfg.total_frames,
                  metric="lr").attach(trainer)
    FrameSchedule(loss, "clip_epsilon", start=cfg.clip_epsilon, end=cfg.clip_epsilon_end,
                  total_frames=cfg.total_frames).attach(trainer)
    GAEAdvantage(batch_values=policy.batch_values, gamma=cfg.gamma, lmbda=cfg.gae_lambda).attach(trainer)
    # optim steps (a recurrent policy's minibatches are whole env rows, replayed from their stored state)
    sampler = MinibatchSampler(cfg.batch_size, keys=loss.in_keys, seed=cfg.seed,
                               whole_rows=cfg.core is not None).attach(trainer)
    if cfg.max_grad_norm > 0:
        GradClipper(policy, max_norm=cfg.max_grad_norm, error_if_nonfinite=clipper_checks).attach(trainer)
    if cfg.target_kl is not None:
        KLEarlyStop(cfg.target_kl).attach(trainer)

    eval_env = _make_env(cfg, min(cfg.eval_episodes, 16), device, evaluation=True)
    ValidationRollout(eval_env, greedy, num_episodes=cfg.eval_episodes, every=cfg.eval_every,
                      seed=cfg.eval_seed, info_keys=cfg.info_keys).attach(trainer)

    to_save = {"trainer": trainer, "policy": policy, "optimizer": optimizer, "collector": collector,
               "sampler": sampler}
    if reward_normalizer is not None:
        to_save["reward_normalizer"] = reward_normalizer
    return Setup(
        trainer=trainer,
        to_save=to_save,
        eval_policy=greedy,
        total_frames=cfg.total_frames,
        closers=[collector.shutdown, eval_env.close],
    )
