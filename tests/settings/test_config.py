from __future__ import annotations

from pathlib import Path

import pytest

from ragbench.errors import ConfigError
from ragbench.settings import load_config, merge
from ragbench.settings.sources import TOML_DEPTH
from ragbench.threads import MAX_THREADS

ROOT = Path(__file__).resolve().parents[2]


SHIPPED_BENCH_CONFIGS = ("default", "hashing", "stub-llm", "transformers")


@pytest.mark.parametrize("name", SHIPPED_BENCH_CONFIGS)
def test_shipped_configs_load(name: str) -> None:
    """Each config bench/ ships exists and loads; a glob that finds nothing cannot pass."""
    path = ROOT / "bench" / "configs" / f"{name}.toml"
    assert path.is_file(), f"{path} is missing"
    cfg = load_config(path)
    assert cfg["run"]["k"] >= 1 and cfg["run"]["k_candidates"] >= cfg["run"]["k"], path
    assert cfg["retrieve"]["backend"], path


def test_no_bench_config_goes_untested() -> None:
    found = sorted(p.stem for p in (ROOT / "bench" / "configs").glob("*.toml"))
    assert found == sorted(SHIPPED_BENCH_CONFIGS)


def test_defaults_fill_missing_tables() -> None:
    cfg = load_config({"retrieve": {"backend": "flat"}})
    assert cfg["retrieve"]["backend"] == "flat"
    assert cfg["serialize"]["backend"] == "protobuf"
    assert cfg["run"]["k_candidates"] >= cfg["run"]["k"]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"retreive": {}}, "retreive"),
        ({"run": {"querys": 3}}, "querys"),
        ({"retrieve": {"backend": "hnsw", "ef": 3}}, "'ef'"),
        ({"dataset": {"name": "pydocs", "sizes": 3}}, "sizes"),
        ({"prompt": {"max_token": 3}}, "max_token"),
    ],
)
def test_unknown_table_or_key_is_named(config: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(config)


@pytest.mark.parametrize(
    "config",
    [
        {"run": {"k": 0}},
        {"run": {"k": 10, "k_candidates": 5}},
        {"run": {"queries": "many"}},
        {"run": {"threads": 0}},
        {"cache": {"backend": "redis"}},
        {"retrieve": {"build": 3}},
        {"embed": "minilm"},
    ],
)
def test_bad_values_are_config_errors(config: dict) -> None:
    with pytest.raises(ConfigError):
        load_config(config)


def test_bad_toml_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[run\nqueries = 3\n")
    with pytest.raises(ConfigError, match="TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_merge_is_deep_and_does_not_mutate() -> None:
    base = {"run": {"k": 10, "queries": 5}}
    out = merge(base, {"run": {"k": 3}})
    assert out == {"run": {"k": 3, "queries": 5}}
    assert base == {"run": {"k": 10, "queries": 5}}


def test_a_dataset_path_replaces_the_default_name_and_survives_renormalizing() -> None:
    cfg = load_config({"dataset": {"path": "/data/x.fvecs"}})
    assert cfg["dataset"] == {"path": "/data/x.fvecs"}
    assert load_config(cfg)["dataset"] == {"path": "/data/x.fvecs"}
    with pytest.raises(ConfigError, match="either name or path"):
        load_config({"dataset": {"path": "/data/x.fvecs", "name": "pydocs"}})


def test_dataset_drop_empty_is_a_dataset_key() -> None:
    cfg = load_config({"dataset": {"path": "docs.jsonl", "drop_empty": True}})
    assert cfg["dataset"] == {"path": "docs.jsonl", "drop_empty": True}
    with pytest.raises(ConfigError, match="'drop_empties'.*drop_empty"):
        load_config({"dataset": {"path": "docs.jsonl", "drop_empties": True}})


@pytest.mark.parametrize(
    "text",
    [
        "[run]\nlabel = " + "[\n" * 3000 + "]" * 3000 + "\n",  # 3 001 lines
        "[run]\nlabel = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
        "[retrieve.build]\nx = " + "[" * 40 + "]" * 40 + "\n",  # parses, but deeper than allowed
    ],
    ids=["array-3000", "inline-table-3000", "array-40"],
)
def test_deeply_nested_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """``ragbench run -c`` on it used to end in a RecursionError traceback."""
    from ragbench.cli import main

    cfg = tmp_path / "deep.toml"
    cfg.write_text(text)
    assert main(["run", "-c", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(cfg) in err and f"deeper than {TOML_DEPTH}" in err


@pytest.mark.parametrize(
    "config",
    [
        {"run": {"threads": 1_000_000}},
        {"rerank": {"backend": "cross-encoder", "threads": 1_000_000}},
        {"embed": {"backend": "minilm", "threads": 1_000_000}},
        {"generate": {"backend": "transformers", "threads": MAX_THREADS + 1}},
    ],
    ids=["run", "rerank", "embed", "generate"],
)
def test_every_thread_count_in_a_config_is_bounded(config: dict) -> None:
    """``rerank.threads = 1000000`` was accepted: torch then started threads until none could fork."""
    with pytest.raises(ConfigError, match=f"threads: expected int <= {MAX_THREADS}"):
        load_config(config)
    (table,) = config
    load_config({table: {**config[table], "threads": MAX_THREADS}})  # the limit itself is fine
