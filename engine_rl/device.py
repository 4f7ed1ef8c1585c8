"""The ``device`` and ``replay_device`` config fields: their names, and the torch device each resolves to.

``"auto"`` is CUDA when ``torch.cuda.is_available()``, else the CPU; ``"cpu"``, ``"cuda"`` and
``"cuda:N"`` are themselves. A CUDA name on a machine without CUDA is a ``ValueError`` naming the
field and what to use instead, raised when the recipe is built (not when its config is read),
so a run saved on a GPU machine still loads on a CPU one and resumes there with ``--device cpu``.

Examples:
    >>> is_device_name("cuda:1"), is_device_name("gpu")
    (True, False)
    >>> resolve_device("cpu", owner="Demo")
    device(type='cpu')
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["DEVICE_NAMES", "config_devices", "is_device_name", "resolve_device"]

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

