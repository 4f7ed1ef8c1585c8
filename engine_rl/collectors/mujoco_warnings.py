"""MuJoCo's warnings as Python warnings: said once each, and not appended to ``MUJOCO_LOG.TXT``.

MuJoCo reports a warning (of its model compiler, of an unstable simulation) by printing it and
appending it to ``MUJOCO_LOG.TXT`` in the working directory, every time. With mujoco 4 and
gymnasium 1.4, HalfCheetah's model uses a deprecated attribute, so each HalfCheetah env made
printed the same warning (twelve times at the start of a ``sac-mujoco`` run) and left a log file
wherever the run was started. :func:`route_mujoco_warnings` hands MuJoCo's warnings to
:mod:`warnings` instead, as a :class:`MujocoWarning`: the default filter shows each message once,
and it can be filtered like any warning. The env makers of :mod:`engine_rl.collectors.gym_envs` call it
for gymnasium's MuJoCo envs; a handler set with ``mujoco.set_mju_user_warning`` is kept.
"""

from __future__ import annotations

import sys
import warnings

from gymnasium.envs.registration import EnvSpec

__all__ = ["MujocoWarning", "is_mujoco_spec", "route_mujoco_warnings", "route_for"]


class MujocoWarning(RuntimeWarning):
    """A warning from MuJoCo."""


def _warn(message: str) -> None:
    # Called from MuJoCo's C code, where an exception would abort the process: a warning that
    # the filters turn into an error (``-W error``) is printed instead.
    try:
        warnings.warn(message, MujocoWarning, stacklevel=1)
    except Exception:  # noqa: BLE001
        print(f"MuJoCo warning: {message}", file=sys.stderr)


def route_mujoco_warnings() -> bool:
    """Send this process's MuJoCo warnings to :mod:`warnings`, unless another handler is set.

    Returns whether they go to :mod:`warnings` now.
    """
    import mujoco

    current = mujoco.get_mju_user_warning()
    if current is None:
        mujoco.set_mju_user_warning(_warn)
        return True
    return current is _warn


def is_mujoco_spec(spec: EnvSpec | None) -> bool:
    """Whether ``spec`` is one of gymnasium's MuJoCo envs (registered with or without ``mujoco`` installed)."""
    entry = None if spec is None else spec.entry_point
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def route_for(spec: EnvSpec | None) -> None:
    """:func:`route_mujoco_warnings` if ``spec`` is one of gymnasium's MuJoCo envs; nothing if
    ``mujoco`` is not installed (making the env then says so)."""
    if is_mujoco_spec(spec):
        try:
            route_mujoco_warnings()
        except ImportError:
            pass
