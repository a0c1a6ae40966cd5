"""Where a configuration comes from and how it is read: a TOML file, a shipped name, a mapping.

Part of :mod:`ragbench.settings`. A config is a TOML file, the name of a
config shipped in the package (``"default"``, ``"hashing"``, ...: see
:func:`shipped_names`; the files are ``ragbench/settings/shipped/*.toml``), or
the same nested dict. Each stage table names its ``backend``; other keys are
that backend's parameters. :func:`parse_config` converts a config once to the
typed :class:`~ragbench.settings.Config` and refuses an unknown table or key,
or a value of the wrong type, naming its path (``run.queries: expected int,
got str``). :func:`read_config` gives the config as written, for callers that
merge options into it (:func:`merge`) before that one conversion;
:func:`load_config` gives a config as a plain dict (what a record stores).
Leaving a table out uses its defaults.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..files import CONFIG_LIMIT, read_regular
from .convert import convert
from .tables import Cache, Dataset, Filter, Prompt, Retrieve, Run
from .variants import TABLES, Config, parse

__all__ = [
    "ConfigSource",
    "DEFAULTS",
    "FILTER_KEYS",
    "FILTER_STRATEGIES",
    "check_filter_table",
    "SHIPPED_DIR",
    "STAGE_TABLES",
    "config_path",
    "OWN_KEYS",
    "load_config",
    "load_toml",
    "merge",
    "normalize",
    "parse_config",
    "read_config",
    "shipped_names",
    "shipped_path",
    "TOML_DEPTH",
    "backend_params",
]

#: Where the example configs ship: ``ragbench/settings/shipped/<name>.toml`` (package data).
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"

#: What a config may be given as: a TOML file, a shipped config's name, a mapping, or a Config.
ConfigSource = str | PathLike[str] | Mapping[str, Any] | Config

#: Every table with its defaults, as :func:`load_config` gives it for an empty config.
DEFAULTS: dict[str, dict[str, Any]] = Config().to_dict()

STAGE_TABLES = TABLES

#: Keys ragbench owns in each closed table (anything else is refused; from the Structs).
OWN_KEYS: dict[str, set[str]] = {
    "dataset": set(Dataset.__struct_encode_fields__),
    "run": set(Run.__struct_encode_fields__),
    "cache": set(Cache.__struct_encode_fields__),
    "retrieve": {"backend", *Retrieve.OWN},
    "prompt": set(Prompt.__struct_encode_fields__),
}

#: Keys of a ``[retrieve] filter`` table (see :mod:`ragbench.attributes`).
FILTER_KEYS = frozenset(Filter.__struct_encode_fields__)
#: ``[retrieve] filter_strategy`` values (``None``: the index's own choice, ``auto``).
FILTER_STRATEGIES = ("auto", "pre", "post", "in-graph")


def check_filter_table(owner: str, table: Any) -> dict[str, Any]:
    """A ``[retrieve] filter`` table checked and with defaults filled; ConfigError when bad.

    ``owner`` (``"[retrieve]"``) names the table in the message:
    ``retrieve.filter.selectivity: expected float <= 1.0, got 2``.
    """
    if not isinstance(table, Mapping):
        raise ConfigError(f"{owner} filter must be a table, got {table!r}")
    where = owner.strip("[]") + ".filter"
    return convert(dict(table), Filter, where).to_dict()


def shipped_names() -> list[str]:
    """The names of the configs shipped in the package, sorted (``default``, ``hashing``, ...)."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.toml"))


def shipped_path(name: str) -> Path:
    """The file of shipped config ``name``; an unknown name raises ConfigError listing them."""
    path = SHIPPED_DIR / f"{name}.toml"
    if not isinstance(name, str) or name not in shipped_names():
        raise ConfigError(
            f"no shipped config {name!r}; shipped configs: {', '.join(shipped_names())}"
        )
    return path


def config_path(source: str | PathLike[str]) -> Path:
    """The TOML file ``source`` means: an existing file, else the shipped config of that name.

    A file of that name wins over a shipped config. Anything else raises
    :class:`ConfigError` saying the file does not exist and listing the
    shipped configs.
    """
    path = Path(source)
    if path.exists():
        return path
    if isinstance(source, str) and source in shipped_names():
        return SHIPPED_DIR / f"{source}.toml"
    raise ConfigError(
        f"cannot read config {path}: no such file, and not a shipped config "
        f"(shipped: {', '.join(shipped_names())})"
    )


def read_config(source: ConfigSource) -> dict[str, Any]:
    """The config ``source`` holds, as read (a TOML file, a shipped name, a mapping), unchecked.

    A typed :class:`~ragbench.settings.Config` gives its plain dict.

    For callers that merge options into it before the one conversion
    (:func:`parse_config`) that checks it.
    """
    if isinstance(source, Config):
        return source.to_dict()
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    path = config_path(source)
    raw = read_regular(path, limit_bytes=CONFIG_LIMIT, what="config", error=ConfigError)
    return load_toml(raw, str(path))


#: Deepest nesting of tables and arrays accepted in a TOML file (configs nest 4 at most).
TOML_DEPTH = 32


def load_toml(raw: bytes, what: str) -> dict[str, Any]:
    """The TOML document in ``raw``; :class:`ConfigError` naming ``what`` when it is not one.

    Nesting deeper than :data:`TOML_DEPTH` (tables, arrays, inline tables) is
    refused: the parser recurses once per level, so ``a = [[[[...`` 3 000
    deep would otherwise end in a ``RecursionError``.
    """
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    deep = ConfigError(f"{what}: nested deeper than {TOML_DEPTH} levels; not a ragbench file")
    try:
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{what}: not valid TOML: {exc}") from None
    except RecursionError:
        raise deep from None
    if _depth(data) > TOML_DEPTH:
        raise deep
    return data


def _depth(value: Any) -> int:
    """How deep tables and arrays nest in ``value`` (walked without recursion; stops past the limit)."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        node, level = todo.pop()
        if level > TOML_DEPTH:
            return level
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node
        todo.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def parse_config(source: ConfigSource) -> Config:
    """The typed :class:`~ragbench.settings.Config` of a TOML file, shipped name or mapping.

    A :class:`~ragbench.settings.Config` is returned as it is (already checked).
    """
    if isinstance(source, Config):
        return source
    return parse(read_config(source))


def load_config(source: ConfigSource) -> dict[str, Any]:
    """Read a TOML file or a shipped config by name (or take a mapping); return it normalized.

    The plain-dict form of :func:`parse_config` (``Config.to_dict()``): every
    table, every key ragbench owns with its default.
    """
    return parse_config(source).to_dict()


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base`` (tables merge, values replace)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if (
            isinstance(value, Mapping)
            and isinstance(out.get(key), Mapping)
            and key not in ("build", "search")
        ):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def normalize(data: Mapping[str, Any]) -> dict[str, Any]:
    """Validate table and key names, fill defaults, and check the values (see :func:`parse_config`)."""
    return parse(data).to_dict()


def backend_params(cfg: Mapping[str, Any], table: str) -> dict[str, Any]:
    """The backend parameters of an open stage table (everything but ragbench's keys)."""
    skip = {"backend"}
    if table == "embed":
        skip.add("re_embed")
    if table == "serialize":
        skip |= {"with_embeddings", "with_metadata"}
    return {k: v for k, v in cfg[table].items() if k not in skip}
