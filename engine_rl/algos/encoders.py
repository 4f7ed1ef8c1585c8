"""Encoders: observations to ``[batch, features]`` float32 features, on which the heads (``mlp``) build.

:func:`make_encoder` picks one by the observation space:

- a 1-D Box (not of bytes, :func:`engine_rl.spaces.is_vector_space`): none (the MLP reads the
  observation as it is);
- pixels (a uint8 Box of 2 or 3 dimensions, :func:`engine_rl.spaces.is_image_space`): the Nature
  CNN. Images may be ``(H, W)``, ``(C, H, W)`` as frame stacks give, or ``(H, W, C)`` as raw Atari
  frames are. The network scales bytes to [0, 1] on the device it runs on, so batches and replay
  keep the bytes (a quarter of float32's memory);
- any other Box (bytes such as Atari RAM included, stored as bytes) and MultiBinary: :class:`Flat`;
  Discrete and MultiDiscrete: :class:`OneHot`;
- a Dict: :class:`DictEncoder`, one of the above per key (or the user's own), features concatenated.

Every encoder has a ``features`` attribute: the width of what it returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.collectors.observations import ObservationField, observation_fields
from engine_rl.keys import format_key
from engine_rl.spaces import is_image_space, is_vector_space

__all__ = ["DictEncoder", "Flat", "NatureCNN", "OneHot", "make_encoder"]


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
        self.layout, channels, (height, width) = self._layout(shape)
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

    @staticmethod
    def _layout(shape: tuple[int, ...]) -> tuple[str, int, tuple[int, int]]:
        if len(shape) == 2:
            return "hw", 1, (shape[0], shape[1])
        if len(shape) == 3 and shape[-1] <= 4 < shape[0]:
            return "hwc", shape[2], (shape[0], shape[1])
        if len(shape) == 3:
            return "chw", shape[0], (shape[1], shape[2])
        raise ValueError(f"NatureCNN: observations must be (H, W), (C, H, W) or (H, W, C) images, got shape {shape}")

    @staticmethod
    def image_size(shape: tuple[int, ...]) -> tuple[int, int]:
        """``(height, width)`` of images of ``shape`` (see the layouts above)."""
        return NatureCNN._layout(tuple(int(d) for d in shape))[2]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        if self.layout == "hw":
            x = x.unsqueeze(-3)
        elif self.layout == "hwc":
            x = x.movedim(-1, -3)
        batch = x.shape[:-3]
        y = self.fc(self.convs(x.reshape(-1, *x.shape[-3:])))
        return y.reshape(*batch, self.features)


class Flat(nn.Module):
    """A Box or MultiBinary observation of shape ``shape``, flattened to ``prod(shape)`` floats.

    Examples:
        >>> Flat((2, 3))(torch.ones(5, 2, 3)).shape
        torch.Size([5, 6])
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.ndim = len(shape)
        self.features = math.prod(shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float().reshape(*obs.shape[: obs.ndim - self.ndim], self.features)


class OneHot(nn.Module):
    """Discrete indices to one-hot floats: ``Discrete(n, start)`` to ``n`` features, a 1-D
    ``MultiDiscrete(nvec, start)`` to ``sum(nvec)`` (one one-hot per dimension, concatenated).

    Examples:
        >>> OneHot(gym.spaces.Discrete(3))(torch.tensor([0, 2]))
        tensor([[1., 0., 0.],
                [0., 0., 1.]])
        >>> OneHot(gym.spaces.MultiDiscrete([2, 3]))(torch.tensor([[1, 0]]))
        tensor([[0., 1., 1., 0., 0.]])
    """

    def __init__(self, space: gym.spaces.Discrete | gym.spaces.MultiDiscrete) -> None:
        super().__init__()
        self.multi = isinstance(space, gym.spaces.MultiDiscrete)
        self.sizes = [int(n) for n in space.nvec] if self.multi else [int(space.n)]
        self.starts = [int(s) for s in space.start] if self.multi else [int(space.start)]
        self.features = sum(self.sizes)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.long()
        if not self.multi:
            return nn.functional.one_hot(obs - self.starts[0], self.sizes[0]).float()
        return torch.cat([nn.functional.one_hot(obs[..., i] - start, n).float()
                          for i, (n, start) in enumerate(zip(self.sizes, self.starts, strict=True))], dim=-1)


class DictEncoder(nn.Module):
    """A Dict observation (a TensorDict of per-key entries) to features: one encoder per leaf key,
    outputs concatenated in the space's key order.

    Args:
        space: a ``gymnasium.spaces.Dict`` (nested Dicts too: their leaves are encoded).
        encoders: the user's modules for some keys (a key, or a tuple of keys for a nested leaf):
            each maps that entry ``[batch, *shape]`` to ``[batch, features]`` (its width is read
            from a ``features`` attribute or one forward of zeros). Every other key gets
            :func:`make_encoder`'s choice for its space.
        owner: the component named in error messages.

    Examples:
        >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "door": gym.spaces.Discrete(3)})
        >>> from tensordict import TensorDict
        >>> obs = TensorDict({"pos": torch.zeros(4, 2), "door": torch.zeros(4, dtype=torch.int64)}, [4])
        >>> encoder = DictEncoder(space)
        >>> encoder.features, encoder(obs).shape
        (5, torch.Size([4, 5]))
    """

    def __init__(self, space: gym.spaces.Dict, encoders: Mapping[str | tuple[str, ...], nn.Module] | None = None,
                 *, owner: str = "DictEncoder") -> None:
        super().__init__()
        fields = observation_fields(space, owner=owner)
        custom = {(key,) if isinstance(key, str) else tuple(key): module for key, module in (encoders or {}).items()}
        unknown = sorted(map(format_key, set(custom) - {f.path for f in fields}))
        if unknown:
            raise ValueError(f"{owner}: encoders given for {unknown}, which the observation does not have; "
                             f"its keys: {[format_key(f.path) for f in fields]}")
        self.paths = [f.path for f in fields]
        self.custom = frozenset(custom)
        self.encoders = nn.ModuleList(
            custom[f.path] if f.path in custom else _leaf_encoder(_leaf(space, f.path), f, owner) for f in fields)
        self.widths = [_width(module, f, owner) for module, f in zip(self.encoders, fields, strict=True)]
        self.features = sum(self.widths)

    def built(self) -> Iterator[nn.Module]:
        """The encoders this module chose itself (not the user's)."""
        return (m for path, m in zip(self.paths, self.encoders, strict=True) if path not in self.custom)

    def forward(self, obs: TensorDictBase) -> torch.Tensor:
        return torch.cat([encoder(obs.get(path)) for path, encoder in zip(self.paths, self.encoders, strict=True)],
                         dim=-1)


def make_encoder(space: gym.Space, *, encoders: Mapping[str | tuple[str, ...], nn.Module] | None = None,
                 owner: str = "make_encoder") -> nn.Module | None:
    """The encoder for observations from ``space`` (see the module's docstring); ``None`` for a 1-D
    Box, which the MLP reads as it is. ``encoders`` (per key) is for Dict spaces only.

    Examples:
        >>> make_encoder(gym.spaces.Box(-1, 1, (4,))) is None, make_encoder(gym.spaces.Discrete(5)).features
        (True, 5)
        >>> make_encoder(gym.spaces.Dict({"map": gym.spaces.Box(0, 255, (7, 7, 3), dtype="uint8")}), owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: no encoder for observation key 'map' (Box(0, 255, (7, 7, 3), uint8)): uint8 images go through the Nature CNN, which needs at least 36x36 pixels; pass your own (encoders={'map': module}) or drop the key (wrappers=FilterObservation(filter_keys=[...]))
    """
    if isinstance(space, gym.spaces.Dict):
        return DictEncoder(space, encoders, owner=owner)
    if encoders:
        raise ValueError(f"{owner}: encoders per key are for Dict observations, got {space}")
    (field,) = observation_fields(space, owner=owner)
    if is_vector_space(space):
        return None
    return _leaf_encoder(space, field, owner)


def _leaf_encoder(space: gym.Space, field: ObservationField, owner: str) -> nn.Module:
    if is_image_space(space):
        if min(NatureCNN.image_size(field.shape)) < 36:
            where = f"observation key {format_key(field.path)!r}" if field.path else "the observation"
            key = field.path[0] if len(field.path) == 1 else field.path
            hint = (f"pass your own (encoders={{{key!r}: module}}) or drop the key "
                    "(wrappers=FilterObservation(filter_keys=[...]))" if field.path else
                    "resize it (wrappers=ResizeObservation(shape=(84, 84)))")
            raise ValueError(f"{owner}: no encoder for {where} ({space}): uint8 images go through the Nature CNN, "
                             f"which needs at least 36x36 pixels; {hint}")
        return NatureCNN(field.shape)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return OneHot(space)
    return Flat(field.shape)


def _leaf(space: gym.spaces.Dict, path: tuple[str, ...]) -> gym.Space:
    for key in path:
        space = space[key]
    return space


def _width(module: nn.Module, field: ObservationField, owner: str) -> int:
    width = getattr(module, "features", None)
    if width is None:
        zeros = torch.zeros((1, *field.shape), dtype=field.dtype)
        try:
            with torch.no_grad():
                width = module(zeros).shape[-1]
        except Exception as err:  # noqa: BLE001  (any failure of the user's module)
            raise ValueError(
                f"{owner}: the encoder for observation key {format_key(field.path)!r} fails on zeros of shape "
                f"{tuple(zeros.shape)} and dtype {field.dtype} ({type(err).__name__}: {err}); it must map "
                "[batch, *shape] to [batch, features]"
            ) from err
    return int(width)

