from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import ragbench as rb
from ragbench.errors import ConfigError, DatasetError
from ragbench.results.records import RecordWriter, new_record, read_records
from ragbench.results.tables import render
from ragbench.sweeps import SweepData, sweep_points
from ragbench.traffic import LoadOptions, load_points
from ragbench.workers import ThreadWorkers

ENV_KEYS = {"cpu", "cores", "python", "libraries", "threads", "protobuf_backend", "git_revision"}


def test_new_record_stamps_schema_time_and_environment() -> None:
    rec = new_record("scale", {"index": "flat"})
    assert rec["schema"] == "ragbench.scale/1" and rec["kind"] == "scale"
    assert set(rec["env"]) >= ENV_KEYS
    assert rec["time"].endswith("Z")
    with pytest.raises(ConfigError, match="unknown record kind"):
        new_record("bogus", {})


def test_driver_records_carry_the_environment_without_the_cli() -> None:
    ds = rb.datasets.load("synthetic", n=600, dim=16, n_queries=8, seed=2)
    data = SweepData.from_dataset(ds, k=5)
    recs = sweep_points(data, ["flat"], k=5, build_grid={}, query_grid={})
    assert len(recs) == 1 and set(recs[0]["env"]) >= ENV_KEYS
    cfg = {
        "dataset": {"name": "synthetic", "n": 600, "dim": 16, "n_queries": 8, "seed": 2},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "json"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        pipe.setup()
        pool = ThreadWorkers(pipe, 1)
        try:
            (load,) = load_points([pipe], [pool], [200.0], options=LoadOptions(duration_s=0.05))
        finally:
            pool.close()
    assert load["schema"] == "ragbench.load/1" and set(load["env"]) >= ENV_KEYS


def test_writer_appends_each_record_as_it_comes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    writer = RecordWriter(out)
    writer(new_record("scale", {"n": 1}))
    assert len(out.read_text().splitlines()) == 1  # on disk before the next record exists
    writer({"schema": "ragbench.scale/1", "kind": "scale", "n": 2})
    back = read_records(out)
    assert [r["n"] for r in back] == [1, 2]
    assert "env" in back[1]  # a record without one is stamped on the way


def test_writer_keeps_records_when_the_file_cannot_take_them() -> None:
    writer = RecordWriter("/dev/full")
    assert writer.not_saved() is None
    writer(new_record("scale", {"n": 1}))
    writer(new_record("scale", {"n": 2}))
    assert [r["n"] for r in writer.records] == [1, 2]
    lost = writer.not_saved()
    assert lost is not None and lost.startswith("2 of 2 record(s) NOT saved to /dev/full")
    assert "No space left on device" in lost


def test_read_records_skips_torn_lines_anywhere_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = tmp_path / "r.jsonl"
    line = json.dumps(new_record("scale", {"n": 1}))
    two = json.dumps(new_record("scale", {"n": 2}))
    p.write_text(f"{line}\n{line}\n{line[:30]}")
    assert [r["n"] for r in read_records(p)] == [1, 1]
    # a fragment mid-file, continued by the next append on its line: that record is kept
    p.write_text(f"{line}\n{line[:30]}{two}\n{line[:99]}\n{line}\n")
    caplog.clear()
    assert [r["n"] for r in read_records(p)] == [1, 2, 1]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"{p}: skipped 2 line(s)") and "(line 2, 3;" in warning
    p.write_text(f"{line[:30]}\n{line[:20]}")
    with pytest.raises(DatasetError, match=r"r.jsonl:1: not a JSON line .*holds no record"):
        read_records(p)


def test_read_records_rejects_foreign_json(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"kind": "run", "schema": "other/9"}) + "\n")
    with pytest.raises(DatasetError, match="x.jsonl:1"):
        read_records(p)


def _sweep(index: str, recall: float, qps: float) -> dict:
    return new_record(
        "sweep",
        {
            "dataset": "d",
            "n": 100,
            "dim": 8,
            "metric": "ip",
            "k": 10,
            "index": index,
            "build": {"M": 16},
            "query": {"ef": 32},
            "rescore": None,
            "recall": recall,
            "p50_us": 1e6 / qps,
            "p95_us": 2.0,
            "p99_us": 3.0,
            "mean_us": 1.5,
            "qps_single": qps,
            "qps_batch": 1234.5678,
            "build_s": 0.25,
            "memory_bytes": 1000,
        },
        env={},
    )


def test_render_every_format_for_sweep_points() -> None:
    recs = [_sweep("hnsw", 0.9, 1000.0), _sweep("hnsw", 0.8, 500.0)]  # the second is dominated
    table = render(recs)
    assert "★" in table and table.count("★") == 2  # the title's legend and one point
    rows = json.loads(render(recs, "json"))
    assert [r["pareto"] for r in rows] == [True, False]
    parsed = list(csv.DictReader(io.StringIO(render(recs, "csv"))))
    assert float(parsed[0]["qps_batch"]) == 1234.5678  # csv keeps the exact value
    md = render(recs, "md").splitlines()
    assert md[0].startswith("| kind |") and len(md) == 4
    with pytest.raises(ConfigError, match="unknown format"):
        render(recs, "xml")


def test_run_rows_carry_interval_bounds_in_every_format(tmp_path: Path) -> None:
    cfg = {
        "dataset": {"name": "synthetic", "n": 400, "dim": 8, "n_queries": 10, "seed": 1},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "json"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        rec = pipe.run(queries=30, warmup=0).to_record()
    (row,) = json.loads(render([rec], "json"))
    lo, hi = row["total_p50_us_ci"]
    assert lo <= row["total_p50_us"] <= hi
    assert "retrieve_p50_us_ci" in row
    header = render([rec], "csv").splitlines()[0]
    assert "total_p50_us_ci" in header


def test_run_rows_carry_connection_and_retrieve_parts_as_columns() -> None:
    """A new connection per request puts connect/first_byte in the md/csv/json rows; a record
    with retrieve parts (an index behind a client) gets send/server/decode columns."""
    cfg = {
        "dataset": {"name": "synthetic", "n": 400, "dim": 8, "n_queries": 10, "seed": 1},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "json"},
        "transport": {"backend": "http", "keep_alive": False},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        rec = pipe.run(queries=8, warmup=1).to_record()
    (row,) = json.loads(render([rec], "json"))
    for name in ("connect", "first_byte"):
        assert row[f"connection_{name}_p50_us"] == rec["connection"][name]["p50_us"]
    assert 0 < row["connection_connect_p50_us"] < row["transport_p50_us"]
    assert "connection_connect_p50_us" in render([rec], "md").splitlines()[0]
    parts = {"send": 2_000, "server": 500_000, "decode": 9_500}
    split = {
        **rec,
        "info": {
            **rec["info"],
            "retrieve_parts": {k: {"p50_ns": v, "mean_ns": v} for k, v in parts.items()},
        },
    }
    plain = {**rec, "connection": None}
    rows = json.loads(render([split, plain], "json"))
    assert [rows[0][f"retrieve_{k}_p50_us"] for k in parts] == [2.0, 500.0, 9.5]
    assert "retrieve_send_p50_us" not in rows[1] and "connection_tls_p50_us" not in rows[1]
    md = render([split, plain], "md").splitlines()
    assert "retrieve_server_p50_us" in md[0] and md[2].count("|") == md[3].count("|")
