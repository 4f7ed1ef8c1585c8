"""The config fields that say where a recipe's envs come from, shared by every recipe config.

Each recipe config subclasses :class:`EnvOptions` and redeclares ``env_id`` with its default and
the spaces its algorithm takes; :mod:`engine_rl.recipes.env_source` makes the envs from these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine_rl.collectors.env_factory import EnvFactory

__all__ = ["EnvOptions"]


@dataclass(kw_only=True)
class EnvOptions:
    env_id: str = "CartPole-v1"
    """Gymnasium id of the env (each recipe names its default and the spaces it takes)."""
    make_env: EnvFactory | str | None = None
    """For Python users: a callable that makes one env copy (a function, a class, ``functools.partial(MyEnv,
    size=5)``) or ``'module:function'`` naming one, used instead of env_id (then unused) for training and
    evaluation; vectorized 'sync' or 'async', wrapped by ``wrappers``. config.json records it by name, which
    ``--resume`` and ``engine-rl eval`` import back (``engine_rl.collectors.env_factory``). None by default."""
    env_kwargs: dict[str, Any] | None = None
    """Keyword arguments of ``gymnasium.make`` (or of ``make_env``), as Python literals, e.g. ``--set
    "env_kwargs={'map_name': '8x8', 'is_slippery': False}"`` or ``{'obs_type': 'ram'}``; None by default."""
    env_backend: str = "gymnasium"
    """'gymnasium' (``gymnasium.make_vec``) or 'torch': the batched torch version of the env
    (``engine_rl.envs``: CartPole-v1, Pendulum-v1), stepped as tensors on the training device with no
    numpy round trip, for thousands of copies (``--set num_envs=4096``); no wrappers, info_keys,
    env_kwargs or make_env there."""
