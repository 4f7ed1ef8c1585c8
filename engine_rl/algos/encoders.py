"""The image encoder: pixels (a uint8 Box of 2 or 3 dimensions, :func:`engine_rl.spaces.is_image_space`)
through the Nature CNN to ``[batch, features]`` float32 features, on which a head (``mlp``) builds.

Images may be ``(H, W)``, ``(C, H, W)`` as frame stacks give, or ``(H, W, C)`` as raw Atari frames
are. The network scales bytes to [0, 1] on the device it runs on, so batches and replay keep the
bytes (a quarter of float32's memory).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["NatureCNN"]


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
