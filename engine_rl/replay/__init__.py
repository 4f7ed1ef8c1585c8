"""Replay: TensorDict rows in a preallocated circular storage, sampled uniformly or by priority.

:class:`ReplayBuffer` is the entry point; :class:`UniformSampler` and :class:`PrioritizedSampler`
choose rows; :class:`SumTree` (and :class:`MinTree`) hold priorities; :class:`TensorStorage`
keeps rows in memory or in memory-mapped files.
"""

from engine_rl.replay.buffer import ReplayBuffer
from engine_rl.replay.samplers import PrioritizedSampler, Sampler, UniformSampler
from engine_rl.replay.storage import TensorStorage
from engine_rl.replay.sumtree import MinTree, SumTree

__all__ = [
    "MinTree",
    "PrioritizedSampler",
    "ReplayBuffer",
    "Sampler",
    "SumTree",
    "TensorStorage",
    "UniformSampler",
]
