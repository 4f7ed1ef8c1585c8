"""Collectors: gymnasium vector envs -> TensorDict batches, and evaluation episodes.

A collector is any iterable of TensorDicts; :class:`GymCollector` is the stock one;
:class:`RayCollector` collects with Ray actors (the ``[ray]`` extra, imported only when it starts).
"""

from engine_rl.collectors.async_collector import AsyncCollector, AsyncCollectorError
from engine_rl.collectors.episodes import run_episodes
from engine_rl.collectors.gym import EnvError, GymCollector, GymStepper, Policy, policy_device
from engine_rl.collectors.gym_envs import VecEnvSpec, make_vec_env, vec_env_spec
from engine_rl.collectors.ray_collector import RayCollector, RayCollectorError
from engine_rl.collectors.torch_env import TorchEnvCollector

__all__ = [
    "AsyncCollector",
    "AsyncCollectorError",
    "EnvError",
    "GymCollector",
    "GymStepper",
    "Policy",
    "RayCollector",
    "RayCollectorError",
    "TorchEnvCollector",
    "VecEnvSpec",
    "make_vec_env",
    "policy_device",
    "run_episodes",
    "vec_env_spec",
]
