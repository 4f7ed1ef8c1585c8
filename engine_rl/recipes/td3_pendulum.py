"""``td3-pendulum``: TD3 on Pendulum-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo's ``hyperparams/td3.yml`` for Pendulum-v1: ``n_timesteps: 20000``, ``gamma: 0.98``,
``buffer_size: 200000``, ``learning_starts: 10000``, ``noise_type: normal``, ``noise_std: 0.1``,
``train_freq: [1, episode]``, ``gradient_steps: -1`` (as many gradient steps as frames after each
episode), ``learning_rate: 1e-3``, ``net_arch: [400, 300]``; the rest is Stable-Baselines3's TD3
default: ``batch_size=256``, ``tau=0.005``, ``policy_delay=2``, ``target_policy_noise=0.2``,
``target_noise_clip=0.5``, ReLU MLPs, one Adam each for the actor and the critics, uniform
random actions before ``learning_starts``. Here a batch is one Pendulum episode (200 frames,
one env) followed by 200 gradient steps; the actor and both target networks are updated on
every second one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import torch

from engine_rl.algos.exploration import GaussianNoise, RandomWarmup
from engine_rl.algos.optimizers import adam
from engine_rl.algos.sac import QEnsemble
from engine_rl.algos.td3 import TanhActor, TD3Loss
from engine_rl.device import config_devices
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import EnvNeeds, FieldChecks
from engine_rl.recipes.collection import attach_collector, train_collector
from engine_rl.recipes.env_source import recipe_env
from engine_rl.recipes.memory_checks import check_sizes
from engine_rl.recipes.off_policy import OffPolicyConfig, box_spaces, build_off_policy, observation_encoders
from engine_rl.recipes.search import off_policy_space
from handlers import TargetNetUpdater

__all__ = ["TD3Config", "build_td3", "td3_search_space"]


@dataclass(kw_only=True)
class TD3Config(OffPolicyConfig):
    frames_per_batch: int = 200
    """Frames per collected batch, a multiple of num_envs (rl-zoo: train_freq one episode, 200
    frames on Pendulum)."""
    learning_starts: int = 10_000
    """Frames of uniform random actions collected before the first gradient step (rl-zoo: 10000)."""
    buffer_size: int = 200_000
    """Replay capacity in transitions (rl-zoo: 200000; capped at total_frames, which never fill
    more)."""
    gamma: float = 0.98
    """Discount factor (rl-zoo: 0.98)."""
    hidden: tuple[int, ...] = (400, 300)
    """Hidden layer widths of the actor and of each critic (rl-zoo: net_arch [400, 300])."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update (SB3: 2)."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's [-1, 1] action while collecting (rl-zoo: 0.1)."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise, in [-1, 1] action units (SB3: 0.2)."""
    noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (SB3: 0.5)."""
    num_envs: int = 1
    """Environment copies stepped together by the collector (rl-zoo: 1)."""
    total_frames: int = 20_000
    """Frames to collect in the whole run (rl-zoo: n_timesteps 20000)."""
    batch_size: int = 256
    """Transitions per gradient step (SB3: 256)."""
    lr: float = 0.001
    """Adam learning rate of the actor and the critics (rl-zoo: 1e-3)."""
    eval_episodes: int = 10
    """Deterministic (noise-free) evaluation episodes per evaluation."""
    optim_steps_per_batch: int | None = None
    """Gradient steps after each batch; None: one per frame collected (rl-zoo: gradient_steps=-1)."""

    env_needs: ClassVar[EnvNeeds] = EnvNeeds(algo="td3", actions="box")

    def __post_init__(self) -> None:
        super().__post_init__()
        check = FieldChecks(self)
        check.positive_ints("policy_delay")
        check.nonnegative("exploration_noise", "target_noise", "noise_clip")


def td3_search_space(trial: Any, config: TD3Config) -> dict[str, Any]:
    """``engine-rl tune``'s TD3 space: rl-baselines3-zoo's ``sample_td3_params`` (``rl_zoo3/hyperparams_opt.py``)
    as this recipe's fields: what it shares with SAC's (:func:`~engine_rl.recipes.search.off_policy_space`),
    and ``exploration_noise`` [0, 0.5] (rl-zoo's ``noise_std``). rl-zoo also picks the noise's kind
    (Gaussian, Ornstein-Uhlenbeck or none); this recipe's is Gaussian, which a std of 0 turns off.

    Examples:
        >>> import optuna
        >>> trial = optuna.trial.FixedTrial({"one_minus_gamma": 0.02, "batch_size_pow": 8, "learning_rate": 3e-4,
        ...                                  "train_freq": 4, "tau": 0.01, "net_arch": "big", "noise_std": 0.3})
        >>> td3_search_space(trial, TD3Config())["exploration_noise"]
        0.3
    """
    return {**off_policy_space(trial, config), "exploration_noise": trial.suggest_float("noise_std", 0.0, 0.5)}


@register("td3-pendulum", TD3Config, "TD3 on Pendulum-v1 (rl-zoo hyperparameters); about -110 in 20k frames",
          search_space=td3_search_space)
def build_td3(cfg: TD3Config) -> Setup:
    cfg.check_env()
    torch.manual_seed(cfg.seed)
    device, replay_device = config_devices(cfg)
    observation_space, space = box_spaces(cfg, algo="td3")
    check_sizes(cfg, observation_space, space, device=device, networks=3, target=True)
    # 1-D Box: no encoder; images: a Nature CNN, a Dict: an encoder per key (engine_rl.algos.encoders),
    # one for the actor and one the critics share, each trained by its own loss
    actor_encoder, critic_encoder = observation_encoders(cfg, observation_space, algo="td3")
    obs_dim = actor_encoder.features if actor_encoder is not None else int(observation_space.shape[0])

    actor = TanhActor.build(obs_dim, space, hidden=cfg.hidden, encoder=actor_encoder)
    critic = QEnsemble(obs_dim, actor.action_dim, cfg.hidden, num_q=2, encoder=critic_encoder)
    loss = TD3Loss(actor, critic, gamma=cfg.gamma, policy_delay=cfg.policy_delay,
                   target_noise=cfg.target_noise, noise_clip=cfg.noise_clip)
    noisy = GaussianNoise(actor, std=cfg.exploration_noise, seed=cfg.seed + 1)
    explore = RandomWarmup(noisy, low=space.low, high=space.high, frames=cfg.learning_starts, seed=cfg.seed)
    loss.to(device)
    explore.to(device)
    collector = train_collector(cfg, partial(recipe_env, cfg, device=device), explore, device=device,
                                storing_device=replay_device, sync=False)
    optimizers = {"actor": adam(actor.parameters(), lr=cfg.lr), "critic": adam(critic.parameters(), lr=cfg.lr)}

    setup = build_off_policy(cfg, collector=collector, loss=loss, optimizers=optimizers, eval_policy=actor,
                             to_save={"exploration": explore})
    attach_collector(setup.trainer, collector, explore)  # with collector='ray': weights to the actors
    # on the actor's update steps (the loss's calls policy_delay, 2 * policy_delay, ...)
    TargetNetUpdater(critic, loss.target_critic, tau=cfg.tau, every=cfg.policy_delay).attach(setup.trainer)
    TargetNetUpdater(actor, loss.target_actor, tau=cfg.tau, every=cfg.policy_delay).attach(setup.trainer)
    return setup
