"""Pipeline configuration: one table per stage, validated before anything runs.

A config is a TOML file, the name of a config shipped in the package
(``"default"``, ``"hashing"``, ...: see :func:`shipped_names`), or the same
nested dict. Each stage table names its
``backend``; other keys are that backend's parameters and are checked by the
backend itself (an unknown one raises :class:`ConfigError` naming it). Keys
ragbench owns are checked here. Leaving a table out uses its defaults.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .files import CONFIG_LIMIT, read_regular
from .validate import bool_param, positive_int

__all__ = [
    "DEFAULTS",
    "FILTER_KEYS",
    "FILTER_STRATEGIES",
    "check_filter_table",
    "SHIPPED_DIR",
    "STAGE_TABLES",
    "config_path",
    "load_config",
    "merge",
    "normalize",
    "shipped_names",
    "shipped_path",
]

#: Where the example configs ship: ``ragbench/configs/<name>.toml`` (package data).
SHIPPED_DIR = Path(__file__).resolve().parent / "configs"

DEFAULTS: dict[str, dict[str, Any]] = {
    "dataset": {"name": "pydocs"},
    "run": {
        "queries": 200,
        "warmup": 20,
        "k": 10,
        "k_candidates": 100,
        "threads": 1,
        "label": None,
        "cpu_time": False,
        "otel": False,
        "repeat": 1,
    },
    # re_embed: compute the vectors even when shipped or cached ones apply (--re-embed)
    "embed": {"backend": None, "re_embed": False},
    "cache": {"backend": "none", "size": 1024, "ttl_s": 300.0},
    "retrieve": {
        "backend": "hnsw",
        "metric": None,
        "build": {},
        "search": {},
        "index_file": None,
        # a database server for the backends that use one (pgvector): postgresql://...
        "dsn": None,
        # one filter per query (ragbench.attributes), and how the index applies it
        "filter": None,
        "filter_strategy": None,
        # build on every core (not deterministic; ragbench.indexes.builds) instead of one
        "fast_build": False,
    },
    "rerank": {"backend": "numba"},
    "serialize": {"backend": "protobuf", "with_embeddings": False, "with_metadata": True},
    "transport": {"backend": "inproc"},
    "prompt": {"max_tokens": 2048, "template": None},
    "generate": {"backend": "none"},
}

#: Keys ragbench owns in each table (closed tables reject anything else).
OWN_KEYS: dict[str, set[str]] = {
    "dataset": {"name", "path", "n", "dim", "n_queries", "seed", "drop_empty"},
    "run": set(DEFAULTS["run"]),
    "cache": set(DEFAULTS["cache"]),
    "retrieve": set(DEFAULTS["retrieve"]),
    "prompt": set(DEFAULTS["prompt"]),
}

STAGE_TABLES = tuple(DEFAULTS)

_INT_KEYS = {
    ("run", "queries"): 1,
    ("run", "warmup"): 0,
    ("run", "k"): 1,
    ("run", "k_candidates"): 1,
    ("run", "repeat"): 1,
    ("cache", "size"): 1,
    ("prompt", "max_tokens"): 1,
}

#: Most requests (measured or warm-up) one run may ask for: 10**9 one by one is
#: already days of requests and ~TBs of records; anything more is a typo.
MAX_COUNT = 10**9
_COUNT_KEYS = frozenset({("run", "queries"), ("run", "warmup"), ("run", "repeat")})


#: Keys of a ``[retrieve] filter`` table (see :mod:`ragbench.attributes`).
FILTER_KEYS = frozenset({"attribute", "selectivity", "correlated", "kind", "seed", "from"})
#: ``[retrieve] filter_strategy`` values (``None``: the index's own choice, ``auto``).
FILTER_STRATEGIES = ("auto", "pre", "post", "in-graph")


def check_filter_table(owner: str, table: Any) -> dict[str, Any]:
    """A ``[retrieve] filter`` table checked and with defaults filled; ConfigError when bad."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{owner} filter must be a table, got {table!r}")
    bad = sorted(set(table) - FILTER_KEYS)
    if bad:
        raise ConfigError(
            f"unknown key {bad[0]!r} in {owner} filter; valid keys: {', '.join(sorted(FILTER_KEYS))}"
        )
    out = dict(table)
    if out.get("from") is not None:
        if out["from"] != "queries":
            raise ConfigError(f"{owner} filter from must be 'queries', got {out['from']!r}")
        return {"from": "queries"}
    sel = out.get("selectivity")
    if isinstance(sel, bool) or not isinstance(sel, (int, float)) or not 0 < sel <= 1:
        raise ConfigError(f"{owner} filter selectivity must be a number in (0, 1], got {sel!r}")
    out["selectivity"] = float(sel)
    if not isinstance(out.setdefault("correlated", False), bool):
        raise ConfigError(f"{owner} filter correlated must be true or false")
    attr = out.setdefault("attribute", None)
    if attr is not None and not isinstance(attr, str):
        raise ConfigError(f"{owner} filter attribute must be a string, got {attr!r}")
    if out.setdefault("kind", None) not in (None, "values", "range"):
        raise ConfigError(f"{owner} filter kind must be 'values' or 'range', got {out['kind']!r}")
    seed = out.setdefault("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"{owner} filter seed must be an integer >= 0, got {seed!r}")
    return out


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


def load_config(source: str | PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Read a TOML file or a shipped config by name (or take a mapping); return it normalized."""
    if isinstance(source, Mapping):
        return normalize(source)
    path = config_path(source)
    raw = read_regular(path, limit_bytes=CONFIG_LIMIT, what="config", error=ConfigError)
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return normalize(data)


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
    """Validate table and key names, fill defaults, and check the values ragbench owns."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"a config must be a table/dict, got {type(data).__name__}")
    unknown = [k for k in data if k not in DEFAULTS]
    if unknown:
        raise ConfigError(
            f"unknown config table [{unknown[0]}]; valid tables: {', '.join(STAGE_TABLES)}"
        )
    cfg: dict[str, dict[str, Any]] = {}
    for table, defaults in DEFAULTS.items():
        given = data.get(table, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"[{table}] must be a table, got {type(given).__name__}")
        own = OWN_KEYS.get(table)
        if own is not None:
            bad = [k for k in given if k not in own]
            if bad:
                raise ConfigError(
                    f"unknown key {bad[0]!r} in [{table}]; valid keys: {', '.join(sorted(own))}"
                )
        merged = dict(defaults)
        if table == "dataset" and "path" in given:
            merged.pop("name", None)  # a path replaces the default dataset name
        merged.update(copy.deepcopy(dict(given)))
        cfg[table] = merged
    for (table, key), low in _INT_KEYS.items():
        hi = MAX_COUNT if (table, key) in _COUNT_KEYS else None
        cfg[table][key] = positive_int(f"[{table}]", key, cfg[table][key], lo=low, hi=hi)
    run = cfg["run"]
    if run["queries"] * run["repeat"] > MAX_COUNT:
        raise ConfigError(
            f"[run] queries x repeat = {run['queries'] * run['repeat']} requests is more than "
            f"the {MAX_COUNT} a run can hold; lower queries or repeat"
        )
    if run["k_candidates"] < run["k"]:
        raise ConfigError(
            f"[run] k_candidates ({run['k_candidates']}) must be >= k ({run['k']}); "
            "raise k_candidates (--k-candidates)"
        )
    if run["threads"] is not None:
        run["threads"] = positive_int("[run]", "threads", run["threads"])
    run["cpu_time"] = bool_param("[run]", "cpu_time", run["cpu_time"])
    run["otel"] = bool_param("[run]", "otel", run["otel"])
    cfg["embed"]["re_embed"] = bool_param("[embed]", "re_embed", cfg["embed"]["re_embed"])
    cfg["retrieve"]["fast_build"] = bool_param(
        "[retrieve]", "fast_build", cfg["retrieve"]["fast_build"]
    )
    index_file = cfg["retrieve"]["index_file"]
    if index_file is not None and (not isinstance(index_file, str) or not index_file):
        raise ConfigError(f"[retrieve] index_file must be a path, got {index_file!r}")
    dsn = cfg["retrieve"]["dsn"]
    if dsn is not None and (not isinstance(dsn, str) or not dsn.strip()):
        raise ConfigError(f"[retrieve] dsn must be a connection string, got {dsn!r}")
    for table in ("retrieve",):
        for sub in ("build", "search"):
            if not isinstance(cfg[table][sub], Mapping):
                raise ConfigError(f"[{table}] {sub} must be a table of parameters")
    ttl = cfg["cache"]["ttl_s"]
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, (int, float))
        or not math.isfinite(ttl)
        or not 0 <= ttl <= 1e9
    ):
        raise ConfigError(f"[cache] ttl_s must be a number of seconds in [0, 1e9], got {ttl!r}")
    _check_retrieve_filter(cfg["retrieve"])
    if cfg["cache"]["backend"] not in ("none", "lru"):
        raise ConfigError(
            f"[cache] backend must be 'none' or 'lru', got {cfg['cache']['backend']!r}"
        )
    for table in STAGE_TABLES:
        if "backend" in DEFAULTS[table]:
            b = cfg[table]["backend"]
            if b is not None and not isinstance(b, str):
                raise ConfigError(f"[{table}] backend must be a string, got {b!r}")
    ds = cfg["dataset"]
    if "path" in ds and "name" in data.get("dataset", {}):
        raise ConfigError("[dataset] give either name or path, not both")
    return cfg


def _check_retrieve_filter(r: dict[str, Any]) -> None:
    """``[retrieve] filter`` checked in place (defaults filled) and ``filter_strategy`` known.

    A strategy without a filter would be ignored, so it is refused.
    """
    if r["filter"] is None and r["filter_strategy"] is not None:
        raise ConfigError(
            f"[retrieve] filter_strategy = {r['filter_strategy']!r} but there is no "
            "[retrieve] filter: give one (e.g. filter = { selectivity = 0.05 }, or "
            "--filter-selectivity), or drop the strategy"
        )
    if r["filter"] is not None:
        r["filter"] = check_filter_table("[retrieve]", r["filter"])
    if r["filter_strategy"] is not None and r["filter_strategy"] not in FILTER_STRATEGIES:
        raise ConfigError(
            f"[retrieve] filter_strategy must be one of {', '.join(FILTER_STRATEGIES)}, "
            f"got {r['filter_strategy']!r}"
        )


def backend_params(cfg: Mapping[str, Any], table: str) -> dict[str, Any]:
    """The backend parameters of an open stage table (everything but ragbench's keys)."""
    skip = {"backend"}
    if table == "embed":
        skip.add("re_embed")
    if table == "serialize":
        skip |= {"with_embeddings", "with_metadata"}
    return {k: v for k, v in cfg[table].items() if k not in skip}
