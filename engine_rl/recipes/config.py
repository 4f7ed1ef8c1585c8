"""Recipe configs: dataclasses overridable from ``key=value`` strings, printable with docs."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import textwrap
import types
import typing
from typing import Any

__all__ = ["apply_overrides", "describe_config", "field_docs"]


def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each dataclass field (``x: int = 1`` then ``\"\"\"doc\"\"\"``),
    base classes' first: a subclass that redeclares a field to change its default keeps the base's
    docstring, unless it writes one of its own."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))  # dedent: a class defined in a function
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_NOT_A_LITERAL = object()


def _coerce(name: str, text: str, annotation: Any, owner: str) -> Any:
    """The ``--set name=text`` value as the field's type, or a ``ValueError`` naming the config, the
    field, the text and the type: ``'none'`` for an optional field; bools as true/false, yes/no or
    1/0; ints also as ``1e6``; tuples and dicts as Python literals, and tuples of names also as
    ``a,b`` (split at the commas outside brackets, so ``TimeLimit(max_episode_steps=200),FlattenObservation``
    is two wrappers); a field that takes a str (``make_env``'s ``'module:function'``) as the text.

    A small parser, not tyro's or OmegaConf's: both were tried on these fields. tyro parses
    ``--name value`` flags and reports in a multi-line box, refuses ``dict[str, Any]`` (``env_kwargs``)
    and a callable-or-str field (``make_env``), and reads neither ``true`` nor ``1e6``; OmegaConf's
    dotlist reads YAML (``None`` and ``(32, 32)`` stay strings), its dataclass schema refuses
    ``make_env``'s union, and its errors span three lines. Either would change what ``--set``
    accepts and the one-line errors that name the field, the value and the type.
    """
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.lower() == "none" and len(options) < len(typing.get_args(annotation)):
            return None
        if str in options:  # a name, e.g. make_env's 'module:function'
            return text
        if len(options) == 1:
            annotation = options[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is str:
        return text
    if annotation is bool and text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if annotation is int and (number := _int(text)) is not None:
        return number
    if annotation is float:
        with contextlib.suppress(ValueError):
            return float(text)  # 'nan' and 'inf' too: the config's checks name them
    value = _literal(text)
    if origin is dict and isinstance(value, dict):
        return value
    if origin is tuple and args:
        if value is _NOT_A_LITERAL and args[0] is str:  # names: "a,b" or "" (none)
            value = [part.strip() for part in _top_level_parts(text) if part.strip()]
        if isinstance(value, args[0]):  # one name or one width
            value = (value,)
        if isinstance(value, (tuple, list)) and all(isinstance(v, args[0]) for v in value):
            return tuple(value)
    type_name = getattr(annotation, "__name__", str(annotation))
    raise ValueError(f"{owner}: override {name}={text!r} is not a valid {type_name}")


def _int(text: str) -> int | None:
    """``text`` as an int (``'1e6'`` too: a float that is whole), or None."""
    try:
        if not any(c in text for c in ".eE"):
            return int(text)
        number = float(text)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def _literal(text: str) -> Any:
    """``ast.literal_eval(text)``, or ``_NOT_A_LITERAL``."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_A_LITERAL


def _top_level_parts(text: str) -> list[str]:
    """``"A(k=[1, 2]),B"`` -> ``["A(k=[1, 2])", "B"]``: split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def apply_overrides(config: Any, overrides: list[str] | dict[str, Any]) -> Any:
    """A copy of the dataclass ``config`` with ``key=value`` overrides applied and re-validated.

    Unknown keys and values of the wrong type raise ``ValueError`` naming the key and listing
    the valid ones.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass(kw_only=True)
        ... class C:
        ...     lr: float = 1e-3
        ...     hidden: tuple[int, ...] = (64, 64)
        >>> apply_overrides(C(), ["lr=3e-4", "hidden=(32,)"])
        C(lr=0.0003, hidden=(32,))
        >>> apply_overrides(C(), ["lrr=1"])
        Traceback (most recent call last):
        ...
        ValueError: C: unknown key 'lrr'; valid keys: hidden, lr
    """
    cls = type(config)
    owner = cls.__name__
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(config) if f.init}
    items = overrides.items() if isinstance(overrides, dict) else [_split(o, owner) for o in overrides]
    changes: dict[str, Any] = {}
    for key, value in items:
        if key not in fields:
            hint = getattr(cls, "absent_field_hints", {}).get(key)
            if hint is not None:  # a field of other recipes: say where it is
                raise ValueError(f"{owner}: unknown key {key!r}: {hint}")
            raise ValueError(f"{owner}: unknown key {key!r}; valid keys: {', '.join(sorted(fields))}")
        changes[key] = _coerce(key, value, hints[key], owner) if isinstance(value, str) else value
    return dataclasses.replace(config, **changes)


def _split(item: str, owner: str) -> tuple[str, str]:
    if "=" not in item:
        raise ValueError(f"{owner}: override {item!r} must look like key=value")
    key, value = item.split("=", 1)
    return key.strip(), value.strip()


def describe_config(config: Any) -> str:
    """One line per field: ``name = value  # doc``."""
    docs = field_docs(type(config))
    lines = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        lines.append(f"  {f.name} = {value!r}" + (f"  # {docs[f.name]}" if f.name in docs else ""))
    return "\n".join(lines)
