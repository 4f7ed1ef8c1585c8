""":class:`EvaluationStepCap`: end an evaluation episode that its env would never end, and say so;
:func:`warn_long_evaluation`: say so while an evaluation's episodes run long.

An env registered without a time limit (CliffWalking-v1) or made by a ``make_env`` without one
never ends the episode of a policy that never reaches a terminal state, and an evaluation of such
a policy would run forever. The recipes wrap each evaluation env copy of such an env in this
wrapper (:data:`engine_rl.recipes.env_source.EVAL_STEP_CAP` steps); when it ends an episode it
warns, naming the env and the way to a shorter limit.

Before that, :func:`~engine_rl.collectors.run_episodes` warns once per evaluation when one of
its episodes passes :data:`LONG_EPISODE_STEPS` steps (:class:`LongEvaluationWarning`), naming
the env, the episodes done so far and the limit that will end the episode
(:func:`episode_limit`): an Atari game played without frame skipping or without pressing FIRE
runs to a cap of 100,000 steps, minutes of evaluation that would otherwise pass without a word.

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

from engine_rl.checks import positive_int

__all__ = ["LONG_EPISODE_STEPS", "EvaluationStepCap", "LongEvaluationWarning", "episode_limit", "warn_long_evaluation"]

#: Steps after which an evaluation episode counts as long and the evaluation says so. Above every
#: normal evaluation episode: the longest are Atari games, which ALE ends at 108,000 frames, 27,000
#: steps with the usual frame skip of 4 (MuJoCo's time limits are 1,000 steps, classic control's
#: at most 500, Box2D's 2,000); an Atari game without frame skipping passes it after 30,000
#: frames, under ten seconds of its emulation.
LONG_EPISODE_STEPS = 30_000


class LongEvaluationWarning(UserWarning):
    """An evaluation episode has run :data:`LONG_EPISODE_STEPS` steps without ending."""


class EvaluationStepCap(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Truncate an episode after ``max_episode_steps`` steps, warning the first time it does (Python
    shows a repeated warning once, so a vector env's copies print one line).

    Args:
        env: one env copy.
        max_episode_steps: steps after which an episode that has not ended is truncated.
    """

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        max_episode_steps = positive_int(max_episode_steps, name="max_episode_steps", owner="EvaluationStepCap")
        gym.utils.RecordConstructorArgs.__init__(self, max_episode_steps=max_episode_steps)  # in the env's spec
        super().__init__(env)
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
                    f"evaluation episodes of {name} ran to the cap of {self.max_episode_steps:,} steps: the env sets "
                    "no time limit and the policy did not end them; set one with "
                    "--set 'wrappers=TimeLimit(max_episode_steps=N)' (or inside make_env)",
                    stacklevel=2,
                )
        return obs, reward, terminated, truncated, info


def _copy_spec(env: Any) -> gym.envs.registration.EnvSpec | None:
    """The spec of a vector env's first copy, with its wrappers (``None`` if it has none)."""
    get_attr = getattr(env, "get_attr", None)
    if get_attr is not None:  # sync and async vector envs: the copy's own spec, wrappers included
        try:
            return get_attr("spec")[0]
        except Exception:  # a closed or broken env: say what can be said
            return None
    return getattr(env, "spec", None)  # a vector entry point: its registration


def episode_limit(env: Any) -> str:
    """The limit that ends the episodes of a vector env's copies, in words: the smallest of a
    ``TimeLimit``, an :class:`EvaluationStepCap` and ALE's end of an Atari episode, read from the
    first copy's spec (an env made without a registration shows none).

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> episode_limit(make_vec_env("CartPole-v1", 2, mode="sync"))
        'a TimeLimit of 500 steps'
        >>> episode_limit(make_vec_env("CliffWalking-v1", 2, wrappers=("EvaluationStepCap(max_episode_steps=100000)",)))
        'the evaluation cap of 100,000 steps (EvaluationStepCap)'
        >>> episode_limit(make_vec_env("CliffWalking-v1", 2))
        'none (only the env can end them)'
    """
    spec = _copy_spec(env)
    if spec is None:
        return "none that its spec shows (only the env can end them)"
    limits: list[tuple[int, str]] = []
    if spec.max_episode_steps is not None:
        limits.append((spec.max_episode_steps, f"a TimeLimit of {spec.max_episode_steps:,} steps"))
    for wrapper in spec.additional_wrappers:
        cap = (wrapper.kwargs or {}).get("max_episode_steps")
        if wrapper.name == EvaluationStepCap.__name__ and isinstance(cap, int):
            limits.append((cap, f"the evaluation cap of {cap:,} steps (EvaluationStepCap)"))
    frames, skip = spec.kwargs.get("max_num_frames_per_episode"), spec.kwargs.get("frameskip", 1)
    if isinstance(frames, int) and frames > 0 and isinstance(skip, int) and skip > 0:
        limits.append((frames // skip, f"ALE's end of an episode at {frames:,} frames ({frames // skip:,} steps)"))
    if not limits:
        return "none (only the env can end them)"
    return min(limits)[1]


def warn_long_evaluation(env: Any, *, steps: int, done: int, total: int) -> None:
    """Warn (:class:`LongEvaluationWarning`) that an evaluation episode on ``env`` has run
    ``steps`` steps with ``done`` of ``total`` episodes done, naming the limit that will end it."""
    spec = _copy_spec(env)
    name = spec.id if spec is not None else type(env).__name__
    warnings.warn(
        f"evaluation on {name} is long: an episode has run {steps:,} steps and {done} of {total} episodes are "
        f"done; the limit that will end it: {episode_limit(env)}; a TimeLimit wrapper sets a shorter one",
        LongEvaluationWarning, stacklevel=3,
    )

