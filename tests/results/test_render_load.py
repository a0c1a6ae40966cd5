"""The load tables print the split of ``retrieve`` (send, server, decode) when the records carry it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.results.records import append_record, read_records
from ragbench.results.tables import load_table, render

SHIPPED = Path(__file__).resolve().parents[2] / "docs/findings/data/vectordb-load-servers-20k.jsonl"


@pytest.fixture(scope="module")
def levels() -> list[dict[str, Any]]:
    """Two real load levels (pgvector and chroma at 50 QPS), as ``ragbench load`` wrote them,
    without any retrieve split they carry (each test plants the split it reads)."""
    return [
        {k: v for k, v in r.items() if k != "retrieve_parts"} for r in read_records(SHIPPED)[:2]
    ]


def _split(rec: dict[str, Any], send: int, server: int, decode: int) -> dict[str, Any]:
    """``rec`` with the retrieve split a client-backed index reports (ns, as a run's info holds it)."""
    parts = {"send": send, "server": server, "decode": decode}
    out = copy.deepcopy(rec)
    out["retrieve_parts"] = {n: {"p50_ns": v, "mean_ns": v + 1000} for n, v in parts.items()}
    return out


def _stage_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("per-stage p50 µs under load")
    )
    return lines[start:]


def test_without_a_split_the_stage_table_has_no_split_columns(levels: list[dict[str, Any]]) -> None:
    block = _stage_block(load_table(levels))
    assert "retrieve send" not in "\n".join(block)
    assert not any(line.startswith("retrieve ") for line in block)


def test_the_split_is_a_column_per_part_in_the_stage_table(levels: list[dict[str, Any]]) -> None:
    pg, chroma = levels
    block = _stage_block(load_table([_split(pg, 12_345, 1_500_000, 9_870), chroma]))
    head = next(line for line in block if line.startswith("┃"))
    cells = [c.strip() for c in head.strip("┃").split("┃")]
    assert cells[-3:] == ["retrieve send µs", "retrieve server µs", "retrieve decode µs"]
    rows = {line.split("│")[1].strip(): line for line in block if line.startswith("│")}
    pg_cells = [c.strip() for c in rows[pg["label"]].strip("│").split("│")]
    assert pg_cells[-3:] == ["12.3", "1,500", "9.87"]  # p50 ns / 1e3, as num() rounds
    chroma_cells = [c.strip() for c in rows[chroma["label"]].strip("│").split("│")]
    assert chroma_cells[-3:] == ["—", "—", "—"]  # a level without the split says so
    assert block[-1].startswith("retrieve send/server/decode: the split of the retrieve stage")


def test_report_prints_the_split_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], levels: list[dict[str, Any]]
) -> None:
    path = tmp_path / "load.jsonl"
    for rec in (_split(levels[0], 20_000, 900_000, 4_000), levels[1]):
        append_record(path, rec)  # written through the load schema (retrieve_parts is typed)
    code = main(["report", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "retrieve server µs" in out and "900" in _stage_block(out)[4].split("│")[-3]
    rows = json.loads(render(read_records(path), "json"))
    assert rows[0]["retrieve_parts"]["server"]["p50_ns"] == 900_000
    assert "retrieve_parts" not in rows[1]
