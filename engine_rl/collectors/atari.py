"""Atari: the wrapper that starts every life, and the preprocessing the Atari recipes apply.

Games such as Breakout wait for FIRE before the ball moves: a policy that has not learnt to
press it (or a greedy evaluation policy that never picks it) stands still until the emulator's
frame limit ends the episode. :class:`FireOnLifeStart` presses FIRE after every reset and every
lost life, as the standard Atari setups do (CleanRL's ``FireResetEnv``, SB3's ``AtariWrapper``).

:data:`ATARI_WRAPPERS` is the preprocessing of Mnih et al. (2015) as CleanRL's ``ppo_atari.py``
applies it, on an id without frame skip (``BreakoutNoFrameskip-v4``): up to 30 no-op actions
after each reset, 4 frames per action with the max of the last two, 84x84 grayscale, FIRE at
the start of each life, the last 4 frames stacked. Rewards stay the game's own, so the
reported episode returns are the game scores; the recipes clip the rewards the loss sees
(``clip_rewards``). A lost life does not end the episode (Machado et al., 2018 recommend
against it; CleanRL's ``EpisodicLifeEnv`` does). An id that skips frames itself (``ALE/Pong-v5``:
4 frames, and sticky actions) is made with ``frameskip=1`` (:func:`single_frame_kwargs`) and
keeps its sticky actions.

Examples:
    >>> import gymnasium as gym, ale_py
    >>> env = FireOnLifeStart(gym.make("BreakoutNoFrameskip-v4"))
    >>> _, info = env.reset(seed=0)
    >>> info["lives"], env.unwrapped.get_action_meanings()[env.fire_action]
    (5, 'FIRE')
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from engine_rl.collectors.registry import env_spec

__all__ = ["ATARI_WRAPPERS", "FireOnLifeStart", "single_frame_kwargs"]

ATARI_WRAPPERS = (
    "AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)",
    "FireOnLifeStart",
    "FrameStackObservation(stack_size=4)",
)


def single_frame_kwargs(env_id: Any, env_kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    """``env_kwargs`` with ``frameskip=1`` added when ``env_id`` is registered to skip frames itself
    (``ALE/*-v5``: 4), since :data:`ATARI_WRAPPERS` skip frames; unchanged for any other id, for a
    ``frameskip`` already given, and for values the config checks will refuse.

    Examples:
        >>> single_frame_kwargs("ALE/Pong-v5", None), single_frame_kwargs("PongNoFrameskip-v4", None)
        ({'frameskip': 1}, None)
        >>> single_frame_kwargs("ALE/Pong-v5", {"obs_type": "grayscale", "frameskip": 2})
        {'obs_type': 'grayscale', 'frameskip': 2}
    """
    if not isinstance(env_kwargs, (dict, type(None))) or "frameskip" in (env_kwargs or {}):
        return env_kwargs
    try:
        skips = env_spec(env_id).kwargs.get("frameskip", 1) != 1
    except ValueError:  # not a registered id: its own check says so
        return env_kwargs
    return {**(env_kwargs or {}), "frameskip": 1} if skips else env_kwargs


class FireOnLifeStart(gym.Wrapper):
    """Press FIRE after every reset and after every step that loses a life (``info["lives"]`` drops).

    The FIRE step's reward is added to the step's (or, after a reset, dropped: it is 0 in the
    games that need FIRE); if the FIRE step ends the episode, that step is returned. Envs whose
    action set has no FIRE are refused with a ``ValueError`` naming the actions they have.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else None
        if not meanings or "FIRE" not in meanings:
            raise ValueError(
                f"FireOnLifeStart: the env must be an Atari game with a FIRE action, got {env.spec.id if env.spec else env} "
                f"with actions {meanings}"
            )
        self.fire_action = meanings.index("FIRE")
        self.lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire_action)
        if terminated or truncated:  # never in practice; start again rather than return an ended episode
            obs, info = self.env.reset(**kwargs)
        self.lives = info.get("lives", 0)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", 0)
        if lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(self.fire_action)
            reward += fire_reward
            lives = info.get("lives", 0)
        self.lives = lives
        return obs, reward, terminated, truncated, info
