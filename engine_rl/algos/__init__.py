"""Losses and policies: TensorDict in, TensorDict of ``loss*`` entries out."""

from engine_rl.algos.dqn import DQNLoss, QValuePolicy
from engine_rl.algos.networks import mlp

__all__ = ["DQNLoss", "QValuePolicy", "mlp"]
