"""Recipe configs: dataclasses overridable from ``key=value`` strings, printable with docs."""

from __future__ import annotations

import ast
import dataclasses
import typing
from typing import Any

__all__ = ["apply_overrides", "describe_config", "field_docs"]


def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each dataclass field (``x: int = 1`` then ``\"\"\"doc\"\"\"``),
    base classes' first, so a subclass that redeclares a field documents it anew."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    import inspect

    try:
        tree = ast.parse(inspect.getsource(cls))
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


def _coerce(name: str, text: str, annotation: Any, owner: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if text.lower() == "none" and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if str in non_none:  # a name, e.g. make_env's 'module:function'
            return text
        if len(non_none) == 1:
            return _coerce(name, text, non_none[0], owner)
    if annotation is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
    elif annotation is int:
        try:
            value = float(text) if any(c in text for c in ".eE") else int(text)
            if float(value).is_integer():
                return int(value)
        except ValueError:
            pass
    elif annotation is float:
        try:
            return float(text)
        except ValueError:
            pass
    elif annotation is str:
        return text
    elif origin is tuple and args and args[0] is str:  # names: "a,b", "('a', 'b')" or "" (none)
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = [part.strip() for part in _top_level_parts(text) if part.strip()]
        if isinstance(value, str):
            value = (value,)
        if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif origin is dict:  # keyword arguments: "{'map_name': '8x8'}"
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, dict):
            return value
    elif origin is tuple:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, int):
            value = (value,)
        if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
            return tuple(value)
    type_name = getattr(annotation, "__name__", str(annotation))
    raise ValueError(f"{owner}: override {name}={text!r} is not a valid {type_name}")


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
