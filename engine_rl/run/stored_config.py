"""A config read back from disk is data, not code.

A run's ``config.json`` and an inference checkpoint's ``config`` may name code: ``make_env``
(``"module:function"``, imported and called with ``env_kwargs``) and an ``env_id`` with a module
prefix (``"module:Env-v0"``: gymnasium imports the module to register the id). Whoever wrote the
file chose that code, so ``engine-rl train --resume`` and ``engine-rl eval`` check the stored
fields with :func:`check_stored_code` before any config object is made from them: code runs only
when the user names the field again (``--resume --set make_env=...``: the user's value replaces the
stored one, and a resume refuses a value that differs) or trusts the file (``--trust-config``). Registered gymnasium ids (``CartPole-v1``, ``ALE/Pong-v5``) name no code.
A config built in Python (``make_config(..., make_env=my_function)``) is the user's own and is
not checked.

Examples:
    >>> check_stored_code({"env_id": "CartPole-v1", "make_env": None}, source="demo.json")
    >>> check_stored_code({"make_env": "os:system", "env_kwargs": {"command": "ls"}},
    ...                   source="demo.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: demo.json names code to run (make_env 'os:system' called with env_kwargs {'command': 'ls'}); ...
    >>> check_stored_code({"make_env": "os:system"}, source="demo.json", named={"make_env": "os:system"})
    >>> stored_code({"env_id": "mymodule:MyEnv-v0", "make_env": None})
    {'env_id': 'mymodule:MyEnv-v0'}
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from engine_rl.collectors.env_factory import check_callable_name

__all__ = ["CODE_FIELDS", "check_stored_code", "named_fields", "stored_code"]

#: The config fields whose value can name code to import or call.
CODE_FIELDS = ("make_env", "env_id")


def stored_code(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a stored config's ``fields`` that name code: ``make_env`` unless it is
    None, ``env_id`` if it has a ``module:`` prefix."""
    found = {}
    if fields.get("make_env") is not None:
        found["make_env"] = fields["make_env"]
    env_id = fields.get("env_id")
    if isinstance(env_id, str) and ":" in env_id:
        found["env_id"] = env_id
    return found


def named_fields(overrides: Iterable[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """``{key: value}`` of ``key=value`` overrides (or of a dict), for :func:`check_stored_code`;
    an item without ``=`` is left to :func:`~engine_rl.recipes.config.apply_overrides` to refuse."""
    if not overrides:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    pairs = (item.split("=", 1) for item in overrides if isinstance(item, str) and "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def check_stored_code(
    fields: Mapping[str, Any],
    *,
    source: str,
    owner: str = "config",
    named: Mapping[str, Any] | None = None,
    trusted: bool = False,
    again: str | None = None,
) -> None:
    """Refuse a stored config (``fields``, as read from ``source``) that names code, unless
    ``trusted`` or ``named`` gives each such field again; import and call nothing.

    Args:
        fields: the config's entries as stored (JSON values).
        source: what the message names first: the file, e.g. ``"--resume: runs/x/config.json"``.
        owner: the config class, named by the errors about a ``make_env`` name that cannot be
            imported back at all (a recorded lambda, partial or ``__main__`` function).
        named: values the user gave for these fields (``--set``): a field named there is the
            user's choice, so the caller makes the config with ``named``'s values in place of
            the stored ones.
        trusted: the user trusts the file (``--trust-config``).
        again: how the user names a value again, e.g. ``"--set"`` (``train --resume``); with
            None the message offers ``--trust-config`` only (``eval``).

    Raises:
        ValueError: one line naming ``source``, each field, its value (and ``env_kwargs``) and
            the ways to accept it.
    """
    code, named = stored_code(fields), named or {}
    if "make_env" in code and "make_env" not in named:  # a name that can never be imported back: say that first
        check_callable_name(code["make_env"], owner=owner)
    unconfirmed = {k: v for k, v in code.items() if k not in named}
    if trusted or not unconfirmed:
        return
    what = []
    for key, value in unconfirmed.items():
        if key == "make_env":
            kwargs = fields.get("env_kwargs")
            what.append(f"make_env {value!r}" + (f" called with env_kwargs {kwargs!r}" if kwargs else ""))
        else:
            what.append(f"env_id {value!r}, which imports module {value.rpartition(':')[0]!r}")
    hint = "pass --trust-config if you trust this file"
    if again is not None:
        sets = " ".join(f"{again} {shlex.quote(f'{k}={v}')}" for k, v in unconfirmed.items())
        hint = f"pass {sets} again, or --trust-config if you trust this file"
    raise ValueError(
        f"{source} names code to run ({'; '.join(what)}); a stored config never runs code by itself: {hint}"
    )
