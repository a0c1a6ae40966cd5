"""Reproducible index builds (issue #20): deterministic by default, --fast-build, --rebuilds, the cache."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ragbench as rb
from ragbench import threads
from ragbench.cli import main
from ragbench.indexes import builds
from ragbench.results.records import read_records
from ragbench.sweeps import SweepData, sweep_points

# hnsw and faiss-hnsw insert in thread order; ivf and ivfpq train k-means on a seeded sample
NAMES = ["hnsw", "ivf", "faiss-hnsw", "ivfpq"]
GRID = {"build_grid": {"M": [8], "nlist": [32]}, "query_grid": {"ef": [8], "nprobe": [2]}}


@pytest.fixture(scope="module")
def data() -> SweepData:
    ds = rb.datasets.load("synthetic", n=3000, dim=16, n_queries=60, seed=5)
    return SweepData.from_dataset(ds, k=10)


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Two pinned threads: what a fast build would use, and a deterministic one must not."""
    before = threads.get_threads()
    threads.set_threads(2)
    try:
        yield
    finally:
        threads.set_threads(before)


@pytest.fixture
def no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache directory of its own, and no build long enough to be cached."""
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(builds.CACHE_MIN_ENV, "1e9")
    return tmp_path / "cache"


def by_point(records: list[dict]) -> dict[str, dict]:
    return {json.dumps([r["index"], r["build"], r["query"]], sort_keys=True): r for r in records}


def test_the_same_sweep_twice_gives_identical_recall(data, two_threads, no_cache) -> None:
    first = by_point(sweep_points(data, NAMES, k=10, **GRID))
    second = by_point(sweep_points(data, NAMES, k=10, **GRID))
    assert sorted(r["index"] for r in first.values()) == sorted(NAMES)
    for key, rec in first.items():
        again = second[key]
        assert again["recall"] == rec["recall"], key  # exact equality, not approximate
        assert again["recall_per_query"] == rec["recall_per_query"], key
        assert rec["build_info"]["deterministic"] is True
        assert rec["build_info"]["threads"] == 1  # though two threads are pinned
        assert rec["build_info"]["cached"] is False
    # the k-means sample of ivfpq is recorded with its seed
    (pq,) = [r for r in first.values() if r["index"] == "ivfpq"]
    assert pq["build"]["seed"] == pq["build_info"]["seed"] == 1234


def test_the_built_graphs_are_byte_identical(data, two_threads, no_cache, tmp_path) -> None:
    """Stronger than equal recall: the saved payloads (sha256 in the header) are the same."""
    hashes = []
    for i in range(2):
        index = rb.indexes.create("hnsw", dim=16, M=8)
        builds.build(index, data.vectors)
        path = tmp_path / f"h{i}.rbi"
        index.save(path, data=data.vectors)
        hashes.append(rb.indexes.persist.read_index_header(path)["payload"]["sha256"])
    assert hashes[0] == hashes[1]


def test_fast_build_uses_every_thread_and_says_it_is_not_deterministic(
    tmp_path: Path, capsys, no_cache
) -> None:
    out = tmp_path / "fast.jsonl"
    argv = ["sweep", "--dataset", "synthetic", "--n", "2000", "--dim", "16", "--queries", "20"]
    code = main([*argv, "--index", "hnsw", "--param", "ef=8", "--threads", "2", "--fast-build"])
    code2 = main([*argv, "--index", "hnsw", "--param", "ef=8", "--out", str(out), "--fast-build"])
    text = capsys.readouterr().out
    assert code == code2 == 0
    (rec,) = read_records(out)
    assert rec["build_info"]["deterministic"] is False
    assert "NOT deterministic" in text
    default = tmp_path / "default.jsonl"
    assert main([*argv, "--index", "hnsw", "--param", "ef=8", "--out", str(default)]) == 0
    assert "builds: deterministic" in capsys.readouterr().out
    (rec,) = read_records(default)
    assert rec["build_info"]["deterministic"] is True


def test_fast_build_threads_reach_the_library(data, two_threads, no_cache) -> None:
    index = rb.indexes.create("hnsw", dim=16, M=8)
    builds.build(index, data.vectors, fast=True)
    assert index.info()["build"] == {
        "deterministic": False,
        "threads": 2,
        "seed": 100,
        "cached": False,
        "seconds": index.info()["build"]["seconds"],
    }
    assert threads.get_threads() == 2  # a deterministic build restores the pin too
    builds.build(rb.indexes.create("hnsw", dim=16, M=8), data.vectors)
    assert threads.get_threads() == 2


def test_rebuilds_measure_each_build_and_widen_recall_interval(data, no_cache) -> None:
    grid = {"build_grid": {"M": [4]}, "query_grid": {"ef": [4]}}
    (one,) = sweep_points(data, ["hnsw"], k=10, **grid)
    (three,) = sweep_points(data, ["hnsw"], k=10, rebuilds=3, **grid)
    assert three["rebuilds"] == 3
    assert three["build_info"]["seeds"] == [100, 101, 102]
    assert len(three["recall_builds"]) == 3 and len(three["build_s_builds"]) == 3
    # build 0 of the rebuilds is the one-build run's build (same seed, deterministic)
    assert three["recall_builds"][0] == one["recall"]
    assert three["recall"] == pytest.approx(np.mean(three["recall_builds"]))
    assert three["recall_build_spread"] == max(three["recall_builds"]) - min(three["recall_builds"])
    low, high = three["recall_ci"]
    assert low <= one["recall_ci"][0] and high >= one["recall_ci"][1]
    assert low <= min(three["recall_builds"]) <= max(three["recall_builds"]) <= high
    # M=4, ef=4 on 3000 points: the graphs differ, so the recalls do
    assert len(set(three["recall_builds"])) > 1
    assert len(three["latency_ns"]) == 3 * len(data.queries)  # every build's queries


def test_scale_rebuilds_on_the_command_line(tmp_path: Path, capsys, no_cache) -> None:
    out = tmp_path / "scale.jsonl"
    argv = ["scale", "--index", "hnsw", "--n", "2000", "--dim", "16", "--queries", "20"]
    assert main([*argv, "--rebuilds", "2", "--out", str(out)]) == 0
    (rec,) = read_records(out)
    assert rec["rebuilds"] == 2 and rec["build_info"]["seeds"] == [100, 101]
    assert "2 builds per point" in capsys.readouterr().out


def test_a_slow_build_is_cached_and_loaded_the_next_time(
    data, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    monkeypatch.setenv(builds.CACHE_MIN_ENV, "0")  # every build counts as slow
    grid = {"build_grid": {"M": [8]}, "query_grid": {"ef": [8, 16]}}
    first = sweep_points(data, ["hnsw"], k=10, **grid)
    files = sorted(cache.glob("indexes/*/*.rbi"))
    assert len(files) == 1
    second = sweep_points(data, ["hnsw"], k=10, **grid)
    for a, b in zip(first, second, strict=True):
        assert a["build_info"]["cached"] is False
        assert b["build_info"]["cached"] is True
        assert b["build_info"]["load_s"] >= 0
        assert b["build_s"] == a["build_s"]  # the original build's time
        assert b["recall_per_query"] == a["recall_per_query"]
    # other parameters: another entry, built, not a hit
    (other,) = sweep_points(data, ["hnsw"], k=10, build_grid={"M": [12]}, query_grid={"ef": [8]})
    assert other["build_info"]["cached"] is False
    assert len(sorted(cache.glob("indexes/*/*.rbi"))) == 2
    # a fast build is neither loaded from nor written to the cache
    (fast,) = sweep_points(
        data, ["hnsw"], k=10, build_grid={"M": [8]}, query_grid={"ef": [8]}, fast_build=True
    )
    assert fast["build_info"]["cached"] is False and fast["build_info"]["deterministic"] is False
    assert len(sorted(cache.glob("indexes/*/*.rbi"))) == 2


def test_a_damaged_cache_entry_is_rebuilt(data, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(builds.CACHE_MIN_ENV, "0")
    builds.build(rb.indexes.create("ivf", dim=16, nlist=16), data.vectors)
    (path,) = tmp_path.glob("indexes/*/*.rbi")
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF  # the payload's sha256 no longer matches
    path.write_bytes(bytes(blob))
    again = builds.build(rb.indexes.create("ivf", dim=16, nlist=16), data.vectors)
    assert again.load_ns == 0 and again.build_ns > 0
    assert again.index.info()["build"]["cached"] is False


def test_cache_key_changes_with_params_metric_seed_and_mode() -> None:
    def key(name: str = "hnsw", metric: str = "ip", rows: int = 100, det: bool = True, **p) -> str:
        return builds.recipe_key(rb.indexes.create(name, dim=8, metric=metric, **p), rows, det)

    base = key(M=8)
    assert key(M=8) == base
    others = [
        key(M=16),
        key(M=8, seed=7),
        key(M=8, metric="l2"),
        key(M=8, rows=101),
        key(M=8, det=False),
        key("faiss-hnsw", M=8),
    ]
    assert base not in others and len(set(others)) == len(others)


def test_pipeline_builds_deterministically_unless_fast_build(no_cache) -> None:
    cfg = {
        "dataset": {"name": "synthetic", "n": 1500, "dim": 16, "n_queries": 20, "seed": 1},
        "run": {"queries": 10, "warmup": 0},
        "retrieve": {"backend": "hnsw", "build": {"M": 8}},
        "rerank": {"backend": "none"},
        "generate": {"backend": "none"},
    }
    recalls, modes = [], []
    for fast in (False, False, True):
        with rb.Pipeline.from_config(
            {**cfg, "retrieve": {**cfg["retrieve"], "fast_build": fast}}
        ) as p:
            rec = p.run().to_record()
        modes.append(rec["info"]["index"]["build"]["deterministic"])
        recalls.append(rec["recall"])
    assert modes == [True, True, False]
    assert recalls[0] == recalls[1]


def test_fast_build_config_key_is_checked() -> None:
    with pytest.raises(rb.errors.ConfigError, match="fast_build"):
        rb.Pipeline.from_config({"retrieve": {"fast_build": "yes"}})


def test_build_note_tells_fast_builds_from_engines_that_cannot_be_seeded() -> None:
    """The footer says why a build is not deterministic: every core, or an unseedable engine."""
    from ragbench.results.tables.notes import build_note

    def run(label: str, **build: object) -> dict[str, object]:
        return {
            "schema": "ragbench.run/1",
            "kind": "run",
            "label": label,
            "info": {"index": {"build": build}},
        }

    seeded = run("hnsw", deterministic=True, threads=1, cached=False)
    fast = run("ivf", deterministic=False, threads=2, cached=False)
    pg = run("pgvector", deterministic=False, threads=1, cached=False)
    assert build_note([seeded]).startswith("builds: deterministic")
    one = build_note([seeded, pg])
    assert "1 of 2 NOT deterministic (an engine that cannot be seeded;" in one
    assert "--fast-build" not in one
    both = build_note([fast, pg])
    assert both.startswith("builds: NOT deterministic (--fast-build: every core; an engine")
