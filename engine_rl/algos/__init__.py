"""Losses and policies: TensorDict in, TensorDict of ``loss*`` entries out."""

from engine_rl.algos.dqn import DQNLoss, QValuePolicy
from engine_rl.algos.networks import mlp
from engine_rl.algos.actors import DeterministicActor, RandomWarmup, TanhGaussianActor
from engine_rl.algos.sac import QEnsemble, SACLoss

__all__ = ["DQNLoss", "QValuePolicy", "mlp",
           "DeterministicActor", "RandomWarmup", "TanhGaussianActor", "QEnsemble", "SACLoss"]
