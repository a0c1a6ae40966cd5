"""``ragbench diff A B --out F``: one versioned diff record per compared row, rendered by ``report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ragbench.cli import main
from ragbench.results.records import read_records

SHIPPED = Path(__file__).resolve().parents[2] / "docs/findings/data/compare-pydocs.jsonl"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A: two real runs; B: the same runs with every retrieve sample twice as long."""
    monkeypatch.chdir(tmp_path)
    runs = [r for r in read_records(SHIPPED) if r["kind"] == "run"][:2]
    Path("a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    for r in runs:
        r["samples_ns"]["retrieve"] = [2 * x for x in r["samples_ns"]["retrieve"]]
    Path("b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    return "a.jsonl", "b.jsonl"


def _body_rows(table: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("│").split("│")]
        for line in table.splitlines()
        if line.startswith("│")
    ]


def test_diff_out_appends_one_record_per_row_and_report_renders_them(
    sides: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = sides
    code, printed, err = cli(capsys, "diff", a, b, "--out", "d.jsonl")
    assert code == 1, err  # retrieve twice as slow: a sure regression, and the records are written
    diffs = read_records("d.jsonl")
    table_rows = _body_rows(printed)
    assert len(diffs) == len(table_rows) == 2 * 9  # two runs x (total + 8 stages)
    for rec, row in zip(diffs, table_rows, strict=True):
        assert rec["schema"] == "ragbench.diff/1" and rec["kind"] == "diff"
        assert [rec["key"], rec["part"], rec["verdict"]] == [row[0], row[1], row[6]]
        assert rec["compared"] == "run" and rec["stat"] == "p50" and rec["threshold"] == 0.05
        assert (rec["a_file"], rec["b_file"], rec["a_runs"], rec["b_runs"]) == (a, b, 1, 1)
        assert rec["ratio"] == pytest.approx(rec["b"] / rec["a"], rel=1e-9)
        assert rec["ratio_low"] <= rec["ratio"] <= rec["ratio_high"]
        assert (rec["verdict"] == "slower") == (rec["ratio_low"] > 1.05)
    retrieve = [r for r in diffs if r["part"] == "retrieve"]
    assert {r["verdict"] for r in retrieve} == {"slower"}
    assert all(r["ratio"] == pytest.approx(2.0, rel=0.01) for r in retrieve)
    embed = [r for r in diffs if r["part"] == "embed"]
    assert all(r["ratio"] == 1.0 and r["verdict"] == "no detectable difference" for r in embed)

    code, report, err = cli(capsys, "report", "d.jsonl")
    assert code == 0, err
    assert report.startswith(f"saved diff — p50, threshold 5%: A = {a}, B = {b}")
    assert _body_rows(report) == table_rows  # the rows ragbench diff printed
    assert "the largest sure change is retrieve: B 2.00× slower than A" in report
    code, out, err = cli(capsys, "report", "d.jsonl", "--format", "json")
    assert code == 0 and [r["part"] for r in json.loads(out)] == [r["part"] for r in diffs]

    # a second diff appends; diffing a file of diffs has nothing to compare
    code, _, _ = cli(capsys, "diff", a, a, "--out", "d.jsonl")
    assert code == 0 and len(read_records("d.jsonl")) == 2 * 18
    code, _, err = cli(capsys, "diff", "d.jsonl", "d.jsonl")
    assert code == 2 and "no configuration appears in both files" in err


def test_the_diff_kind_is_in_the_records_schema(
    sides: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "schema", "records", "--kind", "diff")
    doc = json.loads(out)
    assert code == 0 and doc["$ref"] == "#/$defs/DiffRecord"
    assert doc["$defs"]["DiffRecord"]["properties"]["schema"] == {"const": "ragbench.diff/1"}
    code, out, _ = cli(capsys, "schema", "records")
    every = jsonschema.Draft202012Validator(json.loads(out))
    cli(capsys, "diff", *sides, "--out", "d.jsonl")
    records: list[dict[str, Any]] = [
        json.loads(x) for x in Path("d.jsonl").read_text().splitlines()
    ]
    for rec in records:
        every.validate(rec)
    assert not every.is_valid({**records[0], "ratio": "double"})


def test_a_newer_diff_record_is_refused_by_report(
    sides: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "diff", *sides, "--out", "d.jsonl")
    rec = json.loads(Path("d.jsonl").read_text().splitlines()[0])
    Path("new.jsonl").write_text(json.dumps({**rec, "schema": "ragbench.diff/2"}) + "\n")
    code, out, err = cli(capsys, "report", "new.jsonl")
    assert code == 2 and out == "" and "newer ragbench (ragbench.diff/2" in err


def test_an_unwritable_out_fails_before_any_work(
    sides: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "diff", *sides, "--out", "no/such/dir/d.jsonl")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--out file" in err
