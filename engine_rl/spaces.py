"""What the engine reads from Gymnasium spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["is_image_space", "is_multi_discrete", "is_vector_space"]


def is_image_space(space: gym.Space) -> bool:
    """A uint8 Box of 2 or 3 dimensions: ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)`` pixels.

    Examples:
        >>> is_image_space(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)), is_image_space(gym.spaces.Box(-1, 1, (4,)))
        (True, False)
    """
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def is_vector_space(space: gym.Space) -> bool:
    """A 1-D Box that an MLP reads as it is: any dtype but uint8 (bytes, such as Atari RAM, are
    stored as bytes and cast to floats by an encoder).

    Examples:
        >>> is_vector_space(gym.spaces.Box(-1, 1, (4,))), is_vector_space(gym.spaces.Box(0, 255, (128,), np.uint8))
        (True, False)
    """
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.dtype != np.uint8


def is_multi_discrete(space: gym.Space) -> bool:
    """A 1-D ``MultiDiscrete``: ``k`` independent choices, choice ``i`` among ``nvec[i]`` options.

    Examples:
        >>> is_multi_discrete(gym.spaces.MultiDiscrete([3, 2])), is_multi_discrete(gym.spaces.MultiDiscrete([[3, 2]]))
        (True, False)
    """
    return isinstance(space, gym.spaces.MultiDiscrete) and len(space.nvec.shape) == 1
