"""Which gymnasium ids exist and where they come from: :func:`env_spec` looks an id up (importing
the package that registers it), :func:`is_atari_id` tells an Atari game from a mistyped id without
ale_py, and :data:`EXTRAS` names the extra that installs an optional env family.

This module imports no other of the collectors: :mod:`engine_rl.collectors.gym_envs` makes envs
from what it finds, :mod:`engine_rl.collectors.atari` reads the frame skip an id registers.
"""

from __future__ import annotations

import difflib
import importlib
import re

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

__all__ = ["ATARI_LEGACY_GAMES", "EXTRAS", "REGISTERING_PACKAGES", "env_spec", "is_atari_id"]


def env_spec(env_id: str, *, owner: str = "env_spec") -> EnvSpec:
    """The registered spec of ``env_id``; a ``ValueError`` naming ``owner`` and close ids otherwise.

    ``"module:Id-v0"`` imports ``module`` first (as ``gymnasium.make`` does); an id not yet
    registered imports the installed :data:`REGISTERING_PACKAGES` (the Atari games) and looks again.
    An Atari id (:func:`is_atari_id`) without ale_py, or a module of an extra that is not installed,
    is a ``ValueError`` naming the extra (:data:`EXTRAS`).

    Examples:
        >>> env_spec("CartPole-v1").max_episode_steps
        500
        >>> env_spec("Cartpole-v1", owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: env_id 'Cartpole-v1' is not a registered gymnasium env; close matches: CartPole-v1, CartPole-v0, ...
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"{owner}: env_id must be a registered gymnasium id (a non-empty str), got {env_id!r}")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            if isinstance(err, ModuleNotFoundError) and err.name in EXTRAS:
                raise ValueError(f"{owner}: env_id {env_id!r} needs {EXTRAS[err.name]}") from None
            raise ValueError(f"{owner}: env_id {env_id!r}: cannot import {module!r} to register it ({err})") from None
    spec = gym.registry.get(name)
    if spec is None and not module:
        missing = _import_registering_packages()
        spec = gym.registry.get(name)
        if spec is None and "ale_py" in missing and is_atari_id(name):
            raise ValueError(f"{owner}: env_id {env_id!r} needs {EXTRAS['ale_py']}")
    if spec is None:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        hint = f"close matches: {', '.join(close)}" if close else "gymnasium.pprint_registry() lists the registered ids"
        raise ValueError(f"{owner}: env_id {env_id!r} is not a registered gymnasium env; {hint}")
    return spec


#: Installed packages that register their envs with gymnasium when imported (``ale_py``: the Atari
#: games, ``ALE/Breakout-v5`` and ``BreakoutNoFrameskip-v4``), so their ids need no ``module:`` prefix.
REGISTERING_PACKAGES = ("ale_py",)


#: The extra that installs each optional package envs come from, as the one-line error names it
#: (``engine_rl`` has no hard dependency on either).
EXTRAS = {
    "ale_py": "the Atari extra: pip install engine_rl[atari] (ale-py)",
    "mujoco": "the MuJoCo extra: pip install engine_rl[mujoco]",
}

#: The games ale_py registers as ``<Game>-v0``, ``<Game>-v4``, ``<Game>NoFrameskip-v0`` and
#: ``<Game>NoFrameskip-v4`` (each game also as ``ALE/<Game>-v5``), so that an Atari id is told apart
#: from a mistyped one without ale_py and the missing extra is named.
ATARI_LEGACY_GAMES = frozenset("""
    Adventure AirRaid Alien Amidar Assault Asterix Asteroids Atlantis BankHeist BattleZone BeamRider Berzerk
    Bowling Boxing Breakout Carnival Centipede ChopperCommand CrazyClimber Defender DemonAttack DoubleDunk
    ElevatorAction Enduro FishingDerby Freeway Frostbite Gopher Gravitar Hero IceHockey Jamesbond JourneyEscape
    Kangaroo Krull KungFuMaster MontezumaRevenge MsPacman NameThisGame Phoenix Pitfall Pong Pooyan PrivateEye
    Qbert Riverraid RoadRunner Robotank Seaquest Skiing Solaris SpaceInvaders StarGunner Tennis TimePilot
    Tutankham UpNDown Venture VideoPinball WizardOfWor YarsRevenge Zaxxon
""".split())


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names one of ale_py's Atari games (registered only once ale_py is imported).

    Examples:
        >>> is_atari_id("ALE/Pong-v5"), is_atari_id("BreakoutNoFrameskip-v4"), is_atari_id("Pong-v0")
        (True, True, True)
        >>> is_atari_id("CartPole-v1"), is_atari_id("Pong-v5")
        (False, False)
    """
    game = re.fullmatch(r"(\w+?)(?:NoFrameskip)?-v[04]", env_id)
    return (
        env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4")
        or (game is not None and game.group(1) in ATARI_LEGACY_GAMES)
    )


def _import_registering_packages() -> tuple[str, ...]:
    """Import :data:`REGISTERING_PACKAGES`; return those that cannot be imported (not installed)."""
    missing = []
    for package in REGISTERING_PACKAGES:
        try:
            importlib.import_module(package)
        except ImportError:
            missing.append(package)
    return tuple(missing)
