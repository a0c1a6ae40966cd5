"""Corpus embedding throughput at set-up (issue 29): a run that embeds the corpus records how
many passages per second it embedded, with the batch size and threads; a run that reads the
cached vectors records none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbench.cli import main


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_that_embedded_the_corpus_records_its_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    rows = "".join(f"d{i},passage number {i} about topic {i % 7}\n" for i in range(60))
    (tmp_path / "docs.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (tmp_path / "queries.csv").write_text("id,text\nq1,topic 3\nq2,passage 5\n")
    argv = ["compare", "--dataset", str(tmp_path / "docs.csv"), "--embed", "hashing"]
    argv += ["--index", "flat", "--rerank", "none", "--queries", "2", "--warmup", "0"]
    first, again = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main([*argv, "--out", str(first)]) == 0, capsys.readouterr().err
    (rec,) = _records(first)
    got = rec["info"]["corpus_embedding"]  # type: ignore[index]
    assert got["passages"] == 60 and got["seconds"] > 0
    assert got["passages_per_s"] == pytest.approx(60 / got["seconds"])
    assert "batch_size" in got and "threads" in got
    assert main([*argv, "--out", str(again)]) == 0  # the vectors are cached now
    (rec,) = _records(again)
    assert "corpus_embedding" not in rec["info"]  # type: ignore[operator]
