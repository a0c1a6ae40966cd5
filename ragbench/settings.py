"""The pipeline configuration as typed, frozen ``msgspec`` Structs: one per table and backend.

A config (TOML or the same nested dict, see :mod:`ragbench.config`) is
converted once, at the boundary, by :func:`parse`: every table becomes a
Struct, every stage table the Struct of the backend it names (its
``backend`` key selects it: ``[retrieve] backend = "hnsw"`` gives a
:class:`Retrieve` whose ``build`` is :class:`HnswBuild`). A backend ragbench
does not know (a plugin, or one registered in code) gets the stage's open
Struct, whose ``params`` the backend checks itself when it is created.

Errors name the path and say what was expected::

    run.queries: expected int, got str
    run.k: expected int >= 1, got 0
    retrieve.build: unknown key 'MM' for backend 'hnsw'; valid keys: M, ef_construction, seed

:meth:`Config.to_dict` gives the plain dict the drivers read
(``cfg["run"]["k"]``): every key ragbench owns with its default, and the
backend parameters the config gave (a backend fills in its own defaults,
which the JSON Schema of :func:`config_schema` documents).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from os import PathLike, fspath
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast, get_args, get_origin

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType, field

from .errors import ConfigError
from .params import INDEXES, STAGE_PARAMS, Params

T = TypeVar("T")
S = TypeVar("S", bound="Stage")

__all__ = [
    "MAX_COUNT",
    "OPEN",
    "STAGES",
    "TABLES",
    "VARIANTS",
    "Cache",
    "Config",
    "Dataset",
    "Embed",
    "Filter",
    "Generate",
    "Prompt",
    "Rerank",
    "Retrieve",
    "Run",
    "Serialize",
    "Stage",
    "Table",
    "Transport",
    "backend_names",
    "config_error",
    "convert",
    "parse",
]

#: Most requests (measured or warm-up) one run may ask for: 10**9 one by one is
#: already days of requests and ~TBs of records; anything more is a typo.
MAX_COUNT = 10**9

PositiveInt = Annotated[int, Meta(ge=1)]
Count = Annotated[int, Meta(ge=1, le=MAX_COUNT)]


class Table(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every configuration table: frozen, keyword-only, unknown keys refused."""


# ------------------------------------------------------------------- ragbench's own tables


class Dataset(Table, frozen=True):
    """``[dataset]``: a bundled dataset by ``name`` (with its parameters) or a file by ``path``."""

    name: str | UnsetType = UNSET
    path: str | UnsetType = UNSET
    n: PositiveInt | UnsetType = UNSET
    dim: PositiveInt | UnsetType = UNSET
    n_queries: PositiveInt | UnsetType = UNSET
    seed: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    drop_empty: bool | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.name is not UNSET and self.path is not UNSET:
            raise ConfigError("give either name or path, not both")
        if self.name is UNSET and self.path is UNSET:
            msgspec.structs.force_setattr(self, "name", "pydocs")


class Run(Table, frozen=True):
    """``[run]``: how many requests, which ``k``, and what is measured beside wall time."""

    queries: Count = 200
    warmup: Annotated[int, Meta(ge=0, le=MAX_COUNT)] = 20
    k: PositiveInt = 10
    k_candidates: PositiveInt = 100
    threads: PositiveInt | None = 1
    label: str | None = None
    cpu_time: bool = False
    otel: bool = False
    repeat: Count = 1

    def __post_init__(self) -> None:
        if self.queries * self.repeat > MAX_COUNT:
            raise ConfigError(
                f"queries x repeat = {self.queries * self.repeat} requests is more than "
                f"the {MAX_COUNT} a run can hold; lower queries or repeat"
            )
        if self.k_candidates < self.k:
            raise ConfigError(
                f"k_candidates ({self.k_candidates}) must be >= k ({self.k}); "
                "raise k_candidates (--k-candidates)"
            )


class Cache(Table, frozen=True):
    """``[cache]``: an LRU of query results with a time to live, or none."""

    backend: Literal["none", "lru"] = "none"
    size: PositiveInt = 1024
    ttl_s: Annotated[float, Meta(ge=0, le=1e9)] = 300.0


class Prompt(Table, frozen=True):
    """``[prompt]``: the token budget and template of the prompt builder."""

    max_tokens: PositiveInt = 2048
    template: str | None = None


class Filter(Table, frozen=True, rename={"from_": "from"}):
    """``[retrieve] filter``: one filter per query (see :mod:`ragbench.attributes`).

    ``from = "queries"`` takes each query's own filter and nothing else;
    otherwise ``selectivity`` in (0, 1] is required.
    """

    attribute: str | None = None
    selectivity: Annotated[float, Meta(gt=0, le=1)] | None = None
    correlated: bool = False
    kind: Literal["values", "range"] | None = None
    seed: Annotated[int, Meta(ge=0)] = 0
    from_: Literal["queries"] | None = None

    def __post_init__(self) -> None:
        if self.from_ is None and self.selectivity is None:
            raise ConfigError("selectivity must be a number in (0, 1], got None")

    def to_dict(self) -> dict[str, Any]:
        """The table as :func:`ragbench.config.check_filter_table` returns it."""
        if self.from_ is not None:
            return {"from": self.from_}
        out: dict[str, Any] = msgspec.to_builtins(self)
        del out["from"]
        return out


# ------------------------------------------------------------------------- stage tables


class Stage(Table, frozen=True):
    """A stage table: its ``backend`` and that backend's parameters (:meth:`params`)."""

    #: keys of the table ragbench owns (never passed to the backend)
    OWN: ClassVar[tuple[str, ...]] = ()

    backend: str | None = None

    def params(self) -> dict[str, Any]:
        """The backend parameters the config gave (what the backend is created with)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        for key in ("backend", *self.OWN):
            out.pop(key, None)
        out.update(out.pop("options", None) or {})
        return out


class Embed(Stage, frozen=True):
    """``[embed]``: the embedder (``backend`` None: the dataset's default one)."""

    OWN = ("re_embed",)
    re_embed: bool = False


class Rerank(Stage, frozen=True):
    """``[rerank]``: the candidate reranker."""

    backend: str | None = "numba"


class Serialize(Stage, frozen=True):
    """``[serialize]``: the codec (the deserialize stage uses the same one)."""

    OWN = ("with_embeddings", "with_metadata")
    backend: str | None = "protobuf"
    with_embeddings: bool = False
    with_metadata: bool = True


class Transport(Stage, frozen=True):
    """``[transport]``: how the payload crosses from the retriever's side to the LLM's."""

    backend: str | None = "inproc"


class Generate(Stage, frozen=True):
    """``[generate]``: the LLM generator, timed to its first token."""

    backend: str | None = "none"


class Retrieve(Stage, frozen=True):
    """``[retrieve]``: the index, its ``build`` and ``search`` parameters, a per-query filter."""

    OWN = (
        "metric",
        "build",
        "search",
        "index_file",
        "dsn",
        "filter",
        "filter_strategy",
        "fast_build",
    )
    backend: str | None = "hnsw"
    metric: str | None = None
    build: Any = field(default_factory=dict)
    search: Any = field(default_factory=dict)
    index_file: Annotated[str, Meta(min_length=1)] | None = None
    #: a database server for the backends that use one (pgvector): ``postgresql://...``
    dsn: str | None = None
    filter: Filter | None = None
    filter_strategy: Literal["auto", "pre", "post", "in-graph"] | None = None
    #: build on every core (not deterministic; ragbench.indexes.builds) instead of one
    fast_build: bool = False

    def __post_init__(self) -> None:
        if self.dsn is not None and not self.dsn.strip():
            raise ConfigError(f"dsn must be a connection string, got {self.dsn!r}")
        if self.filter is None and self.filter_strategy is not None:
            raise ConfigError(
                f"filter_strategy = {self.filter_strategy!r} but there is no "
                "[retrieve] filter: give one (e.g. filter = { selectivity = 0.05 }, or "
                "--filter-selectivity), or drop the strategy"
            )

    def to_dict(self) -> dict[str, Any]:
        """The table as the drivers read it (``filter`` as :meth:`Filter.to_dict` gives it)."""
        return {
            "backend": self.backend,
            "metric": self.metric,
            "build": msgspec.to_builtins(self.build),
            "search": msgspec.to_builtins(self.search),
            "index_file": self.index_file,
            "dsn": self.dsn,
            "filter": None if self.filter is None else self.filter.to_dict(),
            "filter_strategy": self.filter_strategy,
            "fast_build": self.fast_build,
        }


STAGES: dict[str, type[Stage]] = {
    "embed": Embed,
    "retrieve": Retrieve,
    "rerank": Rerank,
    "serialize": Serialize,
    "transport": Transport,
    "generate": Generate,
}

#: Stage table → typed backend → its Struct; every other backend name gets :data:`OPEN`'s.
VARIANTS: dict[str, dict[str, type[Stage]]] = {table: {} for table in STAGES}
#: Stage table → the Struct of a backend ragbench does not type (its ``params`` stay open).
OPEN: dict[str, type[Stage]] = {}


def _struct_name(base: type[Stage], backend: str) -> str:
    return base.__name__ + "".join(p.title() for p in re.split(r"[^a-zA-Z0-9]+", backend))


def _define(table: str, backend: str, fields: Mapping[str, Any]) -> type[Stage]:
    """The Struct of ``backend`` of stage ``table``: its parameters, each unset unless given."""
    base = STAGES[table]
    specs: list[tuple[str, Any, Any]] = [("backend", Literal[backend], backend)]
    specs += [(key, typ | UnsetType, UNSET) for key, typ in fields.items()]
    cls = msgspec.defstruct(
        _struct_name(base, backend),
        specs,
        bases=(base,),
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )
    return cast("type[Stage]", cls)


def _define_index(backend: str, build: type[Params], search: type[Params]) -> type[Stage]:
    specs: list[tuple[str, Any, Any]] = [
        ("backend", Literal[backend], backend),
        ("build", build, field(default_factory=build)),
        ("search", search, field(default_factory=search)),
    ]
    cls = msgspec.defstruct(
        _struct_name(Retrieve, backend),
        specs,
        bases=(Retrieve,),
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )
    return cast("type[Stage]", cls)


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


_TYPED = {cls for variants in VARIANTS.values() for cls in variants.values()}


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
        """The plain nested dict the drivers read (``cfg["retrieve"]["build"]``, ...).

        Every key ragbench owns with its value or default; of a backend's
        parameters, the ones the config gave.
        """
        out: dict[str, dict[str, Any]] = {}
        for table in TABLES:
            value = getattr(self, table)
            if isinstance(value, Retrieve):
                out[table] = value.to_dict()
            elif isinstance(value, Stage):
                own = {k: getattr(value, k) for k in value.OWN}
                out[table] = {"backend": value.backend, **own, **value.params()}
            else:
                out[table] = msgspec.to_builtins(value)
        return out


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
        return convert(given, _TABLE_TYPES[table], table)
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


_TABLE_TYPES: dict[str, type[Table]] = {
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


# ------------------------------------------------------------------------------ errors

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
        backend_keys = sub is not None and (issubclass(sub, Params) or sub in _TYPED)
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


# ------------------------------------------------------------------------ JSON Schema


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a config file (TOML read as JSON), generated from the Structs.

    Each stage table is ``oneOf`` its typed backends (the table's default
    backend when it names none) and an open table for any other backend
    name, whose parameters the backend checks when it is created.
    """
    typed = [cls for table in STAGES for cls in VARIANTS[table].values()]
    plain = [_TABLE_TYPES[t] for t in _TABLE_TYPES]
    refs, defs = msgspec.json.schema_components(
        [*plain, *typed, *STAGES.values()], ref_template="#/$defs/{name}"
    )
    props: dict[str, Any] = {}
    for table, ref in zip(_TABLE_TYPES, refs, strict=False):
        props[table] = ref
    for table, base in STAGES.items():
        default = base.__struct_defaults__[base.__struct_fields__.index("backend")]
        choices = []
        for name, cls in VARIANTS[table].items():
            if name != default:
                defs[cls.__name__].setdefault("required", []).append("backend")
            choices.append({"$ref": f"#/$defs/{cls.__name__}"})
        choices.append(_open_schema(defs.pop(base.__name__), list(VARIANTS[table]), default))
        props[table] = {"oneOf": choices}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ragbench pipeline config",
        "type": "object",
        "properties": {t: props[t] for t in TABLES},
        "additionalProperties": False,
        "$defs": defs,
    }


def _open_schema(base: dict[str, Any], typed: list[str], default: str | None) -> dict[str, Any]:
    """A stage table naming a backend ragbench does not type: its own keys, any others."""
    out = dict(base)
    other: dict[str, Any] = {"type": "string", "not": {"enum": typed}}
    out["properties"] = {**base["properties"], "backend": other}
    if default is None:
        out["properties"]["backend"] = {"anyOf": [other, {"type": "null"}]}
    else:
        out["required"] = ["backend"]
    out["additionalProperties"] = True
    out["title"] = f"{base.get('title', '')} (another backend)".strip()
    return out
