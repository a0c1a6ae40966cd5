"""Converting a config dict to Structs with errors that name the path: :func:`convert`, :func:`config_error`.

Part of :mod:`ragbench.settings`. A msgspec validation error becomes one
line, ``"<table>.<path>: <problem>"``: an unknown key lists the valid ones
(``for backend 'hnsw'`` when they are a typed backend's), an expected type
gets the value found, an enum lists its choices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

import msgspec
from msgspec import Struct

from ..errors import ConfigError
from .params import Params
from .tables import Stage

__all__ = ["config_error", "convert", "typed_backend"]

T = TypeVar("T")

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<key>.*)`$")


def convert(data: Any, cls: type[T], where: str) -> T:
    """``msgspec.convert(data, cls)`` raising :class:`ConfigError` ``"<where>.<path>: <problem>"``."""
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise config_error(exc, data, cls, where) from None


def config_error(
    exc: msgspec.ValidationError, data: Any, cls: type[Any], where: str
) -> ConfigError:
    """A msgspec error as one line naming the path: ``run.queries: expected int, got str``."""
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    msg, path = m["msg"], _path(m["path"] or "")
    name = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    unknown = _UNKNOWN.match(msg)
    if unknown:
        sub = _struct_at(cls, path)
        valid = sorted(sub.__struct_encode_fields__) if sub is not None else []
        backend = data.get("backend") if isinstance(data, Mapping) else None
        backend_keys = sub is not None and (issubclass(sub, Params) or typed_backend(sub))
        of = f" for backend {backend!r}" if backend is not None and backend_keys else ""
        return ConfigError(
            f"{name}: unknown key {unknown['key']!r}{of}; valid keys: {', '.join(valid) or '(none)'}"
        )
    if isinstance(exc.__cause__, ConfigError):  # raised by a __post_init__ check
        return ConfigError(f"{name}: {msg}")
    msg = msg.replace("`", "")
    msg = msg[:1].lower() + msg[1:]
    if msg.startswith("expected") and ", got" not in msg:
        found, value = _value_at(data, path)
        msg += f", got {value!r}" if found else ""
    enum = re.match(r"invalid enum value (?P<value>.*)$", msg)
    if enum:  # "serialize.shape: unknown shape 'rows'; valid: row, columnar"
        msg = f"unknown {path[-1] if path else 'value'} {enum['value']}; valid: "
        msg += ", ".join(map(str, _choices(cls, path)))
    return ConfigError(f"{name}: {msg}")


def _path(text: str) -> list[str | int]:
    """``.retrieve.build.M`` / ``.ngram[1]`` as its parts."""
    parts: list[str | int] = []
    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", text):
        parts.append(int(index) if index else key)
    return parts


def _value_at(data: Any, path: list[str | int]) -> tuple[bool, Any]:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, data


def _struct_of(typ: Any) -> type[Struct] | None:
    """The Struct type inside ``typ`` (unwrapping Optional, Annotated and unions), if any."""
    if isinstance(typ, type) and issubclass(typ, Struct):
        return typ
    for arg in get_args(typ) if get_origin(typ) is not None or hasattr(typ, "__args__") else ():
        found = _struct_of(arg)
        if found is not None:
            return found
    return None


def _struct_at(cls: type[Any], path: list[str | int]) -> type[Struct] | None:
    """The Struct type at ``path`` inside Struct ``cls`` (None when the path leaves Structs)."""
    current: type[Struct] | None = _struct_of(cls)
    for part in path:
        if current is None or not isinstance(part, str):
            return None
        types = {f.encode_name: f.type for f in msgspec.structs.fields(current)}
        current = _struct_of(types.get(part))
    return current


def _choices(cls: type[Any], path: list[str | int]) -> list[Any]:
    """The values a ``Literal`` field at ``path`` allows."""
    parent = _struct_at(cls, path[:-1])
    if parent is None or not path:
        return []
    types = {f.encode_name: f.type for f in msgspec.structs.fields(parent)}
    return _literals(types.get(str(path[-1])))


def _literals(typ: Any) -> list[Any]:
    if get_origin(typ) is Literal:
        return list(get_args(typ))
    return [v for arg in get_args(typ) for v in _literals(arg)]


def typed_backend(cls: type[Any]) -> bool:
    """Whether ``cls`` is the Struct of one typed backend of a stage (its ``backend`` a ``Literal``)."""
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        return False
    types = {f.name: f.type for f in msgspec.structs.fields(cls)}
    return get_origin(types.get("backend")) is Literal
