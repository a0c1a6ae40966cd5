"""Readers take records as their kind's Struct (record_schema.read_struct): older read, newer refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench.results import schema as record_schema
from ragbench.results.records import read_records
from ragbench.results.schema import (
    LoadRecord,
    Record,
    RecordError,
    RunRecord,
    SweepRecord,
    need,
    read_struct,
)
from ragbench.results.tables import compare_table, load_table, run_table, sweep_table

DATA = Path(__file__).resolve().parents[2] / "docs/findings/data"


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return dict(read_records(DATA / "compare-pydocs.jsonl")[0])


@pytest.fixture(scope="module")
def point() -> dict[str, Any]:
    return dict(read_records(DATA / "indexes-compressed-20k.jsonl")[0])


def test_a_stored_record_reads_as_its_struct(run: dict[str, Any]) -> None:
    typed = read_struct(run, RunRecord)
    assert type(typed) is RunRecord
    assert typed.label == run["label"] and typed.summary == run["summary"]
    assert typed.stages == run["stages"] and typed.requests == run["requests"]
    assert read_struct(typed, RunRecord) is typed  # a Struct passes through
    assert isinstance(read_struct(run, Record), RunRecord)  # any kind: the kind's Struct
    # a field the record lacks is None, never a made-up value; a reader that needs it says so
    older = {k: v for k, v in run.items() if k not in ("caveats", "cache_hit_rate", "intervals")}
    typed = read_struct(older, RunRecord)
    assert typed.caveats is None and typed.cache_hit_rate is None and typed.intervals is None
    assert need(typed.label, "label") == run["label"]
    with pytest.raises(KeyError, match="intervals"):
        need(typed.intervals, "intervals")


def test_numbers_read_back_as_written(point: dict[str, Any]) -> None:
    rec = {**point, "rescore_bytes_per_vector": 384, "memory_bytes": 1.5e6}
    typed = read_struct(rec, SweepRecord)
    assert type(typed.rescore_bytes_per_vector) is int and typed.rescore_bytes_per_vector == 384
    assert type(typed.memory_bytes) is float
    # a record made in this process (numpy scalars, tuples) reads as the JSON it is written as
    made = {**point, "n": np.int64(point["n"]), "p50_us_ci": (1.0, np.float64(2.0))}
    typed = read_struct(made, SweepRecord)
    assert type(typed.n) is int and typed.n == point["n"] and typed.p50_us_ci == [1.0, 2.0]


def test_an_older_version_is_read_and_upgraded_through_the_typed_path(
    monkeypatch: pytest.MonkeyPatch, run: dict[str, Any]
) -> None:
    # as a ragbench that writes ragbench.run/2 (a field split out of the label) reads today's records
    class RunV2(RunRecord, frozen=True):
        label_parts: list[str] | None = None

    def upgrade(rec: dict[str, Any]) -> dict[str, Any]:
        return {**rec, "schema": "ragbench.run/2", "label_parts": str(rec["label"]).split("+")}

    monkeypatch.setitem(record_schema.SCHEMAS, ("run", 2), RunV2)
    monkeypatch.setitem(record_schema.CURRENT, "run", 2)
    monkeypatch.setitem(record_schema.UPGRADES, ("run", 1), upgrade)
    assert run["schema"] == "ragbench.run/1"
    typed = read_struct(run, RunRecord)
    assert isinstance(typed, RunV2) and typed.schema == "ragbench.run/2"
    assert typed.label_parts == run["label"].split("+")
    # and the tables read it: the same table as the version-1 record gives
    monkeypatch.undo()
    today = run_table(run)
    monkeypatch.setitem(record_schema.SCHEMAS, ("run", 2), RunV2)
    monkeypatch.setitem(record_schema.CURRENT, "run", 2)
    monkeypatch.setitem(record_schema.UPGRADES, ("run", 1), upgrade)
    assert run_table(run) == today


def test_a_newer_version_is_refused_through_the_typed_path(
    run: dict[str, Any], point: dict[str, Any]
) -> None:
    newer = {**copy.deepcopy(run), "schema": "ragbench.run/2"}
    with pytest.raises(RecordError, match=r"newer ragbench \(ragbench\.run/2.*upgrade ragbench"):
        read_struct(newer, RunRecord)
    for table in (run_table, lambda r: compare_table([r])):
        with pytest.raises(RecordError, match="upgrade ragbench"):
            table(newer)
    with pytest.raises(RecordError, match="newer ragbench"):
        sweep_table([{**point, "schema": "ragbench.sweep/9"}])


def test_a_record_of_another_kind_or_the_wrong_type_is_refused(
    run: dict[str, Any], point: dict[str, Any]
) -> None:
    with pytest.raises(RecordError, match="a sweep record where a run record was expected"):
        read_struct(point, RunRecord)
    with pytest.raises(RecordError, match="a run record where a load record was expected"):
        load_table([run])
    with pytest.raises(RecordError, match="field 'requests' has the wrong type"):
        read_struct({**run, "requests": "five"}, RunRecord)
    with pytest.raises(RecordError, match="not a ragbench record"):
        read_struct({**run, "schema": "something/1"}, RunRecord)
    assert read_struct({"label": "x"}, LoadRecord).label == "x"  # not stamped yet: current version
