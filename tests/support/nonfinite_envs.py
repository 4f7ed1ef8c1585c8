"""Environments whose rewards turn NaN after a number of steps (or in evaluation only, or huge on
one rank), for the non-finite policy's tests.

Importing the module registers them. Gymnasium imports it by itself for an id written with the
module in front, ``nonfinite_envs:NaNRewardCartPole-v0``, wherever ``tests/support`` is on the
path (``PYTHONPATH=tests/support`` for a CLI run: not ``tests``, whose ``tests/engine_rl``
would shadow the package), so a recipe's ``--set env_id=...`` reaches them in any process.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

__all__ = ["EVAL_SEEDS_FROM", "HUGE_REWARD", "NAN_AFTER", "HugeRewardOnRank1", "NaNRewardAfter", "NaNRewardWhenSeeded"]

NAN_AFTER = 100
"""Steps of each env copy (counted over its life, across resets) with finite rewards."""


class NaNRewardAfter(gym.Wrapper):
    """The wrapped env, with NaN rewards from its ``after + 1``-th step on."""

    def __init__(self, env: gym.Env, *, after: int = NAN_AFTER) -> None:
        super().__init__(env)
        self.after = after
        self.steps = 0

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.steps > self.after else reward, terminated, truncated, info


def _nan_reward(base: str):
    def make(**kwargs: Any) -> gym.Env:
        return NaNRewardAfter(gym.make(base, **kwargs))

    return make


for _id, _base in (("NaNRewardCartPole-v0", "CartPole-v1"), ("NaNRewardPendulum-v0", "Pendulum-v1")):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_nan_reward(_base))


EVAL_SEEDS_FROM = 10_000
"""Reset seeds from which :class:`NaNRewardWhenSeeded` turns rewards NaN: the recipes' ``eval_seed``
(copy ``i`` of the evaluation env is reset with ``eval_seed + i``), above the training seeds."""


class NaNRewardWhenSeeded(gym.Wrapper):
    """The wrapped env, with a NaN reward at step ``at`` of each episode of a copy whose last seeded
    reset had a seed >= ``from_seed``: the evaluation copies of a recipe, not its training copies."""

    def __init__(self, env: gym.Env, *, at: int = 3, from_seed: int = EVAL_SEEDS_FROM) -> None:
        super().__init__(env)
        self.at, self.from_seed = at, from_seed
        self.poisoned, self.steps = False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.poisoned = seed >= self.from_seed
        self.steps = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.poisoned and self.steps == self.at else reward, terminated, truncated, info


HUGE_REWARD = 2e38
"""Finite in float32 (whose largest number is 3.4e38), but two of them add up to Inf."""


class HugeRewardOnRank1(gym.Wrapper):
    """The wrapped env; in the process of rank 1 of a data-parallel run (``RANK=1``), the reward of
    step ``at`` of each episode is :data:`HUGE_REWARD`. Every value stays finite (an episode's
    return too), so no batch check stops; a DQN loss, the mean of per-sample Huber losses,
    overflows to Inf on rank 1 alone whenever a sample holds two such rewards, while its gradients
    (Huber's, at most 1 per sample) stay finite: one rank alone has a non-finite loss."""

    def __init__(self, env: gym.Env, *, at: int = 2) -> None:
        super().__init__(env)
        self.at, self.steps = at, 0
        self.huge = os.environ.get("RANK") == "1"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.steps = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, HUGE_REWARD if self.huge and self.steps == self.at else reward, terminated, truncated, info


def _wrapped(wrapper: type[gym.Wrapper], base: str):
    def make(**kwargs: Any) -> gym.Env:
        return wrapper(gym.make(base, **kwargs))

    return make


for _id, _wrapper in (("NaNEvalRewardCartPole-v0", NaNRewardWhenSeeded), ("HugeRewardOnRank1CartPole-v0",
                                                                           HugeRewardOnRank1)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_wrapped(_wrapper, "CartPole-v1"))
