"""Environments whose rewards turn NaN after a number of steps, for the non-finite policy's tests.

Importing the module registers them. Gymnasium imports it by itself for an id written with the
module in front, ``nonfinite_envs:NaNRewardCartPole-v0``, wherever ``tests/support`` is on the
path (``PYTHONPATH=tests/support`` for a CLI run: not ``tests``, whose ``tests/engine_rl``
would shadow the package), so a recipe's ``--set env_id=...`` reaches them in any process.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["NAN_AFTER", "NaNRewardAfter"]

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
