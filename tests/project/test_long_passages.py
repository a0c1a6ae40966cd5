"""tools/long_passages.py (the long-passage text folder of the query-embedder findings) and the
committed record it was measured with: the reading names each row's dominant embed part."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ragbench import datasets
from ragbench.results.reading import reading
from ragbench.results.records import read_records

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "findings" / "data" / "embed-long-passages.jsonl"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "long_passages", ROOT / "tools" / "long_passages.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["long_passages"] = module
    spec.loader.exec_module(module)
    return module


def test_the_folder_is_long_pydocs_passages_ragbench_reads(tmp_path: Path) -> None:
    tool = _tool()
    out = tmp_path / "long"
    assert tool.main([str(out), "--join", "12", "--passages", "30", "--queries", "20"]) == 0
    passages = tool.pydocs_passages()
    corpus = sorted((out / "corpus").glob("*.txt"))
    assert len(corpus) == 30
    first = corpus[0].read_text(encoding="utf-8")
    assert first == "\n\n".join(passages[:12]) + "\n"  # in the shipped file's order
    queries = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == 20
    assert queries[0]["text"] == "\n\n".join(passages[6:18])  # half-way into the first file
    # long: every text far past what MiniLM's 256 tokens hold (~4 characters per token)
    assert min(len(q["text"]) for q in queries) > 4 * 256 * 2
    ds = datasets.from_table(datasets.spec_table(str(out)))
    assert len(ds.corpus.texts) == len(corpus) and len(ds.queries.texts) == 20
    tool.build(out, join=12, queries=5)  # its own folder is replaced
    assert len((out / "queries.jsonl").read_text().splitlines()) == 5


def test_a_folder_it_did_not_make_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not empty and was not made by this tool"):
        _tool().build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_reading_names_the_part_that_dominates_each_row() -> None:
    """The committed findings record (docs/findings/commands.toml, embed-long-passages.jsonl):
    for every row, the part with the largest p50 in ``info.embed_parts`` is the one the reading
    says dominates."""
    records = read_records(RECORD)
    assert len(records) >= 3  # minilm on torch, onnx and int8
    lines = reading(records)
    for rec in records:
        parts = rec["info"]["embed_parts"]
        assert list(parts) == ["tokenize", "forward", "pool"]
        top = max(parts, key=lambda name: parts[name]["p50_ns"])
        (line,) = [ln for ln in lines if ln.startswith(f"{rec['label']}: embed p50 split:")]
        assert line.split("; ")[-1].startswith(f"{top} dominates"), line
