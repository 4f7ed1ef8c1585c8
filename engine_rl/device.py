"""Devices and their memory: the ``device`` and ``replay_device`` config fields, the torch device
each resolves to, and whether a run's large allocations fit in the memory there.

``"auto"`` is CUDA when ``torch.cuda.is_available()``, else the CPU; ``"cpu"``, ``"cuda"`` and
``"cuda:N"`` are themselves. A CUDA name on a machine without CUDA is a ``ValueError`` naming the
field and what to use instead, raised when the recipe is built (not when its config is read),
so a run saved on a GPU machine still loads on a CPU one and resumes there with ``--device cpu``.

A replay of ``buffer_size`` rows, a batch of ``frames_per_batch`` frames and the networks (their
weights, gradients, optimizer state and activations) are each allocated whole. One the machine
cannot hold either fails in the allocator with a message that names no config field or, where the
kernel grants the memory first, gets the process killed later. :func:`check_fits` refuses such a
size up front with a ``ValueError`` naming the field, its value, the bytes it needs and what the
machine (or the CUDA device) has; the estimates come from the env's spaces
(:func:`frame_nbytes`) and the layer widths (:func:`mlp_parameters`).

Examples:
    >>> is_device_name("cuda:1"), is_device_name("gpu")
    (True, False)
    >>> resolve_device("cpu", owner="Demo")
    device(type='cpu')
    >>> import gymnasium as gym
    >>> frame = frame_nbytes(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    >>> frame, format_bytes(frame * 10**12)
    (59, '53.7 TiB')
    >>> check_fits(frame * 10**12, owner="DQNConfig", setting="buffer_size=1000000000000", what="of replay",
    ...            each="59 bytes a transition", limit=(16 * 2**30, "this machine has 16.0 GiB of memory"))
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: buffer_size=1000000000000 needs about 53.7 TiB of replay (59 bytes a transition) but this machine has 16.0 GiB of memory; lower buffer_size
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = [
    "DEVICE_NAMES", "check_fits", "config_devices", "device_memory", "format_bytes", "frame_nbytes", "is_device_name",
    "mlp_parameters", "resolve_device", "space_nbytes", "total_memory",
]

#: What a ``device`` field accepts, for error messages.
DEVICE_NAMES = "'auto', 'cpu', 'cuda' or 'cuda:N'"

_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def is_device_name(value: object) -> bool:
    """Whether ``value`` is one of :data:`DEVICE_NAMES`."""
    return isinstance(value, str) and _PATTERN.fullmatch(value) is not None


def resolve_device(value: str, *, owner: str, field: str = "device", auto: torch.device | None = None) -> torch.device:
    """The torch device ``value`` names; ``"auto"`` is ``auto`` if given, else CUDA if available, else the CPU.

    Raises a ``ValueError`` naming ``owner`` and ``field`` for a name that is not one of
    :data:`DEVICE_NAMES`, a CUDA device on a machine without CUDA, or a CUDA index past the
    devices there are.
    """
    if not is_device_name(value):
        raise ValueError(f"{owner}: {field} must be {DEVICE_NAMES}, got {value!r}")
    if value == "auto":
        if auto is not None:
            return auto
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(value)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{owner}: {field} {value!r} needs a CUDA GPU, but torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}); use --device cpu or --device auto"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{owner}: {field} {value!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    return device


def config_devices(config: Any) -> tuple[torch.device, torch.device]:
    """``(device, replay_device)`` of a recipe config (``replay_device='auto'``, or a config without
    that field: the training device); errors as :func:`resolve_device`'s, naming the config's class.
    ``engine-rl train`` calls it before writing to ``--out``, so a device this machine lacks is refused first.

    Examples:
        >>> from types import SimpleNamespace
        >>> config_devices(SimpleNamespace(device="cpu", replay_device="auto"))
        (device(type='cpu'), device(type='cpu'))
    """
    owner = type(config).__name__
    device = resolve_device(config.device, owner=owner)
    replay = getattr(config, "replay_device", "auto")
    return device, resolve_device(replay, owner=owner, field="replay_device", auto=device)


# -- memory -----------------------------------------------------------------------------------
#: Bytes a collected frame holds besides its observations and action: the reward (float32), the
#: terminated, truncated and done flags (bool) and the episode's return (float32) and length (int64).
STEP_NBYTES = 4 + 3 + 4 + 8

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def total_memory() -> int | None:
    """Bytes of physical memory of this machine, or of its container's cgroup limit if lower;
    ``None`` where the system does not say (then nothing is checked)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
    for path in _CGROUP_LIMITS:
        try:
            total = min(total, int(Path(path).read_text()))
        except (OSError, ValueError):  # no such file, or "max": no limit
            continue
    return total


def device_memory(device: torch.device | str = "cpu") -> tuple[int | None, str]:
    """``(bytes, how messages say it)`` of the memory ``device`` has: a CUDA device's own total
    (``torch.cuda.mem_get_info``), else :func:`total_memory`."""
    device = torch.device(device)
    if device.type == "cuda":
        _, total = torch.cuda.mem_get_info(device)
        return total, f"{device} has {format_bytes(total)} of memory"
    total = total_memory()
    return total, f"this machine has {format_bytes(total or 0)} of memory"


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in binary units: ``59 bytes``, ``1.5 KiB``, ``53.7 TiB``.

    Examples:
        >>> format_bytes(59), format_bytes(1536), format_bytes(16 * 2**30)
        ('59 bytes', '1.5 KiB', '16.0 GiB')
    """
    if nbytes < 1024:
        return f"{int(nbytes)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        nbytes /= 1024
        if nbytes < 1024:
            break
    return f"{nbytes:,.1f} {unit}"


def space_nbytes(space: gym.Space) -> int:
    """Bytes of one sample of ``space`` as the collectors store it: a Box in its dtype, Discrete
    and MultiDiscrete entries as int64, MultiBinary as int8, Dict and Tuple spaces as the sum of theirs.

    Examples:
        >>> space_nbytes(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)), space_nbytes(gym.spaces.Discrete(3))
        (28224, 8)
    """
    if isinstance(space, gym.spaces.Dict):
        return sum(space_nbytes(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(space_nbytes(s) for s in space.spaces)
    if isinstance(space, gym.spaces.Discrete):
        return 8
    if isinstance(space, gym.spaces.MultiDiscrete):
        return 8 * math.prod(space.shape)
    if isinstance(space, gym.spaces.MultiBinary):
        return math.prod(space.shape)
    if isinstance(space, gym.spaces.Box):
        return math.prod(space.shape) * np.dtype(space.dtype).itemsize
    return 4 * gym.spaces.flatdim(space)


def frame_nbytes(observation_space: gym.Space, action_space: gym.Space) -> int:
    """Bytes of one collected frame (a transition in replay): the observation and the next one,
    the action and :data:`STEP_NBYTES`; a policy's own entries (log-probabilities, values) come on top."""
    return 2 * space_nbytes(observation_space) + space_nbytes(action_space) + STEP_NBYTES


def mlp_parameters(inputs: int, outputs: int, hidden: Sequence[int]) -> int:
    """Weights and biases of an MLP ``inputs -> *hidden -> outputs``.

    Examples:
        >>> mlp_parameters(4, 2, (256, 256))
        67586
    """
    widths = [inputs, *hidden, outputs]
    return sum((a + 1) * b for a, b in zip(widths, widths[1:]))


def check_fits(
    nbytes: int,
    *,
    owner: str,
    setting: str,
    what: str,
    each: str = "",
    fix: str | None = None,
    device: torch.device | str = "cpu",
    limit: tuple[int | None, str] | None = None,
) -> None:
    """Raise a ``ValueError`` if ``nbytes`` exceed the memory of ``device`` (:func:`device_memory`).

    Args:
        nbytes: what the allocation needs.
        owner: the config named first (``"DQNConfig"``).
        setting: the field and its value (``"buffer_size=1000000000000"``).
        what: what the bytes hold (``"of replay"``).
        each: the unit the estimate counts (``"59 bytes a transition"``), put in brackets.
        fix: what to lower (default: the field of ``setting``).
        limit: ``(bytes, how to say it)`` instead of the device's memory (tests).
    """
    total, where = limit if limit is not None else device_memory(device)
    if total is None or nbytes <= total:
        return
    fix = fix or setting.split("=", 1)[0]
    raise ValueError(
        f"{owner}: {setting} needs about {format_bytes(nbytes)} {what}{f' ({each})' if each else ''} "
        f"but {where}; lower {fix}"
    )
