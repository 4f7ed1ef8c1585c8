"""Replay: TensorDict rows in a preallocated circular storage, sampled uniformly or by priority.

:class:`ReplayBuffer` is the entry point; :class:`UniformSampler` and :class:`PrioritizedSampler`
choose rows; :class:`SumTree` (and :class:`MinTree`) hold priorities; :class:`TensorStorage`
keeps rows in memory or in memory-mapped files. :class:`SharedReplayBuffer` is a buffer in
shared memory that another process writes (through a :class:`SharedWriter`) while this one
samples: the :class:`~engine_rl.collectors.AsyncCollector`'s. :class:`NStepBuilder` folds each
env copy's frames into n-step transitions (``handlers.NStepTransitions`` stores them).
"""

from engine_rl.replay.buffer import ReplayBuffer
from engine_rl.replay.nstep import NStepBuilder
from engine_rl.replay.samplers import PrioritizedSampler, Sampler, UniformSampler
from engine_rl.replay.shared import SharedReplayBuffer, SharedWriter
from engine_rl.replay.storage import TensorStorage
from engine_rl.replay.sumtree import MinTree, SumTree

__all__ = [
    "MinTree",
    "NStepBuilder",
    "PrioritizedSampler",
    "ReplayBuffer",
    "Sampler",
    "SharedReplayBuffer",
    "SharedWriter",
    "SumTree",
    "TensorStorage",
    "UniformSampler",
]
