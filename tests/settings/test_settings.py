"""The typed configuration (ragbench.settings): path-naming errors, backend Structs, one conversion."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench import settings
from ragbench.errors import ConfigError
from ragbench.settings import load_config, parse_config, read_config, shipped_names, shipped_path
from ragbench.settings.params import BUILD_DEPENDENT, INDEXES, STAGE_PARAMS, documented_defaults
from ragbench.settings.sources import backend_params

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"run": {"queries": "many"}}, "run.queries: expected int, got str"),
        ({"run": {"k": 0}}, "run.k: expected int >= 1, got 0"),
        (
            {"run": {"queries": 10**9 + 1}},
            "run.queries: expected int <= 1000000000, got 1000000001",
        ),
        ({"run": {"cpu_time": 1}}, "run.cpu_time: expected bool, got int"),
        ({"cache": {"ttl_s": -1}}, "cache.ttl_s: expected float >= 0.0, got -1"),
        (
            {"cache": {"backend": "redis"}},
            "cache.backend: unknown backend 'redis'; valid: none, lru",
        ),
        (
            {"retrieve": {"build": {"M": "16"}}},
            "retrieve.build.M: expected int, got str",
        ),
        (
            {"retrieve": {"backend": "ivf", "search": {"nprobe": 1.5}}},
            "retrieve.search.nprobe: expected int, got float",
        ),
        (
            {"retrieve": {"filter": {"selectivity": 2}}},
            "retrieve.filter.selectivity: expected float <= 1.0, got 2",
        ),
        (
            {"embed": {"backend": "hashing", "ngram": [1, "2"]}},
            "embed.ngram[1]: expected int, got str",
        ),
        (
            {"generate": {"backend": "stub", "timeout": 0}},
            "generate.timeout: expected float > 0.0, got 0",
        ),
        (
            {"transport": {"backend": "asgi", "offload": "yes"}},
            "transport.offload: expected bool, got str",
        ),
        (
            {"serialize": {"with_metadata": None}},
            "serialize.with_metadata: expected bool, got null",
        ),
    ],
)
def test_errors_name_the_path_and_what_was_expected(config: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(config)
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"run": {"querys": 3}},
            "run: unknown key 'querys'; valid keys: cpu_time, k, k_candidates, label, otel, "
            "queries, repeat, threads, warmup",
        ),
        (
            {"retrieve": {"build": {"ef": 3}}},
            "retrieve.build: unknown key 'ef' for backend 'hnsw'; valid keys: M, "
            "ef_construction, seed",
        ),
        (
            {"retrieve": {"backend": "flat", "search": {"ef": 3}}},
            "retrieve.search: unknown key 'ef' for backend 'flat'; valid keys: (none)",
        ),
        (
            {"rerank": {"backend": "numba", "paralel": True}},
            "rerank: unknown key 'paralel' for backend 'numba'; valid keys: backend, parallel, "
            "parallel_threshold",
        ),
        (
            {"generate": {"backend": "openai", "base_ur": "http://x"}},
            "generate: unknown key 'base_ur' for backend 'openai'; valid keys: api_key, backend, "
            "base_url, chat, client, max_tokens, model, timeout",
        ),
    ],
)
def test_unknown_keys_are_refused_with_the_valid_ones(config: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(config)
    assert str(exc.value) == message


def test_a_backend_ragbench_does_not_type_keeps_its_parameters_open() -> None:
    cfg = parse_config({"rerank": {"backend": "my-plugin", "alpha": 0.5, "mode": "fast"}})
    assert type(cfg.rerank).__name__ == "OpenRerank"
    plain = cfg.to_dict()
    assert plain["rerank"] == {"backend": "my-plugin", "alpha": 0.5, "mode": "fast"}
    assert backend_params(plain, "rerank") == {"alpha": 0.5, "mode": "fast"}
    # an open index keeps its build/search tables, but they must still be tables
    open_index = parse_config({"retrieve": {"backend": "vendor-ann", "build": {"trees": 8}}})
    assert open_index.to_dict()["retrieve"]["build"] == {"trees": 8}
    with pytest.raises(ConfigError, match=r"^retrieve\.build: expected a table"):
        parse_config({"retrieve": {"backend": "vendor-ann", "build": 3}})


def test_a_registered_backend_gets_its_open_parameters() -> None:
    seen: list[dict[str, Any]] = []

    def factory(**params: Any) -> Any:
        seen.append(params)
        return rb.codecs.create("json")

    rb.codecs.register("test-typed-open", factory)
    try:
        cfg = {
            "dataset": {"name": "synthetic", "n": 300, "dim": 8, "n_queries": 4},
            "serialize": {"backend": "test-typed-open", "level": 3, "with_embeddings": True},
        }
        with rb.Pipeline.from_config(cfg):
            pass
    finally:
        rb.codecs.registry.unregister("test-typed-open")
    assert seen and seen[0] == {"level": 3}


def test_numpy_scalars_and_paths_are_taken_as_python_values(tmp_path: Path) -> None:
    cfg = load_config(
        {
            "run": {"queries": np.int64(5), "cpu_time": np.bool_(True)},
            "cache": {"ttl_s": np.float32(2.5)},
            "retrieve": {"index_file": tmp_path / "x.index"},
        }
    )
    assert (cfg["run"]["queries"], cfg["run"]["cpu_time"], cfg["cache"]["ttl_s"]) == (5, True, 2.5)
    assert type(cfg["run"]["queries"]) is int
    assert cfg["retrieve"]["index_file"] == str(tmp_path / "x.index")


@pytest.mark.parametrize("name", shipped_names())
def test_each_shipped_config_loads_to_what_its_file_says(name: str) -> None:
    path = shipped_path(name)
    raw = read_config(path)
    cfg = load_config(path)
    for table, values in raw.items():
        for key, value in values.items():
            assert cfg[table][key] == value, (table, key)
    # the dict form converts back to the same config (what a record's "config" holds)
    assert load_config(cfg) == cfg
    assert parse_config(cfg) == parse_config(path)


@pytest.mark.parametrize(("name", "described"), [("hashing", "hnsw/numba/protobuf/inproc")])
def test_a_shipped_config_describes_the_pipeline_its_file_names(name: str, described: str) -> None:
    raw = read_config(shipped_path(name))
    with rb.Pipeline.from_config(parse_config(shipped_path(name))) as pipe:
        assert pipe.describe() == described
        assert pipe.backends() == {t: raw[t]["backend"] for t in pipe.backends()}


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_index_params_agree_with_the_index(name: str) -> None:
    build, search = INDEXES[name]
    cls = rb.indexes.registry.factory(name)
    assert set(build.__struct_fields__) == set(cls.build_defaults)
    assert documented_defaults(build) == dict(cls.build_defaults)
    dependent = BUILD_DEPENDENT.get(name, frozenset())
    assert dependent == search.build_dependent
    assert set(search.__struct_fields__) == set(cls.query_defaults) | dependent
    assert documented_defaults(search) == dict(cls.query_defaults)


def _valid_keys(kind: str, backend: str) -> set[str]:
    """The parameters a backend itself says it takes (from its unknown-parameter error)."""
    registry = getattr(rb, kind)
    extra = {"dim": 4} if kind == "indexes" else {}
    with pytest.raises(ConfigError, match="unknown parameter") as exc:
        registry.create(backend, zz_not_a_parameter=1, **extra)
    listed = re.search(r"valid: (.*)$", str(exc.value))
    assert listed is not None
    return set() if listed[1] == "(none)" else set(listed[1].split(", "))


_KINDS = {
    "embed": "embedders",
    "rerank": "rerankers",
    "serialize": "codecs",
    "transport": "transports",
    "generate": "generators",
}


@pytest.mark.parametrize(
    ("table", "backend"),
    [
        (t, b)
        for t, backends in STAGE_PARAMS.items()
        for b in backends
        if (t, b) not in {("embed", "precomputed"), ("rerank", "none")}
    ],
)
def test_stage_params_agree_with_the_backend(table: str, backend: str) -> None:
    typed = set(STAGE_PARAMS[table][backend])
    valid = _valid_keys(_KINDS[table], backend) - {"metric"}  # rerankers get the metric
    assert typed == valid


def test_compare_converts_each_combination_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragbench.cli.configs import configurations
    from ragbench.cli.pipelines import compare
    from ragbench.settings import sources

    calls: list[Any] = []
    real = sources.parse

    def counting(data: Any) -> settings.Config:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(sources, "parse", counting)
    argv = ["--dataset", "synthetic", "--n", "300", "--dim", "8"]
    ctx = compare.make_context(
        "compare", [*argv, "--index", "flat,hnsw", "--codec", "json,msgpack"]
    )
    combos, varying = configurations(ctx.params, {})
    assert len(combos) == 4 and len(calls) == 4
    assert varying == {"retrieve", "serialize"}
    pipelines = [rb.Pipeline(cfg, label=label) for cfg, label in combos]
    try:
        assert len(calls) == 4  # a Config goes into the pipeline as it is
        assert [p.describe() for p in pipelines] == [
            "flat/numba/json/inproc",
            "flat/numba/msgpack/inproc",
            "hnsw/numba/json/inproc",
            "hnsw/numba/msgpack/inproc",
        ]
    finally:
        for p in pipelines:
            p.close()


def test_a_set_dataset_path_over_a_config_without_one_is_taken() -> None:
    # the options merge into the config as read, so a path does not meet the default name
    from ragbench.cli.configs import configurations
    from ragbench.cli.pipelines import compare

    ctx = compare.make_context("compare", ["--set", "dataset.path=docs.jsonl"])
    combos, _ = configurations(ctx.params, {})
    ((cfg, _),) = combos
    assert cfg.to_dict()["dataset"] == {"path": "docs.jsonl"}


@pytest.mark.parametrize("table", sorted(_KINDS) + ["retrieve"])
def test_every_built_in_backend_has_typed_parameters(table: str) -> None:
    kind = _KINDS.get(table, "indexes")
    # built-in: made by ragbench itself (a test may register an example backend of its own,
    # e.g. tests/index_contract.py's sq8-example, which is not built in)
    registry = getattr(rb, kind).registry
    registered = {
        n for n in registry.names() if registry.factory(n).__module__.startswith("ragbench.")
    }
    assert registered <= set(settings.backend_names(table)), registered - set(
        settings.backend_names(table)
    )
