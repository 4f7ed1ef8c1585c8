"""Envs from the user's own function: a ``make_env`` callable, or ``"module:function"`` naming one.

A recipe's ``make_env`` field (and the first argument of :func:`~engine_rl.collectors.make_vec_env`)
may be a callable that returns one ``gymnasium.Env``: a function, a class, a
``functools.partial``. A config file can only hold text, so ``config.json`` records it by
:func:`callable_name`, and :func:`resolve_callable` imports such a name back, for ``--resume``
and ``engine-rl eval`` once the user names it again or trusts the file
(:mod:`engine_rl.run.stored_config`). Only a function or class defined at the top level of an
importable module has a name that imports back; a lambda, a partial or a notebook's function is
recorded (so a changed one is noticed on resume) but its run resumes from Python, with the same config.

Examples:
    >>> callable_name(gym.make)
    'gymnasium.envs.registration:make'
    >>> resolve_callable("gymnasium.envs.registration:make", owner="demo") is gym.make
    True
    >>> resolve_callable("gymnasium:no_such_function", owner="demo")
    Traceback (most recent call last):
    ...
    ValueError: demo: make_env 'gymnasium:no_such_function' cannot be imported: module 'gymnasium' has no attribute 'no_such_function'
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

__all__ = ["EnvFactory", "callable_name", "check_callable_name", "make_checked_env", "resolve_callable"]

EnvFactory = Callable[..., gym.Env]


def callable_name(fn: Any) -> str:
    """``"module:qualname"`` of a function or class; a partial as ``functools.partial(NAME, ARGS)``;
    a string is returned as it is.

    Examples:
        >>> from functools import partial
        >>> callable_name(partial(gym.make, "CartPole-v1", max_episode_steps=50))
        "functools.partial(gymnasium.envs.registration:make, 'CartPole-v1', max_episode_steps=50)"
        >>> callable_name(lambda: None).rpartition(":")[2]
        '<lambda>'
    """
    if isinstance(fn, str):
        return fn
    if isinstance(fn, functools.partial):
        args = [callable_name(fn.func), *map(repr, fn.args), *(f"{k}={v!r}" for k, v in fn.keywords.items())]
        return f"functools.partial({', '.join(args)})"
    target = fn if hasattr(fn, "__qualname__") else type(fn)  # an instance with __call__: its class
    return f"{getattr(target, '__module__', None) or '?'}:{target.__qualname__}"


def resolve_callable(value: Any, *, owner: str, field: str = "make_env") -> EnvFactory:
    """``value`` itself if it is callable; ``"module:qualname"`` imported; a ``ValueError`` naming
    ``owner``, ``field`` and the value otherwise."""
    if callable(value):
        return value
    module_name, qualname = check_callable_name(value, owner=owner, field=field)
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{owner}: {field} {value!r} cannot be imported: {err}") from None
    if not callable(target):
        raise ValueError(f"{owner}: {field} {value!r} names a {type(target).__name__}, not a callable")
    return target


def check_callable_name(value: Any, *, owner: str, field: str = "make_env") -> tuple[str, str]:
    """``(module, qualname)`` of a ``"module:qualname"`` name that :func:`resolve_callable` could
    import, found without importing anything; a ``ValueError`` naming ``owner``, ``field`` and
    the value for any other value (a recorded partial, lambda or ``__main__`` function, which
    cannot be imported back).

    Examples:
        >>> check_callable_name("os:system", owner="demo")
        ('os', 'system')
        >>> check_callable_name("functools.partial(os:system, 'ls')", owner="demo")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: demo: make_env "functools.partial(os:system, 'ls')" is a recorded partial, ...
    """
    resumes_from_python = (
        "; a run made by a lambda, a partial or a function of a notebook or script resumes from Python, "
        "with train(name, config, out, resume=True) and the same make_env"
    )
    if isinstance(value, str) and value.startswith("functools.partial("):
        raise ValueError(
            f"{owner}: {field} {value!r} is a recorded partial, which cannot be imported{resumes_from_python}"
        )
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        raise ValueError(
            f"{owner}: {field} must be a callable returning a gymnasium.Env or 'module:function' naming one, "
            f"got {value!r}"
        )
    module_name, qualname = value.split(":")
    if module_name == "__main__" or "<" in qualname:  # '<lambda>', 'make.<locals>.inner'
        raise ValueError(f"{owner}: {field} {value!r} cannot be imported by its name{resumes_from_python}")
    return module_name, qualname


def make_checked_env(fn: EnvFactory, *, owner: str = "make_env", **kwargs: Any) -> gym.Env:
    """``fn(**kwargs)``, checked to be a ``gymnasium.Env``; any failure is a ``ValueError`` naming
    ``fn`` by :func:`callable_name`."""
    try:
        env = fn(**kwargs)
    except Exception as err:  # noqa: BLE001  (the user's constructor: a missing file, a bad argument, ...)
        raise ValueError(f"{owner}: make_env {callable_name(fn)} failed: {type(err).__name__}: {err}") from err
    if not isinstance(env, gym.Env):
        raise ValueError(
            f"{owner}: make_env {callable_name(fn)} returned an object of type {type(env).__name__}, "
            "not a gymnasium.Env (it must make one env copy; engine_rl vectorizes the copies)"
        )
    return env
