"""Versioned record schemas (ragbench.results.schema) and ``ragbench schema``: read, refuse, emit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.errors import ConfigError, DatasetError
from ragbench.results import schema as record_schema
from ragbench.results.records import append_record, new_record, read_records
from ragbench.settings import load_config, read_config, shipped_names, shipped_path
from ragbench.sweeps import SweepData, sweep_points

SYN = {"name": "synthetic", "n": 400, "dim": 8, "n_queries": 6, "seed": 3}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def run_record() -> dict[str, Any]:
    cfg = {"dataset": SYN, "embed": {"backend": "hashing"}, "retrieve": {"backend": "flat"}}
    cfg |= {"run": {"queries": 5, "warmup": 1}}
    with rb.Pipeline.from_config(cfg) as pipe:
        return pipe.run().to_record()


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_emitted_schemas_validate_real_records_and_configs(
    capsys: pytest.CaptureFixture[str], run_record: dict[str, Any]
) -> None:
    code, out, err = cli(capsys, "schema", "records")
    assert code == 0, err
    records = jsonschema.Draft202012Validator(json.loads(out))
    ds = rb.datasets.load("synthetic", n=400, dim=8, n_queries=6, seed=3)
    sweeps = sweep_points(
        SweepData.from_dataset(ds, k=5), ["flat", "hnsw"], k=5, build_grid={}, query_grid={}
    )
    real = [json.loads(json.dumps(r)) for r in [run_record, *sweeps]]
    for rec in real:
        records.validate(rec)
    wrong = {**real[0], "recall_at_k": "high"}
    assert not records.is_valid(wrong)
    assert not records.is_valid({**real[1], "schema": "ragbench.run/1"})  # a sweep named a run

    code, out, err = cli(capsys, "schema", "config")
    assert code == 0, err
    configs = jsonschema.Draft202012Validator(json.loads(out))
    for name in shipped_names():
        configs.validate(read_config(shipped_path(name)))
    configs.validate(run_record["config"])  # the normalized form a record carries
    configs.validate({"rerank": {"backend": "someone-elses", "alpha": 1}})
    for bad in (
        {"run": {"queries": "many"}},
        {"retrieve": {"backend": "hnsw", "build": {"MM": 16}}},
        {"retrieve": {"backend": "lsh", "search": {"ef": 64}}},
        {"serialize": {"shape": "rows"}},
        {"runs": {}},
    ):
        assert not configs.is_valid(bad), bad
        with pytest.raises(ConfigError):
            load_config(bad)  # the Structs refuse what the schema refuses


def test_one_kind_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "schema", "records", "--kind", "load")
    doc = json.loads(out)
    assert code == 0 and doc["$ref"] == "#/$defs/LoadRecord"
    assert doc["$defs"]["LoadRecord"]["properties"]["schema"] == {"const": "ragbench.load/1"}
    code, _, err = cli(capsys, "schema", "config", "--kind", "load")
    assert code == 2 and "records only" in err


def test_a_newer_record_is_refused_by_report_and_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_record: dict[str, Any]
) -> None:
    old = _write(tmp_path / "old.jsonl", [run_record])
    new = _write(tmp_path / "new.jsonl", [{**run_record, "schema": "ragbench.run/2"}])
    for argv in (["report", str(new)], ["diff", str(old), str(new)]):
        code, out, err = cli(capsys, *argv)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "new.jsonl:1: record written by a newer ragbench (ragbench.run/2" in err
        assert "upgrade ragbench" in err


def test_a_record_of_the_wrong_shape_is_named_when_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_record: dict[str, Any]
) -> None:
    bad = _write(tmp_path / "bad.jsonl", [run_record, {**run_record, "requests": "five"}])
    code, _, err = cli(capsys, "report", str(bad))
    assert code == 2
    want = "bad.jsonl:2: run record (ragbench.run/1): field 'requests' has the wrong type: "
    assert want + "expected int | null, got str" in err


def test_an_older_record_without_later_fields_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_record: dict[str, Any]
) -> None:
    # records written before caveats, cache events and node existed
    older = {k: v for k, v in run_record.items() if k not in ("caveats", "cache_events", "node")}
    path = _write(tmp_path / "older.jsonl", [older])
    (back,) = read_records(path)
    assert back == older  # read as written: nothing invented
    code, out, err = cli(capsys, "report", str(path))
    assert code == 0, err
    assert run_record["label"] in out


def test_an_older_version_is_upgraded_on_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_record: dict[str, Any]
) -> None:
    # as a ragbench that writes ragbench.run/2 would read today's files
    class RunV2(record_schema.RunRecord, frozen=True):
        label_parts: list[str] | None = None

    def upgrade(rec: dict[str, Any]) -> dict[str, Any]:
        return {**rec, "schema": "ragbench.run/2", "label_parts": str(rec["label"]).split("/")}

    monkeypatch.setitem(record_schema.SCHEMAS, ("run", 2), RunV2)
    monkeypatch.setitem(record_schema.CURRENT, "run", 2)
    monkeypatch.setitem(record_schema.UPGRADES, ("run", 1), upgrade)
    (back,) = read_records(_write(tmp_path / "v1.jsonl", [run_record]))
    assert back["schema"] == "ragbench.run/2"
    assert back["label_parts"] == run_record["label"].split("/")
    with pytest.raises(DatasetError, match=r"newer ragbench \(ragbench\.run/3"):
        read_records(_write(tmp_path / "v3.jsonl", [{**run_record, "schema": "ragbench.run/3"}]))


def test_a_malformed_record_is_not_written(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    append_record(out, new_record("scale", {"index": "flat", "n": 100}))
    wrong = (
        r"scale record \(ragbench\.scale/1\): field 'n' has the wrong type: expected int \| null"
    )
    with pytest.raises(ConfigError, match=wrong):
        append_record(out, new_record("scale", {"index": "flat", "n": "many"}))
    assert [r["n"] for r in read_records(out)] == [100]
