"""Issue 27: compare records pgvector's server CPU per request, and its reading's wall-vs-CPU
warning counts it (as sweep's does), so a search's work in the server is not read as waiting."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from ragbench.cli import main
from ragbench.results.reading.runs import run_reading
from ragbench.results.report import Report

N = 10


def _record(label: str, server_ns: int | None, *, cpu_time: bool = True) -> dict[str, Any]:
    """A run record: retrieve wall 1 000 µs per request, its thread's CPU 300 µs."""
    return Report(
        label=label,
        config={"retrieve": {"backend": label}, "run": {"k": 10}},
        stage_names=["embed", "retrieve"],
        samples_ns=np.tile([10_000, 1_000_000], (N, 1)).astype(np.int64),
        recall=np.ones(N),
        payload_bytes=np.zeros(N, np.int64),
        wire_bytes=np.zeros(N, np.int64),
        prompt_tokens=np.zeros(N, np.int64),
        setup_ns={},
        cpu_samples_ns=np.tile([10_000, 300_000], (N, 1)).astype(np.int64) if cpu_time else None,
        server_cpu_ns=None if server_ns is None else np.full(N, server_ns, np.int64),
    ).to_record()


def _warnings(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("WARNING: retrieve wall time inflated")]


def test_the_compare_warning_counts_the_servers_cpu() -> None:
    # pgvector: 300 µs in the request thread + 500 in its server = 800 (1.25x): nobody waited;
    # hnsw: the thread's 300 alone (3.3x): pre-empted
    lines = run_reading([_record("pgvector", 500_000), _record("hnsw", None)])
    (warning,) = _warnings(lines)
    assert "in 1 of 2 rows: hnsw 3.3× (1,000 µs vs 300 µs)" in warning
    assert "pgvector" not in warning
    # the same pgvector row without its server's CPU is named, as the old reading would read it
    (alone,) = _warnings(run_reading([_record("pgvector", None), _record("hnsw", None)]))
    assert "in 2 of 2 rows" in alone


def test_no_warning_without_cpu_time() -> None:
    lines = run_reading([_record("a", 500_000, cpu_time=False), _record("b", None, cpu_time=False)])
    assert not _warnings(lines)


def test_server_cpu_survives_the_record_round_trip() -> None:
    rec = _record("pgvector", 500_000)
    assert rec["server_cpu_ns"] == [500_000] * N and rec["server_cpu_p50_us"] == 500.0
    back = Report.from_record(json.loads(json.dumps(rec)))
    assert back.server_cpu_ns is not None and back.server_cpu_ns.tolist() == [500_000] * N
    assert "server_cpu_ns" not in _record("hnsw", None)


def _postgres_below_us() -> list[psutil.Process]:
    me = psutil.Process(os.getpid())
    return [p for p in me.children(recursive=True) if p.name() == "postgres"]


@pytest.mark.slow  # a real pgvector server started and stopped by ragbench (~10 s)
def test_compare_records_pgvectors_server_cpu_per_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.jsonl"
    # servers this test process already runs (tests/pgshared.py's, kept for the session) are not
    # the compare's
    before = {p.pid for p in _postgres_below_us()}
    argv = ["compare", "--dataset", "synthetic", "--n", "2000", "--dim", "16", "--queries", "12"]
    argv += ["--index", "flat,pgvector+ef=20", "--rerank", "none", "--warmup", "2", "--cpu-time"]
    assert main([*argv, "--out", str(out)]) == 0
    recs = {
        r["config"]["retrieve"]["backend"]: r for r in map(json.loads, out.read_text().splitlines())
    }
    pg = recs["pgvector"]
    assert len(pg["server_cpu_ns"]) == len(pg["samples_ns"]["retrieve"]) == 12
    assert sum(pg["server_cpu_ns"]) > 0 and pg["server_cpu_p50_us"] >= 0
    assert "server_cpu_ns" not in recs["flat"]  # an index without a server of its own
    capsys.readouterr()
    assert not [
        p for p in _postgres_below_us() if p.pid not in before
    ]  # the compare stopped its server
    # ragbench report reads the record back with its server CPU
    assert main(["report", str(out)]) == 0
