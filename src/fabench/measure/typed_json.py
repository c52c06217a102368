"""JSON values (parsed) read into frozen dataclasses, every key and type checked, and back: the reader
of the job specs (fabench.measure.spec). A missing, unknown or mistyped key is a SpecError of one
line naming it. No library: the benchmark image has only the measuring process's dependencies.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Literal

from fabench.config import SpecError, quote


def parse(cls, value, where: str):
    """`value` (parsed JSON) as dataclass `cls`, every field checked: SpecError names the first key
    missing, unknown or of the wrong type."""
    label = where or "the spec"
    if not isinstance(value, dict):
        raise SpecError(f"{label}: {quote(value)} is not an object")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [key for key in value if key not in known]
    if unknown:
        raise SpecError(f"{_at(where, unknown[0])}: unknown key (expected the keys {', '.join(known)})")
    required = [name for name, f in known.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in value]
    if missing:
        raise SpecError(f"{label}: missing {', '.join(missing)} (expected the keys {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    return cls(**{key: read(hints[key], item, _at(where, key)) for key, item in value.items()})


def read(kind, value, where: str):
    """One value of type `kind` (int, float, bool, str, a Literal, X | None, tuple[X, ...],
    dict[str, X] or a dataclass), or SpecError naming `where`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return parse(kind, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return read(option, value, where)
            except SpecError:
                continue
        raise SpecError(f"{where}: {quote(value)} is not {' or '.join(_name(a) for a in args)}")
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{where}: {quote(value)} is not {_name(kind)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(f"{where}: {quote(value)} is not a list")
        return tuple(read(args[0], item, f"{where}.{i}") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: {quote(value)} is not an object")
        return {key: read(args[1], item, f"{where}.{key}") for key, item in value.items()}
    if not _is(kind, value):
        raise SpecError(f"{where}: {quote(value)} is not {_name(kind)}")
    return value


def _is(kind, value) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _name(kind) -> str:
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    names = {str: "a string", int: "an integer", bool: "true or false", float: "a finite number",
             type(None): "null"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def to_plain(value):
    """A dataclass as JSON values: tuples as lists, nested dataclasses as objects."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value
