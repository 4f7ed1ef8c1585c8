"""``sac-pendulum``: SAC on Pendulum-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo's ``hyperparams/sac.yml`` sets, for Pendulum-v1, only ``n_timesteps: 20000``,
``policy: MlpPolicy`` and ``learning_rate: 1e-3``; everything else is Stable-Baselines3's SAC
default: one env, ``buffer_size=1e6``, ``learning_starts=100`` (uniform random actions before),
``batch_size=256``, ``tau=0.005``, ``gamma=0.99``, ``train_freq=1``, ``gradient_steps=1``,
``ent_coef="auto"`` (initial 1.0, ``target_entropy=-action_dim``), target update every step,
256x256 ReLU MLPs for the actor and each of the two critics, ``log_std`` clamped to [-20, 2],
one Adam (lr 1e-3) each for the actor, the critics and the temperature. This recipe uses those
values. ``frames_per_batch=1`` with one optim step per frame is SB3's ``train_freq=1,
gradient_steps=1``; a larger batch keeps one optim step per frame (``optim_steps_per_batch``
defaults to ``frames_per_batch``) while paying the per-batch engine cost less often.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import torch

from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.exploration import RandomWarmup
from engine_rl.algos.optimizers import adam
from engine_rl.algos.sac import QEnsemble, SACLoss
from engine_rl.device import config_devices
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import EnvNeeds, FieldChecks
from engine_rl.recipes.collection import attach_collector, train_collector
from engine_rl.recipes.env_source import recipe_env
from engine_rl.recipes.memory_checks import check_sizes
from engine_rl.recipes.off_policy import OffPolicyConfig, box_spaces, build_off_policy, observation_encoders
from engine_rl.recipes.search import off_policy_space
from handlers import TargetNetUpdater

__all__ = ["SACConfig", "build_sac", "sac_search_space"]


@dataclass(kw_only=True)
class SACConfig(OffPolicyConfig):
    alpha_init: float = 1.0
    """Initial entropy temperature."""
    learn_alpha: bool = True
    """Tune the temperature towards target_entropy (SB3: ent_coef='auto')."""
    target_entropy: float | None = None
    """Entropy target of the temperature; None: -action_dim."""
    num_envs: int = 1
    """Environment copies stepped together by the collector (rl-zoo: 1)."""
    total_frames: int = 20_000
    """Frames to collect in the whole run (rl-zoo: n_timesteps 20000)."""
    lr: float = 0.001
    """Adam learning rate of the actor, the critics and the temperature (rl-zoo: 1e-3)."""
    eval_episodes: int = 10
    """Deterministic (mean action) evaluation episodes per evaluation."""
    frames_per_batch: int = 1
    """Frames per collected batch, a multiple of num_envs (SB3: train_freq * num_envs)."""
    learning_starts: int = 100
    """Frames of uniform random actions collected before the first gradient step (SB3: 100)."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (SB3: 1e6; capped at total_frames, which never fill more)."""

    env_needs: ClassVar[EnvNeeds] = EnvNeeds(algo="sac", actions="box")

    def __post_init__(self) -> None:
        super().__post_init__()
        check = FieldChecks(self)
        check.positive("alpha_init")
        check.bools("learn_alpha")
        check.finite("target_entropy", optional=True)


def sac_search_space(trial: Any, config: SACConfig) -> dict[str, Any]:
    """``engine-rl tune``'s SAC space: rl-baselines3-zoo's ``sample_sac_params`` (``rl_zoo3/hyperparams_opt.py``)
    as this recipe's fields, all of it shared with TD3's (:func:`~engine_rl.recipes.search.off_policy_space`:
    gamma, batch_size, lr, train_freq as frames_per_batch and optim_steps_per_batch, tau, hidden).

    Examples:
        >>> import optuna
        >>> trial = optuna.trial.FixedTrial({"one_minus_gamma": 0.02, "batch_size_pow": 8, "learning_rate": 3e-4,
        ...                                  "train_freq": 4, "tau": 0.01, "net_arch": "big"})
        >>> sorted(sac_search_space(trial, SACConfig()).items())  # doctest: +NORMALIZE_WHITESPACE
        [('batch_size', 256), ('frames_per_batch', 4), ('gamma', 0.98), ('hidden', (400, 300)), ('lr', 0.0003),
         ('optim_steps_per_batch', 4), ('tau', 0.01)]
    """
    return off_policy_space(trial, config)


@register("sac-pendulum", SACConfig, "SAC on Pendulum-v1 (rl-zoo hyperparameters); about -110 in 20k frames",
          search_space=sac_search_space)
def build_sac(cfg: SACConfig) -> Setup:
    cfg.check_env()
    torch.manual_seed(cfg.seed)
    device, replay_device = config_devices(cfg)
    observation_space, space = box_spaces(cfg, algo="sac")
    check_sizes(cfg, observation_space, space, device=device, networks=3, target=True)
    # 1-D Box: no encoder; images: a Nature CNN, a Dict: an encoder per key (engine_rl.algos.encoders),
    # one for the actor and one the critics share, each trained by its own loss
    actor_encoder, critic_encoder = observation_encoders(cfg, observation_space, algo="sac")
    obs_dim = actor_encoder.features if actor_encoder is not None else int(observation_space.shape[0])

    actor = TanhGaussianActor.build(obs_dim, space, hidden=cfg.hidden, encoder=actor_encoder)
    critic = QEnsemble(obs_dim, actor.action_dim, cfg.hidden, num_q=2, encoder=critic_encoder)
    loss = SACLoss(
        actor, critic, gamma=cfg.gamma, alpha_init=cfg.alpha_init, learn_alpha=cfg.learn_alpha,
        target_entropy=cfg.target_entropy,
    )
    explore = RandomWarmup(actor, low=space.low, high=space.high, frames=cfg.learning_starts, seed=cfg.seed)
    loss.to(device)
    explore.to(device)
    collector = train_collector(cfg, partial(recipe_env, cfg, device=device), explore, device=device,
                                storing_device=replay_device, sync=False)
    optimizers = {"actor": adam(actor.parameters(), lr=cfg.lr), "critic": adam(critic.parameters(), lr=cfg.lr)}
    if cfg.learn_alpha:
        optimizers["alpha"] = adam([loss.log_alpha], lr=cfg.lr)

    setup = build_off_policy(cfg, collector=collector, loss=loss, optimizers=optimizers,
                             eval_policy=actor.deterministic(), to_save={"warmup": explore})
    attach_collector(setup.trainer, collector, explore)  # with collector='ray': weights to the actors
    TargetNetUpdater(critic, loss.target_critic, tau=cfg.tau).attach(setup.trainer)
    return setup
