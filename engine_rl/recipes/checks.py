"""Checks of recipe config fields, shared by the configs' ``__post_init__``.

Each check raises a ``ValueError`` naming the config, the field, what the field accepts and the
value it got, e.g. ``DQNConfig: lr must be a positive finite number, got nan``. A config's
``__post_init__`` checks its fields alone and makes no env (:meth:`FieldChecks.env_fields`), so a
config is made and listed without the extras its env may need. :meth:`FieldChecks.env` checks
that ``make_env`` makes an env, or else that ``env_id`` is registered, and that its spaces suit
the algorithm (made once per id or callable, see :func:`~engine_rl.collectors.gym_envs.env_spaces`);
it runs through :meth:`~engine_rl.recipes.config_base.RecipeConfig.check_env`, with the algorithm's
:class:`EnvNeeds`, when a recipe is built and when ``engine-rl train`` starts.

Examples:
    >>> from dataclasses import dataclass
    >>> @dataclass(kw_only=True)
    ... class Demo:
    ...     lr: float = 1e-3
    ...     hidden: tuple[int, ...] = (64,)
    ...     def __post_init__(self):
    ...         check = FieldChecks(self)
    ...         check.positive("lr")
    ...         check.widths("hidden")
    >>> Demo(lr=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: Demo: lr must be a positive finite number, got nan
    >>> Demo(hidden=(0,))
    Traceback (most recent call last):
    ...
    ValueError: Demo: hidden must be a tuple of positive ints (layer widths), got (0,)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import gymnasium as gym

from engine_rl.algos.encoders import make_encoder
from engine_rl.checks import is_int, is_number
from engine_rl.collectors.env_factory import callable_name
from engine_rl.collectors.envpool_env import envpool_options
from engine_rl.collectors.gym_envs import env_spaces, env_spec
from engine_rl.collectors.wrappers import parse_wrappers
from engine_rl.device import DEVICE_NAMES, is_device_name
from engine_rl.envs import TORCH_ENVS
from engine_rl.recipes.env_source import env_label, env_source, recipe_spaces
from engine_rl.spaces import is_multi_discrete, is_vector_space

__all__ = ["EnvNeeds", "FieldChecks"]

#: Vectorization modes of :func:`~engine_rl.collectors.make_vec_env`.
VECTORIZATIONS = ("auto", "vector_entry_point", "sync", "async")

#: Seeds are below 2**63: torch takes seeds below 2**64 (``torch.manual_seed(2**64)`` raises "Overflow
#: when unpacking long long"), and a run adds to its seeds (env copy ``i`` is reset with ``seed + i``,
#: rank ``r`` of ``--nproc`` uses ``seed + r * 1_000_003``, TD3's noise ``seed + 1``).
SEED_LIMIT = 2**63


@dataclass(frozen=True)
class EnvNeeds:
    """What an algorithm takes of an env, declared by each recipe config as its ``env_needs``."""

    algo: str
    """The algorithm as errors name it (``"dqn"``)."""
    actions: str
    """``"discrete"``, ``"box"`` (a 1-D Box) or ``"discrete, multidiscrete or box"``."""


class FieldChecks:
    """Checks of the fields of one dataclass ``config``; errors name ``type(config).__name__``.

    Each method takes field names and raises a ``ValueError`` at the first field that fails.
    ``optional=True`` also accepts ``None``.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.owner = type(config).__name__

    def fail(self, name: str, accepted: str) -> NoReturn:
        """Raise ``ValueError("<Config>: <name> must be <accepted>, got <value>")``."""
        raise ValueError(f"{self.owner}: {name} must be {accepted}, got {getattr(self.config, name)!r}")

    def _each(self, names: Iterable[str], ok: Any, accepted: str, optional: bool) -> None:
        for name in names:
            value = getattr(self.config, name)
            if optional and value is None:
                continue
            if not ok(value):
                self.fail(name, accepted + (" or None" if optional else ""))

    def positive_ints(self, *names: str, optional: bool = False) -> None:
        """Ints >= 1 (not bools)."""
        self._each(names, lambda v: is_int(v) and v >= 1, "a positive int", optional)

    def nonnegative_ints(self, *names: str) -> None:
        """Ints >= 0 (not bools)."""
        self._each(names, lambda v: is_int(v) and v >= 0, "a non-negative int", False)

    def seeds(self, *names: str) -> None:
        """Ints in [0, 2**63) (:data:`SEED_LIMIT`)."""
        self._each(names, lambda v: is_int(v) and 0 <= v < SEED_LIMIT,
                   "an int in [0, 2**63) (torch takes seeds below 2**64; env copies and ranks add to a seed)", False)

    def bools(self, *names: str) -> None:
        """``True`` or ``False``."""
        self._each(names, lambda v: isinstance(v, bool), "True or False", False)

    def positive(self, *names: str, optional: bool = False) -> None:
        """Finite numbers > 0."""
        self._each(names, lambda v: is_number(v) and math.isfinite(v) and v > 0, "a positive finite number", optional)

    def nonnegative(self, *names: str, optional: bool = False) -> None:
        """Finite numbers >= 0."""
        self._each(names, lambda v: is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0", optional)

    def finite(self, *names: str, optional: bool = False) -> None:
        """Finite numbers."""
        self._each(names, lambda v: is_number(v) and math.isfinite(v), "a finite number", optional)

    def fractions(self, *names: str, zero: bool = True, optional: bool = False) -> None:
        """Numbers in [0, 1] (``zero=False``: in (0, 1])."""
        low = "[0" if zero else "(0"
        self._each(names, lambda v: is_number(v) and (0 <= v if zero else 0 < v) and v <= 1,
                   f"a number in {low}, 1]", optional)

    def choice(self, name: str, options: tuple[str, ...], *, optional: bool = False) -> None:
        """One of ``options`` (or None when ``optional``)."""
        value = getattr(self.config, name)
        if not (value in options or (optional and value is None)):
            self.fail(name, f"one of {options}" + (" or None" if optional else ""))

    def widths(self, *names: str) -> None:
        """Tuples of positive ints (hidden layer widths; empty: no hidden layer)."""
        self._each(names, lambda v: isinstance(v, tuple) and all(is_int(w) and w >= 1 for w in v),
                   "a tuple of positive ints (layer widths)", False)

    def names(self, *names: str) -> None:
        """Tuples of distinct non-empty strings (e.g. ``info_keys``)."""
        self._each(names, lambda v: isinstance(v, tuple) and all(isinstance(k, str) and k for k in v)
                   and len(set(v)) == len(v), "a tuple of distinct non-empty strings", False)

    def kwargs(self, *names: str) -> None:
        """Keyword arguments: a dict with str keys that are Python names, or None."""
        self._each(names, lambda v: isinstance(v, dict) and all(isinstance(k, str) and k.isidentifier() for k in v),
                   "a dict of keyword arguments (str keys)", True)

    def devices(self, *names: str) -> None:
        """Device names: 'auto', 'cpu', 'cuda' or 'cuda:N' (whether CUDA is there is checked at build time)."""
        self._each(names, is_device_name, DEVICE_NAMES, False)

    def at_least(self, name: str, other: str) -> None:
        """``config.<name> >= config.<other>`` (both already checked as numbers)."""
        value, bound = getattr(self.config, name), getattr(self.config, other)
        if value < bound:
            raise ValueError(f"{self.owner}: {name} ({value}) must be >= {other} ({bound})")

    def torch_env(self) -> None:
        """``env_backend='torch'``: ``env_id`` has a torch version, and no gymnasium-only option is set."""
        if self.config.make_env is not None:
            raise ValueError(
                f"{self.owner}: env_backend 'torch' makes its own envs ({', '.join(sorted(TORCH_ENVS))}), so it takes "
                f"no make_env (got {callable_name(self.config.make_env)}); use env_backend 'gymnasium'"
            )
        if self.config.env_id not in TORCH_ENVS:
            raise ValueError(
                f"{self.owner}: env_backend 'torch' needs an env_id with a torch version ({', '.join(sorted(TORCH_ENVS))}), "
                f"got {self.config.env_id!r}"
            )
        for name in ("wrappers", "info_keys", "env_kwargs"):
            if getattr(self.config, name, ()):
                raise ValueError(
                    f"{self.owner}: {name} {getattr(self.config, name)} are gymnasium options; env_backend 'torch' "
                    "takes none (use env_backend 'gymnasium')"
                )

    def envpool_env(self) -> None:
        """``env_backend='envpool'``: no ``make_env``, vectorization 'auto', and an ``env_id``, ``wrappers``
        and ``env_kwargs`` that EnvPool makes (:func:`~engine_rl.collectors.envpool_env.envpool_options`)."""
        if self.config.make_env is not None:
            raise ValueError(
                f"{self.owner}: env_backend 'envpool' makes its envs from env_id in EnvPool, so it takes no make_env "
                f"(got {callable_name(self.config.make_env)}); use env_backend 'gymnasium'"
            )
        if self.config.vectorization != "auto":
            raise ValueError(
                f"{self.owner}: vectorization {self.config.vectorization!r} is a gymnasium option; env_backend "
                "'envpool' steps its copies in C++ threads and takes 'auto' only"
            )
        envpool_options(self.config.env_id, wrappers=tuple(self.config.wrappers), env_kwargs=self.config.env_kwargs,
                        owner=self.owner)

    def env_fields(self) -> None:
        """The fields that say where the envs come from, checked without making an env or importing
        ``make_env``: ``env_id`` a non-empty str, ``make_env`` None, a callable or a ``'module:function'``
        name (imported when the recipe is built), ``wrappers`` names that parse
        (:func:`~engine_rl.collectors.wrappers.parse_wrappers`)."""
        env_id = self.config.env_id
        if not isinstance(env_id, str) or not env_id:
            self.fail("env_id", "a registered gymnasium id (a non-empty str)")
        make_env = self.config.make_env
        if not (make_env is None or callable(make_env)
                or (isinstance(make_env, str) and make_env.count(":") == 1 and all(make_env.split(":")))):
            self.fail("make_env", "a callable returning a gymnasium.Env or 'module:function' naming one")
        parse_wrappers(getattr(self.config, "wrappers", ()), owner=self.owner)

    def env(self, *, algo: str, actions: str, vectorization: str | None = None, encoders: bool = False,
            normalized: bool = False) -> None:
        """``make_env`` makes (or else ``env_id`` is a registered gymnasium id of) an env whose spaces suit ``algo``.

        Args:
            algo: the algorithm named in errors (``"dqn"``).
            actions: ``"discrete"``, ``"box"`` (a 1-D Box) or ``"discrete, multidiscrete or box"``.
            vectorization: the config's vectorization mode; ``"vector_entry_point"`` needs an
                env that registers one.
            encoders: the recipe puts an encoder chosen by the observation space under its networks
                (:func:`~engine_rl.algos.encoders.make_encoder`: images, Discrete, Dict, ...).
            normalized: the recipe normalizes observations, which takes a 1-D Box only.

        The observation space (after the config's ``wrappers``) must be a 1-D Box (the recipes'
        networks are MLPs), or with ``encoders`` any space :func:`~engine_rl.algos.encoders.make_encoder` encodes.
        """
        env_id = self.config.env_id
        if not isinstance(env_id, str) or not env_id:
            self.fail("env_id", "a registered gymnasium id (a non-empty str)")
        source = env_source(self.config)
        wrappers = getattr(self.config, "wrappers", ())
        if getattr(self.config, "env_backend", None) == "envpool":  # EnvPool's ids and spaces (no gymnasium spec)
            spec, wrappers = None, ()  # it preprocesses an Atari game itself
            observation, action = recipe_spaces(self.config)
        else:
            spec = None if callable(source) else env_spec(source, owner=self.owner)
            observation, action = env_spaces(source, wrappers=wrappers, env_kwargs=self.config.env_kwargs,
                                             owner=self.owner)
        label = env_label(self.config)
        fix = "set env_id to" if self.config.make_env is None else "make_env must make"
        discrete = isinstance(action, gym.spaces.Discrete)
        box = isinstance(action, gym.spaces.Box) and len(action.shape) == 1
        kind = type(action).__name__
        if isinstance(action, gym.spaces.Box) and not box:
            kind += f" (shape {tuple(action.shape)})"
        if actions == "discrete" and not discrete:
            raise ValueError(
                f"{self.owner}: {algo} needs a discrete action space; {label} has {kind} actions "
                f"({fix} an env with Discrete actions)"
            )
        if actions == "box" and not box:
            raise ValueError(
                f"{self.owner}: {algo} needs a continuous (Box) action space; {label} has {kind} actions "
                f"({fix} an env with 1-D Box actions)"
            )
        multi = is_multi_discrete(action)
        if actions == "discrete, multidiscrete or box" and not (discrete or multi or box):
            raise ValueError(
                f"{self.owner}: {algo} needs a Discrete, 1-D MultiDiscrete or 1-D Box action space; {label} has {action}"
            )
        vector = is_vector_space(observation)
        if not vector and (normalized or not encoders):
            why = " with normalize_observations (set it false for other spaces)" if encoders else ""
            if isinstance(observation, gym.spaces.Box) and len(observation.shape) == 1:  # then it is uint8
                why += "; a uint8 one (bytes, such as Atari RAM) goes through an encoder instead"
            raise ValueError(
                f"{self.owner}: {algo} ({label}): the observation space must be a 1-D Box{why}, got {observation} "
                "(--set wrappers=FlattenObservation flattens Discrete, Tuple and Dict spaces)"
            )
        if not vector:
            # a ValueError naming a key it cannot encode
            make_encoder(observation, owner=f"{self.owner}: {algo} ({label})")
        if vectorization == "vector_entry_point" and wrappers:
            raise ValueError(
                f"{self.owner}: vectorization 'vector_entry_point' batches the env copies itself, so it "
                f"takes no wrappers (got {wrappers}); use 'auto', 'sync' or 'async'"
            )
        if vectorization == "vector_entry_point" and (spec is None or spec.vector_entry_point is None):
            raise ValueError(
                f"{self.owner}: vectorization 'vector_entry_point' needs an env that registers a vector entry "
                f"point; {label} has none (use 'auto', 'sync' or 'async')"
            )
