"""Observation encoders chosen by the observation space: pixels through the Nature CNN, vectors as they are.

:func:`observation_encoder` returns ``(module, features)``: a module mapping a batch of
observations to ``[batch, features]`` float32 features, on which a head (``mlp``) builds.

- 1-D Box: the identity (cast to float32 if the Box is not float).
- uint8 Box of 2 or 3 dimensions (images; ``(H, W)``, ``(C, H, W)`` as frame stacks give, or
  ``(H, W, C)`` as raw Atari frames are): :class:`NatureCNN`, which scales bytes to [0, 1]
  on the device it runs on, so replay keeps the bytes (a quarter of float32's memory).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from engine_rl.spaces import is_image_space

__all__ = ["NatureCNN", "is_image_space", "observation_encoder"]


class NatureCNN(nn.Module):
    """Mnih et al. (2015)'s convolutional trunk: 32 8x8/4, 64 4x4/2, 64 3x3/1 ReLU convolutions and
    a ReLU linear layer of ``features`` units, on uint8 pixels scaled to [0, 1].

    Args:
        shape: one observation's shape: ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)`` (channels last
            when the last dimension is at most 4 and the first is not).
        features: width of the output layer (Nature DQN: 512).

    Examples:
        >>> cnn = NatureCNN((4, 84, 84))
        >>> cnn(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 512])
        >>> NatureCNN((3, 20, 20))
        Traceback (most recent call last):
        ...
        ValueError: NatureCNN: images must be at least 36x36 pixels, got shape (3, 20, 20)
    """

    def __init__(self, shape: tuple[int, ...], features: int = 512) -> None:
        super().__init__()
        shape = tuple(int(d) for d in shape)
        if len(shape) == 2:
            self.layout, channels, height, width = "hw", 1, *shape
        elif len(shape) == 3 and shape[-1] <= 4 < shape[0]:
            self.layout, (height, width, channels) = "hwc", shape
        elif len(shape) == 3:
            self.layout, (channels, height, width) = "chw", shape
        else:
            raise ValueError(f"NatureCNN: observations must be (H, W), (C, H, W) or (H, W, C) images, got shape {shape}")
        if min(height, width) < 36:
            raise ValueError(f"NatureCNN: images must be at least 36x36 pixels, got shape {shape}")
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, features), nn.ReLU())
        self.features = features

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        if self.layout == "hw":
            x = x.unsqueeze(-3)
        elif self.layout == "hwc":
            x = x.movedim(-1, -3)
        batch = x.shape[:-3]
        y = self.fc(self.convs(x.reshape(-1, *x.shape[-3:])))
        return y.reshape(*batch, self.features)


class _Float(nn.Module):
    """Cast observations to float32 (a non-float vector Box, e.g. flattened one-hot ints)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float()


def observation_encoder(space: gym.Space, *, owner: str = "observation_encoder") -> tuple[nn.Module, int]:
    """``(encoder, features)`` for ``space`` (see the module docstring); a ``ValueError`` naming
    ``owner`` and the space for any other space.

    Examples:
        >>> observation_encoder(gym.spaces.Box(-1, 1, (4,)))
        (Identity(), 4)
        >>> enc, n = observation_encoder(gym.spaces.Box(0, 255, (84, 84), np.uint8)); type(enc).__name__, n
        ('NatureCNN', 512)
    """
    if is_image_space(space):
        cnn = NatureCNN(space.shape)
        return cnn, cnn.features
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        encoder = nn.Identity() if np.issubdtype(space.dtype, np.floating) else _Float()
        return encoder, int(space.shape[0])
    raise ValueError(
        f"{owner}: observations must be a 1-D Box or a uint8 image Box (H, W), (C, H, W) or (H, W, C), got {space} "
        "(--set wrappers=FlattenObservation flattens Discrete, Tuple and Dict spaces)"
    )
