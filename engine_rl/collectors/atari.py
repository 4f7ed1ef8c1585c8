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
against it; CleanRL's ``EpisodicLifeEnv`` does).

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

__all__ = ["ATARI_WRAPPERS", "FireOnLifeStart"]

ATARI_WRAPPERS = (
    "AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)",
    "FireOnLifeStart",
    "FrameStackObservation(stack_size=4)",
)


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
