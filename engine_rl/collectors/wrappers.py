"""Gymnasium wrappers named in a config: ``"FlattenObservation"``, ``"TimeLimit(max_episode_steps=50)"``.

A recipe's ``wrappers`` field is a tuple of such names; :func:`parse_wrappers` turns each into a
callable applied to every env copy, in order (innermost first), before vectorization. A name is
a single-env wrapper class of ``gymnasium.wrappers`` or one of engine_rl's own (:data:`OWN_WRAPPERS`:
``FireOnLifeStart``, :mod:`engine_rl.collectors.atari`; ``EvaluationStepCap``,
:mod:`engine_rl.collectors.step_cap`; ``MaskVelocity``, :mod:`engine_rl.collectors.partial_obs`); keyword arguments, if any, are Python
literals. Nothing is evaluated: the text is parsed, never run.

Examples:
    >>> import gymnasium as gym
    >>> [w.__name__ for w in parse_wrappers(("FlattenObservation", "TimeLimit(max_episode_steps=5)"))]
    ['FlattenObservation', 'TimeLimit(max_episode_steps=5)']
    >>> env = gym.make("Blackjack-v1")
    >>> for wrap in parse_wrappers(("FlattenObservation",)):
    ...     env = wrap(env)
    >>> env.observation_space.shape
    (45,)
    >>> parse_wrappers(("FlattenObs",), owner="demo")
    Traceback (most recent call last):
    ...
    ValueError: demo: wrappers entry 'FlattenObs' is not a single-env wrapper of gymnasium.wrappers; close matches: FlattenObservation
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Sequence

import gymnasium as gym
import gymnasium.wrappers

from engine_rl.collectors.atari import FireOnLifeStart
from engine_rl.collectors.partial_obs import MaskVelocity
from engine_rl.collectors.step_cap import EvaluationStepCap

__all__ = ["OWN_WRAPPERS", "apply_wrappers", "parse_wrappers", "wrapper_names"]

EnvWrapper = Callable[[gym.Env], gym.Env]

#: engine_rl's wrappers that a ``wrappers`` entry may name beside gymnasium's.
OWN_WRAPPERS: dict[str, type[gym.Wrapper]] = {
    "FireOnLifeStart": FireOnLifeStart, "EvaluationStepCap": EvaluationStepCap, "MaskVelocity": MaskVelocity,
}


def wrapper_names() -> list[str]:
    """The single-env wrapper classes of ``gymnasium.wrappers`` and :data:`OWN_WRAPPERS` (what a
    ``wrappers`` entry may name)."""
    return sorted(
        [name for name in dir(gymnasium.wrappers)
         if isinstance(getattr(gymnasium.wrappers, name), type) and issubclass(getattr(gymnasium.wrappers, name), gym.Wrapper)
         and getattr(gymnasium.wrappers, name) is not gym.Wrapper] + list(OWN_WRAPPERS)
    )


def _parse_one(text: str, owner: str) -> EnvWrapper:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{owner}: wrappers entries must be non-empty strings, got {text!r}")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Name):
        name, kwargs = node.id, {}
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and all(
            kw.arg is not None for kw in node.keywords):
        name = node.func.id
        keys = [kw.arg for kw in node.keywords]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:  # Python refuses f(a=1, a=2); a dict of them would keep the last
            raise ValueError(
                f"{owner}: wrappers entry {text!r}: keyword argument {', '.join(map(repr, repeated))} repeated; "
                "give each keyword once"
            )
        try:
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        except ValueError:
            raise ValueError(
                f"{owner}: wrappers entry {text!r}: keyword arguments must be Python literals "
                "(numbers, strings, tuples...), e.g. 'TimeLimit(max_episode_steps=200)'"
            ) from None
    else:
        raise ValueError(
            f"{owner}: wrappers entry {text!r} is not a wrapper name or 'Name(key=value, ...)', "
            "e.g. 'FlattenObservation' or 'TimeLimit(max_episode_steps=200)'"
        )
    known = wrapper_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"close matches: {', '.join(close)}" if close else f"known: {', '.join(known)}"
        raise ValueError(f"{owner}: wrappers entry {name!r} is not a single-env wrapper of gymnasium.wrappers; {hint}")
    cls = OWN_WRAPPERS[name] if name in OWN_WRAPPERS else getattr(gymnasium.wrappers, name)

    def wrap(env: gym.Env) -> gym.Env:
        return cls(env, **kwargs)

    wrap.__name__ = text.strip()
    return wrap


def parse_wrappers(names: Sequence[str], *, owner: str = "wrappers") -> list[EnvWrapper]:
    """One callable ``env -> wrapped env`` per entry of ``names``; a ``ValueError`` naming
    ``owner``, the entry and what is accepted otherwise (see the module docstring)."""
    return [_parse_one(text, owner) for text in names]


def apply_wrappers(env: gym.Env, wrappers: Sequence[EnvWrapper], *, owner: str = "wrappers") -> gym.Env:
    """``env`` wrapped by each of ``wrappers`` in order; a wrapper that fails on this env (a wrong
    keyword, a space it does not take) is a ``ValueError`` naming it."""
    for wrap in wrappers:
        try:
            env = wrap(env)
        except MemoryError as err:  # numpy's "Unable to allocate 14.9 GiB for an array with shape ..."
            raise ValueError(
                f"{owner}: wrappers entry {wrap.__name__!r} runs out of memory (MemoryError: {err}); lower its sizes"
            ) from err
        except Exception as err:  # noqa: BLE001  (any failure of a user-named wrapper)
            raise ValueError(f"{owner}: wrapper {wrap.__name__!r} cannot wrap {env}: {type(err).__name__}: {err}") from err
    return env
