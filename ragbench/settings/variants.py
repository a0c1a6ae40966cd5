"""The Struct of every typed backend, the whole :class:`Config`, and :func:`parse`.

Part of :mod:`ragbench.settings`. Each backend whose parameters
:mod:`ragbench.settings.params` types gets a Struct of its own (:data:`VARIANTS`),
made from its stage's base Struct; any other backend name gets the stage's
open Struct (:data:`OPEN`), whose ``params`` the backend checks itself.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable, Mapping
from os import PathLike, fspath
from typing import Any, Literal, TypeVar, cast

import msgspec
from msgspec import UNSET, UnsetType, field

from ..errors import ConfigError
from .convert import convert
from .params import INDEXES, STAGE_PARAMS, Params
from .tables import (
    STAGES,
    Cache,
    Dataset,
    Embed,
    Generate,
    Prompt,
    Rerank,
    Retrieve,
    Run,
    Serialize,
    Stage,
    Table,
    Transport,
)

__all__ = [
    "OPEN",
    "TABLES",
    "TABLE_TYPES",
    "VARIANTS",
    "Config",
    "backend_names",
    "parse",
]

S = TypeVar("S", bound=Stage)

#: Stage table → typed backend → its Struct; every other backend name gets :data:`OPEN`'s.
VARIANTS: dict[str, dict[str, type[Stage]]] = {table: {} for table in STAGES}
#: Stage table → the Struct of a backend ragbench does not type (its ``params`` stay open).
OPEN: dict[str, type[Stage]] = {}


def _struct_name(base: type[Stage], backend: str) -> str:
    return base.__name__ + "".join(p.title() for p in re.split(r"[^a-zA-Z0-9]+", backend))


def _typed(base: type[Stage], backend: str, specs: list[tuple[str, Any, Any]]) -> type[Stage]:
    """The Struct of typed ``backend`` on ``base``: ``backend`` its one value, unknown keys refused."""
    cls = msgspec.defstruct(
        _struct_name(base, backend),
        [("backend", Literal[backend], backend), *specs],
        bases=(base,),
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )
    return cast("type[Stage]", cls)


def _define(table: str, backend: str, fields: Mapping[str, Any]) -> type[Stage]:
    """The Struct of ``backend`` of stage ``table``: its parameters, each unset unless given."""
    return _typed(
        STAGES[table], backend, [(key, typ | UnsetType, UNSET) for key, typ in fields.items()]
    )


def _define_index(backend: str, build: type[Params], search: type[Params]) -> type[Stage]:
    return _typed(
        Retrieve,
        backend,
        [
            ("build", build, field(default_factory=build)),
            ("search", search, field(default_factory=search)),
        ],
    )


def _define_open(table: str) -> type[Stage]:
    base = STAGES[table]
    default = base.__struct_defaults__[base.__struct_fields__.index("backend")]
    specs: list[tuple[str, Any, Any]] = [
        ("backend", str | None, default),
        ("options", dict[str, Any], field(default_factory=dict)),
    ]
    if table == "retrieve":
        specs += [
            ("build", dict[str, Any], field(default_factory=dict)),
            ("search", dict[str, Any], field(default_factory=dict)),
        ]
    cls = msgspec.defstruct(
        f"Open{base.__name__}", specs, bases=(base,), module=__name__, frozen=True, kw_only=True
    )
    return cast("type[Stage]", cls)


for _stage, _backends in STAGE_PARAMS.items():
    for _name, _fields in _backends.items():
        VARIANTS[_stage][_name] = _define(_stage, _name, _fields)
for _name, (_build, _search) in INDEXES.items():
    VARIANTS["retrieve"][_name] = _define_index(_name, _build, _search)
for _stage in STAGES:
    OPEN[_stage] = _define_open(_stage)


def _default_stage(table: str, kind: type[S]) -> Callable[[], S]:
    """The factory of stage ``table``'s default: its default backend's Struct, nothing given."""
    base = STAGES[table]
    backend = base.__struct_defaults__[base.__struct_fields__.index("backend")]
    cls = VARIANTS[table].get(backend, OPEN[table])
    return lambda: cast(S, cls())


def backend_names(table: str) -> list[str]:
    """The backends of stage ``table`` whose parameters ragbench types (others stay open)."""
    return list(VARIANTS[table])


# ------------------------------------------------------------------------------ config


class Config(Table, frozen=True):
    """A whole pipeline configuration: one table per stage, each with its defaults."""

    dataset: Dataset = field(default_factory=Dataset)
    run: Run = field(default_factory=Run)
    embed: Embed = field(default_factory=_default_stage("embed", Embed))
    cache: Cache = field(default_factory=Cache)
    retrieve: Retrieve = field(default_factory=_default_stage("retrieve", Retrieve))
    rerank: Rerank = field(default_factory=_default_stage("rerank", Rerank))
    serialize: Serialize = field(default_factory=_default_stage("serialize", Serialize))
    transport: Transport = field(default_factory=_default_stage("transport", Transport))
    prompt: Prompt = field(default_factory=Prompt)
    generate: Generate = field(default_factory=_default_stage("generate", Generate))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The config as a plain nested dict: what a record stores and a worker process reads.

        Every key ragbench owns with its value or default; of a backend's
        parameters, the ones the config gave.
        """
        return {table: getattr(self, table).to_dict() for table in TABLES}

    def __getitem__(self, table: str) -> dict[str, Any]:
        """Deprecated: ``cfg["run"]["k"]``, as on the plain dict ``Pipeline.config`` was until
        issue 30 (one release more, with a DeprecationWarning); read ``cfg.run.k``."""
        warnings.warn(
            f'config["{table}"] is deprecated: the config is a typed ragbench.settings.Config, '
            f"read config.{table} (config.to_dict() for the plain dict)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.to_dict()[table]

    def replace(self, table: str, **changes: Any) -> Config:
        """A copy with ``changes`` made in one table: ``cfg.replace("retrieve", fast_build=True)``.

        The values are not checked again: give what the table's Struct holds.
        """
        changed = msgspec.structs.replace(getattr(self, table), **changes)
        return msgspec.structs.replace(self, **{table: changed})

    def stages(self) -> dict[str, Stage]:
        """The stage tables by name, in request order (``embed``, ``retrieve``, ... ``generate``)."""
        return {
            "embed": self.embed,
            "retrieve": self.retrieve,
            "rerank": self.rerank,
            "serialize": self.serialize,
            "transport": self.transport,
            "generate": self.generate,
        }


#: The tables of a config, in order.
TABLES: tuple[str, ...] = tuple(Config.__struct_fields__)


def parse(data: Any) -> Config:
    """Convert a config dict (TOML-shaped) to a :class:`Config`; :class:`ConfigError` naming the path.

    A :class:`Config` is returned as it is. Unknown tables and keys are
    refused with the valid ones listed; each stage table is converted to the
    Struct of the backend it names (the stage's default backend when it names
    none), or, for a backend ragbench does not type, to the open one.
    """
    if isinstance(data, Config):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"a config must be a table/dict, got {type(data).__name__}")
    unknown = [k for k in data if k not in TABLES]
    if unknown:
        raise ConfigError(f"unknown config table [{unknown[0]}]; valid tables: {', '.join(TABLES)}")
    tables: dict[str, Any] = {}
    for table in TABLES:
        given = data.get(table, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"[{table}] must be a table, got {type(given).__name__}")
        tables[table] = _table(table, _plain(given))
    return Config(**tables)


def _table(table: str, given: dict[str, Any]) -> Any:
    """One table converted to its Struct (the backend's, for a stage table)."""
    if table not in STAGES:
        return convert(given, TABLE_TYPES[table], table)
    base = STAGES[table]
    backend = given.get(
        "backend", base.__struct_defaults__[base.__struct_fields__.index("backend")]
    )
    if backend is not None and not isinstance(backend, str):
        raise ConfigError(f"{table}.backend: expected str, got {type(backend).__name__}")
    typed = VARIANTS[table].get(backend) if backend is not None else None
    if typed is not None:
        return convert({**given, "backend": backend}, typed, table)
    own = {"backend", *base.__struct_fields__}
    open_given = {k: v for k, v in given.items() if k in own}
    open_given["options"] = {k: v for k, v in given.items() if k not in own}
    if table == "retrieve":
        for sub in ("build", "search"):
            if sub in given and not isinstance(given[sub], Mapping):
                raise ConfigError(f"retrieve.{sub}: expected a table of parameters")
    return convert(open_given, OPEN[table], table)


TABLE_TYPES: dict[str, type[Table]] = {
    "dataset": Dataset,
    "run": Run,
    "cache": Cache,
    "prompt": Prompt,
}


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and paths as strings (as JSON would be)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return value.item()
    if isinstance(value, PathLike):
        return fspath(value)
    return value
