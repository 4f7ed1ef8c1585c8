"""The config fields that say where a recipe's envs come from, shared by every recipe config.

Each recipe config subclasses :class:`EnvOptions`, redeclares ``env_id`` with its default and
declares the spaces its algorithm takes as ``env_needs`` (:class:`~engine_rl.recipes.checks.EnvNeeds`);
:mod:`engine_rl.recipes.env_source` makes the envs from these fields. Making a config makes no env,
so every config is made and listed without the extras its env needs; :meth:`EnvOptions.check_env`
checks the env when the recipe is built (and when ``engine-rl train`` starts, before its ``--out``
is written to).

Examples:
    >>> from engine_rl.recipes.dqn_cartpole import DQNConfig
    >>> cfg = DQNConfig(env_id="Pendulum-v1")  # fields only: no env made
    >>> cfg.check_env()
    Traceback (most recent call last):
    ...
    ValueError: DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions (set env_id to an env with Discrete actions)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine_rl.collectors.env_factory import EnvFactory
from engine_rl.recipes.checks import EnvNeeds, FieldChecks
from engine_rl.recipes.env_source import recipe_spaces

__all__ = ["EnvOptions"]


@dataclass(kw_only=True)
class EnvOptions:
    env_id: str = "CartPole-v1"
    """Gymnasium id of the env (each recipe names its default and the spaces it takes)."""
    make_env: EnvFactory | str | None = None
    """For Python users: a callable that makes one env copy (a function, a class, ``functools.partial(MyEnv,
    size=5)``) or ``'module:function'`` naming one, used instead of env_id (then unused) for training and
    evaluation; vectorized 'sync' or 'async', wrapped by ``wrappers``. config.json records it by name, which
    ``--resume`` and ``engine-rl eval`` import back only when named again or trusted (``--set make_env=...``,
    ``--trust-config``: ``engine_rl.run.stored_config``). None by default."""
    env_kwargs: dict[str, Any] | None = None
    """Keyword arguments of ``gymnasium.make`` (or of ``make_env``), as Python literals, e.g. ``--set
    "env_kwargs={'map_name': '8x8', 'is_slippery': False}"`` or ``{'obs_type': 'ram'}``; None by default."""
    env_backend: str = "gymnasium"
    """'gymnasium' (``gymnasium.make_vec``) or 'torch': the batched torch version of the env
    (``engine_rl.envs``: CartPole-v1, Pendulum-v1), stepped as tensors on the training device with no
    numpy round trip, for thousands of copies (``--set num_envs=4096``); no wrappers, info_keys,
    env_kwargs or make_env there."""

    #: What the recipe's algorithm takes of the env (None: any env that can be made); a class
    #: constant, not a field.
    env_needs: ClassVar[EnvNeeds | None] = None

    def check_env(self) -> None:
        """Check the env this config names, making one copy of it (once per id or callable, wrappers
        and env_kwargs: :func:`~engine_rl.collectors.gym_envs.env_spaces`): ``make_env`` makes an env, or
        ``env_id`` is registered (an id from an extra that is not installed names the extra), and its
        spaces suit ``env_needs`` (:meth:`~engine_rl.recipes.checks.FieldChecks.env`); a ``ValueError``
        naming the config otherwise. Each recipe's build function calls it first."""
        if self.env_needs is None:
            recipe_spaces(self)
            return
        FieldChecks(self).env(
            algo=self.env_needs.algo, actions=self.env_needs.actions,
            vectorization=getattr(self, "vectorization", None), encoders=True,
            normalized=getattr(self, "normalize_observations", False),
        )
