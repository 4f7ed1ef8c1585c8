"""Losses and policies: TensorDict in, TensorDict of ``loss*`` entries out."""

from engine_rl.algos.dqn import DQNLoss, QValuePolicy
from engine_rl.algos.networks import DuelingHead, dueling_mlp, mlp
from engine_rl.algos.encoders import DictEncoder, NatureCNN, make_encoder
from engine_rl.algos.actors import DeterministicActor, TanhGaussianActor
from engine_rl.algos.exploration import EpsilonGreedy, GaussianNoise, LinearSchedule, RandomWarmup
from engine_rl.algos.gae import gae
from engine_rl.algos.policies import ActorCritic, CategoricalActorCritic, GaussianActor, GaussianActorCritic
from engine_rl.algos.multi_discrete import MultiCategoricalActorCritic
from engine_rl.algos.policy_factory import make_actor_critic
from engine_rl.algos.ppo import PPOLoss
from engine_rl.algos.qrdqn import QRDQNLoss, QuantileMean
from engine_rl.algos.recurrent import RecurrentActorCritic, make_recurrent_actor_critic
from engine_rl.algos.sac import QEnsemble, SACLoss
from engine_rl.algos.td3 import TanhActor, TD3Loss

__all__ = [
    "ActorCritic", "CategoricalActorCritic", "DQNLoss", "DeterministicActor", "DictEncoder", "DuelingHead",
    "EpsilonGreedy", "GaussianActor", "GaussianActorCritic", "GaussianNoise", "LinearSchedule",
    "MultiCategoricalActorCritic", "NatureCNN", "PPOLoss", "QEnsemble", "QRDQNLoss", "QValuePolicy", "QuantileMean",
    "RandomWarmup", "RecurrentActorCritic", "SACLoss", "TD3Loss", "TanhActor", "TanhGaussianActor", "dueling_mlp", "gae",
    "make_actor_critic", "make_encoder", "make_recurrent_actor_critic", "mlp",
]
