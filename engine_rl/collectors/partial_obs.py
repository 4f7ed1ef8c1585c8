"""Partially observed versions of classic envs: :class:`MaskVelocity` zeroes the velocities.

``wrappers=("MaskVelocity",)`` on CartPole-v1 is rl-baselines3-zoo's ``CartPoleNoVel-v1``, the
env its recurrent PPO (``ppo_lstm``) is tuned on: without velocities a feed-forward policy cannot
tell where the pole is going, a recurrent one can infer it from successive positions.

Examples:
    >>> import gymnasium as gym
    >>> env = MaskVelocity(gym.make("CartPole-v1"))
    >>> obs, _ = env.reset(seed=0)
    >>> bool((obs[[1, 3]] == 0).all()), bool(obs[[0, 2]].any())
    (True, True)
    >>> MaskVelocity(gym.make("Acrobot-v1"))
    Traceback (most recent call last):
    ...
    ValueError: MaskVelocity: no velocity indices known for env id 'Acrobot-v1' (known: CartPole-v1, LunarLander-v3, LunarLanderContinuous-v3, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1); give them, e.g. 'MaskVelocity(indices=(1, 3))'
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

__all__ = ["VELOCITY_INDICES", "MaskVelocity"]

#: Observation entries that are velocities, by env id (rl-baselines3-zoo's ``MaskVelocityWrapper`` table).
VELOCITY_INDICES: dict[str, tuple[int, ...]] = {
    "CartPole-v1": (1, 3),
    "MountainCar-v0": (1,),
    "MountainCarContinuous-v0": (1,),
    "Pendulum-v1": (2,),
    "LunarLander-v3": (2, 3, 5),
    "LunarLanderContinuous-v3": (2, 3, 5),
}


class MaskVelocity(gym.ObservationWrapper):
    """Set the velocity entries of a 1-D Box observation to zero (the space is unchanged).

    Args:
        env: the env; its id picks the entries from :data:`VELOCITY_INDICES` unless ``indices`` is given.
        indices: the entries to zero, for an env not in the table.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ValueError(f"MaskVelocity: needs a 1-D Box observation space, got {space}")
        if indices is None:
            env_id = env.unwrapped.spec.id if env.unwrapped.spec is not None else None
            if env_id not in VELOCITY_INDICES:
                raise ValueError(
                    f"MaskVelocity: no velocity indices known for env id {env_id!r} "
                    f"(known: {', '.join(sorted(VELOCITY_INDICES))}); "
                    "give them, e.g. 'MaskVelocity(indices=(1, 3))'"
                )
            indices = VELOCITY_INDICES[env_id]
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0 or (idx < 0).any() or (idx >= space.shape[0]).any():
            raise ValueError(
                f"MaskVelocity: indices must be entries of the {space.shape[0]}-dim observation, got {tuple(indices)}"
            )
        self.mask = np.ones(space.shape, dtype=space.dtype)
        self.mask[idx] = 0
        self.indices = tuple(int(i) for i in idx)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.mask
