""":class:`EvaluationStepCap`: end an evaluation episode that its env would never end, and say so.

An env registered without a time limit (CliffWalking-v1) or made by a ``make_env`` without one
never ends the episode of a policy that never reaches a terminal state, and an evaluation of such
a policy would run forever. The recipes wrap each evaluation env copy of such an env in this
wrapper (:data:`engine_rl.recipes.env_source.EVAL_STEP_CAP` steps); when it ends an episode it
warns, naming the env and the way to a shorter limit.

Examples:
    >>> import gymnasium as gym, warnings
    >>> env = EvaluationStepCap(gym.make("CliffWalking-v1"), max_episode_steps=3)
    >>> _ = env.reset(seed=0)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     steps = [env.step(0)[3] for _ in range(3)]  # up, into the wall, three times
    >>> steps, str(caught[0].message).split(":")[0]
    ([False, False, True], 'evaluation episodes of CliffWalking-v1 ran to the cap of 3 steps')
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym

__all__ = ["EvaluationStepCap"]


class EvaluationStepCap(gym.Wrapper):
    """Truncate an episode after ``max_episode_steps`` steps, warning the first time it does (Python
    shows a repeated warning once, so a vector env's copies print one line).

    Args:
        env: one env copy.
        max_episode_steps: steps after which an episode that has not ended is truncated.
    """

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        super().__init__(env)
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(f"EvaluationStepCap: max_episode_steps must be a positive int, got {max_episode_steps!r}")
        self.max_episode_steps = max_episode_steps
        self.steps = 0
        self.warned = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.max_episode_steps and not (terminated or truncated):
            truncated = True
            if not self.warned:
                self.warned = True
                name = self.env.spec.id if self.env.spec is not None else type(self.env.unwrapped).__name__
                warnings.warn(
                    f"evaluation episodes of {name} ran to the cap of {self.max_episode_steps} steps: the env sets "
                    "no time limit and the policy did not end them; set one with "
                    "--set 'wrappers=TimeLimit(max_episode_steps=N)' (or inside make_env)",
                    stacklevel=2,
                )
        return obs, reward, terminated, truncated, info
