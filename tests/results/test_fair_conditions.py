"""Issue 27: the conditions a figure was measured in, said beside it (cache state, CPU time,
the order engines are measured in, builds of this run)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--dataset", "synthetic", "--n", "500", "--dim", "16", "--queries", "10"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_hooks", module)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- cache state, declared


def test_sweep_records_and_says_its_searches_are_hot(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    code, stdout, err = cli(capsys, "sweep", *SMALL, "--index", "hnsw", "--out", str(out))
    assert code == 0, err
    assert {r["cache_state"] for r in _records(out)} == {"hot"}
    title = " ".join(stdout.split("\n\n")[0].split())  # rich wraps a long title
    assert "; cache state: hot (searches back to back)" in title


def test_compare_records_and_says_its_searches_are_after_stages(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.jsonl"
    code, stdout, err = cli(capsys, "compare", *SMALL, "--index", "flat,hnsw", "--out", str(out))
    assert code == 0, err
    assert {r["cache_state"] for r in _records(out)} == {"after-stages"}
    (title,) = [ln for ln in stdout.splitlines() if ln.startswith("side by side")]
    assert title.endswith(
        "; cache state: after-stages (each search right after its request's other stages)"
    )


def _run(**extra: Any) -> dict[str, Any]:
    return {
        "schema": "ragbench.run/1",
        "kind": "run",
        "label": "hnsw",
        "dataset": {"name": "d"},
        "requests": 3,
        "recall_at_k": 0.95,
        "recall_p10": 0.9,
        "setup_s": {"index_build": 1.5},
        "summary": {"retrieve": {"p50_us": 200.0, "p50_us_ci": [190, 210], "p99_us": 300.0}},
        "samples_ns": {"retrieve": [100_000, 200_000, 300_000]},
        "info": {"index": {"backend": "hnsw", "params": {}, "build": {"deterministic": True}}},
        **extra,
    }


def _sweep(**extra: Any) -> dict[str, Any]:
    return {
        "schema": "ragbench.sweep/1",
        "kind": "sweep",
        "dataset": "d",
        "index": "hnsw",
        "build": {},
        "query": {"ef": 10},
        "recall": 0.95,
        "p50_us": 100.0,
        "p99_us": 200.0,
        "memory_bytes": 2_000_000,
        "bytes_per_vector": 20.0,
        **extra,
    }


def _engines(tmp_path: Path, run: dict[str, Any], sweep: dict[str, Any]) -> str:
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    (tmp_path / "sweep.jsonl").write_text(json.dumps(sweep) + "\n")
    return str(_hooks().expand("<!-- gen: engines runs.jsonl sweep.jsonl -->", tmp_path))


def test_the_engines_table_names_each_part_s_cache_state(tmp_path: Path) -> None:
    # records that carry it: said as recorded
    text = _engines(tmp_path, _run(cache_state="after-stages"), _sweep(cache_state="hot"))
    assert "cache state: after-stages (each search right after its request's other stages)." in text
    assert "not the retrieve stage above; cache state: hot (searches back to back)." in text
    assert "inferred" not in text
    # older records without the field: read from their kind, and said to be inferred
    text = _engines(tmp_path, _run(), _sweep())
    assert "inferred from the record kind)." in text
    assert "cache state: hot (searches back to back, inferred from the record kind)." in text


def test_a_sweep_table_of_mixed_cache_states_says_so() -> None:
    from ragbench.results.tables.points import sweep_table

    base = {"n": 10, "dim": 4, "metric": "l2", "k": 10, "p95_us": 1.0, "qps_single": 1.0}
    base |= {"qps_batch": 1.0, "build_s": 1.0, "memory_bytes": 1000, "recall_p10": 0.9}
    hot = _sweep(**base, cache_state="hot")
    other = _sweep(**base, cache_state="after-stages", index="usearch")
    title = sweep_table([hot, other]).splitlines()[0]
    assert "cache states MIXED, do not compare rows: after-stages" in title


# ---------------------------------------------------------------- sweep: engines interleaved


def test_sweep_measures_engines_round_by_round(tmp_path: Path, capsys, monkeypatch) -> None:
    """Every search call of ``ragbench sweep`` spied on: the engines' points alternate (hnsw's
    ef=10, faiss-hnsw's ef=10, hnsw's ef=20, ...), not all of one engine, then the other."""
    from ragbench import indexes

    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path))
    calls: list[str] = []
    for name in ("hnsw", "faiss-hnsw"):
        cls = type(indexes.create(name, dim=4))
        real = cls.search

        def spy(self: Any, *args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls.append(f"{_name} ef={kw.get('ef')}")
            return _real(self, *args, **kw)

        monkeypatch.setattr(cls, "search", spy)
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SMALL, "--index", "hnsw,faiss-hnsw", "--param", "ef=10,20,30"]
    code, _, err = cli(capsys, *argv, "--out", str(out))
    assert code == 0, err
    # the memory reading's searches (ragbench.sweeps.memory: a throw-away index, then the built
    # one, with default parameters) are no points
    calls = [c for c in calls if not c.endswith("ef=None")]
    runs = [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c]  # runs of one point
    points = [f"{n} ef={ef}" for ef in (10, 20, 30) for n in ("hnsw", "faiss-hnsw")]
    assert runs == points
    assert [(r["index"], r["query"]["ef"]) for r in _records(out)] == [
        (n, ef) for ef in (10, 20, 30) for n in ("hnsw", "faiss-hnsw")
    ]
    # the table keeps one engine's rows together
    code, stdout, err = cli(capsys, "report", str(out))
    assert code == 0, err
    rows = [ln.split("│")[2].strip() for ln in stdout.splitlines() if ln.count("│") > 3]
    named = [r for r in rows if r in ("hnsw", "faiss-hnsw")]
    assert named == ["hnsw"] * 3 + ["faiss-hnsw"] * 3


# ---------------------------------------------------------------- CPU time beside wall time


def test_sweep_records_cpu_time_and_warns_when_wall_time_is_not_work(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SMALL, "--index", "hnsw", "--param", "ef=10,20", "--out", str(out)]
    code, stdout, err = cli(capsys, *argv)
    assert code == 0, err
    recs = _records(out)
    for r in recs:
        assert len(r["cpu_ns"]) == len(r["latency_ns"]) == r["queries"]
        assert all(c > 0 for c in r["cpu_ns"])
        assert r["cpu_p50_us"] == pytest.approx(
            sorted(r["cpu_ns"])[(len(r["cpu_ns"]) - 1) // 2] / 1e3
        )
    assert "CPU p50 µs" in stdout and "CPU p50: the searching thread's CPU time" in stdout
    # a point whose wall p50 is 3× its CPU p50 (as under pre-emption) is named; 1.2× is not
    recs[0]["cpu_p50_us"] = recs[0]["p50_us"] / 3
    recs[1]["cpu_p50_us"] = recs[1]["p50_us"] / 1.2
    planted = tmp_path / "planted.jsonl"
    planted.write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, stdout, err = cli(capsys, "report", str(planted))
    assert code == 0, err
    (warning,) = [ln for ln in stdout.splitlines() if ln.startswith("WARNING: wall time inflated")]
    assert "compare CPU" in warning and "exceeds 1.5 at 1 of 2 points: hnsw ef=10 3.0×" in warning
    assert "ef=20" not in warning


def test_a_sweep_over_rebuilds_keeps_every_build_s_cpu_times(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", *SMALL, "--index", "hnsw", "--param", "ef=64", "--rebuilds", "2"]
    argv += ["--out", str(out)]
    code, _, err = cli(capsys, *argv)
    assert code == 0, err
    (rec,) = _records(out)
    assert len(rec["cpu_ns"]) == len(rec["latency_ns"]) == 2 * rec["queries"]
    assert rec["cpu_p50_us"] == pytest.approx(sorted(rec["cpu_ns"])[rec["queries"] - 1] / 1e3)


# ---------------------------------------------------------------- build time of this run


def test_a_reused_build_shows_no_seconds(tmp_path: Path, capsys, monkeypatch) -> None:
    """The second sweep loads the first one's build from the index cache: its build column
    reads ``reused``, not the first run's seconds."""
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGBENCH_INDEX_CACHE_MIN_S", "0")  # every build is cached
    tables = []
    for i in range(2):
        out = tmp_path / f"s{i}.jsonl"
        argv = ["sweep", *SMALL, "--index", "hnsw", "--param", "ef=64", "--out", str(out)]
        code, stdout, err = cli(capsys, *argv)
        assert code == 0, err
        (rec,) = _records(out)
        assert rec["build_info"]["cached"] is bool(i)
        (head,) = [ln for ln in stdout.splitlines() if "┃ index" in ln]
        column = [c.strip() for c in head.split("┃")].index("build s")
        (row,) = [ln for ln in stdout.splitlines() if "│ hnsw" in ln]
        tables.append((rec, [c.strip() for c in row.split("│")][column], stdout))
    (built, cell, _), (_, reused, text) = tables
    assert cell == f"{built['build_s']:.2f}"
    assert reused == "reused"
    assert "1 loaded from the index cache (build s: reused, no seconds of this run)" in text
