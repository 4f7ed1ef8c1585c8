"""The actor side of :class:`~engine_rl.collectors.RayCollector`: one collector in a Ray actor.

:class:`RayWorker` is a plain class (Ray is not imported here); the learner makes it a Ray actor
with ``ray.remote(max_restarts=-1)``. Each worker owns its env copies and its own CPU copy of the
policy, and steps them with the ordinary :class:`~engine_rl.collectors.GymCollector` (no second
rollout loop). The learner sends every request with the newest weights (an object-store
reference the worker fetches only when it is newer than the weights it holds), the frames all
workers had been asked for (the count an exploration wrapper's schedule follows) and, after a
restart, a new seed. Ray re-runs the constructor of a restarted worker with its first
arguments, so a worker holds nothing that the next request does not bring back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from tensordict import TensorDictBase
from torch import nn

from engine_rl.collectors.gym import GymCollector
from engine_rl.collectors.weights import load_policy_weights

__all__ = ["RayWorker", "derived_seed", "reseed_policy"]


def derived_seed(*entropy: int) -> int:
    """A seed in ``[0, 2**31)`` drawn from ``entropy`` (``numpy``'s ``SeedSequence``), so the seeds
    of different workers and restarts are unrelated but repeatable.

    Examples:
        >>> derived_seed(0, 1) == derived_seed(0, 1) != derived_seed(0, 2)
        True
    """
    return int(np.random.SeedSequence(list(entropy)).generate_state(1, dtype=np.uint32)[0] >> 1)


def reseed_policy(policy: nn.Module, seed: int) -> None:
    """Reseed every ``torch.Generator`` that ``policy`` or its submodules hold (the sampling and
    exploration generators), each with its own seed drawn from ``seed``, so copies of one policy
    in several workers do not draw the same numbers."""
    for index, module in enumerate(policy.modules()):
        for name, value in sorted(vars(module).items()):
            if isinstance(value, torch.Generator):
                value.manual_seed(derived_seed(seed, index, sum(map(ord, name))))


def _set_frames(policy: nn.Module, frames: int) -> None:
    """Set the frame count of the policy's modules that keep one (the exploration wrappers, whose
    schedules follow it) to the frames of the whole run."""
    for module in policy.modules():
        if isinstance(getattr(module, "frames", None), int):
            module.frames = frames


class RayWorker:
    """One collector with its env copies and policy copy, run as a Ray actor.

    Args:
        env_fn: picklable callable making the worker's gymnasium vector env.
        policy: the acting policy (on the CPU): this worker's own copy.
        frames_per_batch: frames of each batch this worker collects.
        seed: seed of the env copies (copy ``i`` gets ``seed + i``) and, drawn from it, of the
            policy's generators and torch's global one (``None``: unseeded).
        info_keys: as :class:`~engine_rl.collectors.GymCollector`'s.
        num_threads: torch threads of the worker process.
    """

    def __init__(
        self,
        env_fn: Callable[[], VectorEnv],
        policy: nn.Module,
        *,
        frames_per_batch: int,
        seed: int | None,
        info_keys: tuple[str, ...] = (),
        num_threads: int = 1,
    ) -> None:
        torch.set_num_threads(num_threads)
        self.policy = policy
        if seed is not None:
            torch.manual_seed(seed)
            reseed_policy(self.policy, seed)
        self.collector = GymCollector(env_fn(), self.policy, frames_per_batch=frames_per_batch, seed=seed,
                                      info_keys=info_keys)
        self.version = -1  # the weights held: those the policy was pickled with

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    def collect(self, weights: list, version: int, frames: int, reseed: int | None) -> TensorDictBase:
        """One batch, acting with the weights of ``version``.

        Args:
            weights: ``[ref]``, the object-store reference of the newest weights (a list, so Ray
                does not fetch them before the call), or ``[]`` if none were published.
            version: their version; they are fetched and loaded only when newer than those held.
            frames: frames all workers were asked for before this request (the run's frame count
                for the policy's exploration schedule).
            reseed: a new seed for the env copies and the policy's generators (after a restart),
                or ``None``.
        """
        if weights and version > self.version:
            import ray  # only ever imported in a Ray worker process

            load_policy_weights(self.policy, ray.get(weights[0]), owner="RayWorker.collect")
            self.version = version
        if reseed is not None:
            self.collector.set_seed(reseed)
            torch.manual_seed(reseed)
            reseed_policy(self.policy, reseed)
        _set_frames(self.policy, frames)
        return self.collector.collect()

    def state_dict(self) -> dict[str, Any]:
        """The collector's and the policy's ``state_dict`` (for the learner's checkpoint)."""
        return {"collector": self.collector.state_dict(), "policy": self.policy.state_dict(), "version": self.version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (before the first batch)."""
        self.policy.load_state_dict(state["policy"])
        self.collector.load_state_dict(state["collector"])
        self.version = int(state.get("version", -1))

    def shutdown(self) -> None:
        """Close the env."""
        self.collector.shutdown()
