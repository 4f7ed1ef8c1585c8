"""``qrdqn-cartpole``: QR-DQN (Dabney et al. 2018) on CartPole-v1 with rl-baselines3-zoo's hyperparameters.

rl-zoo's ``hyperparams/qrdqn.yml`` (``CartPole-v1``) has DQN's CartPole values (50k frames, lr 2.3e-3,
batch 64, a 100k replay, learning from 1,000 frames on, gamma 0.99, ``train_freq=256`` with
``gradient_steps=128``, epsilon 1 -> 0.04 over 16% of the run, 256x256 MLP) and 10 quantiles;
SB3-contrib's QR-DQN adds no gradient clipping and Adam's epsilon at ``0.01 / batch_size`` (the
paper's 0.01/32 at batch 32). rl-zoo's ``benchmark.md`` reports 500.0 ± 0.0 for its one trained
agent at 50k. The rest is ``dqn-cartpole``'s (:mod:`engine_rl.recipes.dqn_cartpole`): 32 env copies
filling 256-frame batches, then 128 optim steps and a target copy per batch, the learning rate
decaying linearly to 0. The Q network outputs ``num_quantiles`` per action
(:class:`~engine_rl.algos.qrdqn.QRDQNLoss`); the greedy policy takes the argmax of their mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine_rl.algos import QRDQNLoss, QuantileMean, QValuePolicy
from engine_rl.algos.optimizers import adam
from engine_rl.recipes.base import Setup, register
from engine_rl.recipes.checks import FieldChecks
from engine_rl.recipes.dqn_cartpole import DQNConfig, build_dqn

__all__ = ["QRDQNConfig", "build_qrdqn", "qrdqn_learner"]


@dataclass(kw_only=True)
class QRDQNConfig(DQNConfig):
    num_quantiles: int = 10
    """Quantiles of the return estimated per action (rl-zoo: n_quantiles 10; SB3-contrib's default: 200)."""
    double: bool = False
    """Double-DQN choice of the next action (online net picks, target net values); off: the target
    network's mean quantiles pick it, as in the paper and SB3-contrib's QR-DQN."""
    max_grad_norm: float = 0.0
    """Gradient clipping by global norm (<= 0 disables; SB3-contrib's QR-DQN: max_grad_norm None)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        FieldChecks(self).positive_ints("num_quantiles")


def qrdqn_learner(
    cfg: DQNConfig, qnet: nn.Module, num_actions: int
) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
    """QR-DQN's loss, greedy policy (argmax of the mean quantiles) and Adam on ``qnet``, which outputs
    ``num_actions * cfg.num_quantiles`` (a :data:`~engine_rl.recipes.dqn_cartpole.Learner`). Adam's
    epsilon is ``0.01 / batch_size`` (SB3-contrib's QR-DQN, after the paper's 0.01 at batch 32).

    ``cfg`` is a :class:`QRDQNConfig` or any DQN config with a ``num_quantiles`` field
    (:class:`~engine_rl.recipes.qrdqn_atari.QRDQNAtariConfig`)."""
    loss = QRDQNLoss(qnet, num_actions=num_actions, num_quantiles=cfg.num_quantiles, gamma=cfg.gamma, double=cfg.double)
    policy = QValuePolicy(QuantileMean(qnet, num_actions=num_actions, num_quantiles=cfg.num_quantiles))
    return loss, policy, adam(qnet.parameters(), lr=cfg.lr, eps=0.01 / cfg.batch_size)


@register("qrdqn-cartpole", QRDQNConfig, "QR-DQN on CartPole-v1 (rl-zoo hyperparameters, 10 quantiles)")
def build_qrdqn(cfg: DQNConfig) -> Setup:
    """``dqn-cartpole``'s build with QR-DQN's learner and a network of ``num_quantiles`` outputs per action."""
    return build_dqn(cfg, learner=qrdqn_learner, outputs_per_action="num_quantiles")
