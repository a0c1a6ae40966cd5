"""The how-to pages of issue 31, as a user runs them: every ``ragbench`` command of "Judging
retrieval by relevance" and "Hybrid retrieval", read from the page itself (so a changed page
changes what runs) and run in a temporary folder with fewer requests; and their bad inputs on
the command line (one line on stderr).

``path/to/scifact`` of the judging page is made there as a small BEIR folder (200 passages,
9 queries, graded qrels): the commands are otherwise the page's, word for word, with
``--queries``/``--warmup`` added where the command takes them.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.results.records import read_records

DOCS = Path(__file__).resolve().parents[2] / "docs" / "how-to"
#: Options added to each command so it runs in seconds (the page's commands measure 200+).
FEWER = {
    "compare": ["--queries", "4", "--warmup", "1"],
    "run": ["--queries", "4", "--warmup", "1"],
    "frontier": ["--queries", "3", "--warmup", "1"],
    "sweep": ["--queries", "4"],
}


def documented(page: str) -> list[list[str]]:
    """Each ``ragbench ...`` command of the page's code blocks (``$ `` prompts, ``\\``
    continuations and ``#`` comments handled), as the arguments after ``ragbench``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("ragbench "):
                commands.append(shlex.split(line, comments=True)[1:])
    return commands


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _scifact(folder: Path) -> None:
    """A BEIR folder: 200 passages on 9 topics, 9 queries, two graded passages each."""
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(200):
            text = f"passage {i} on topic {i % 9} and subject {i % 7}"
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in range(9):
            f.write(json.dumps({"_id": f"q{q}", "text": f"topic {q}"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in range(9):
            f.write(f"q{q}\td{q}\t2\nq{q}\td{q + 9}\t1\n")


def _run_all(capsys: pytest.CaptureFixture[str], commands: list[list[str]]) -> dict[str, list[str]]:
    """Each command in order, exit 0 each; what each printed, by its words joined."""
    printed = {}
    for argv in commands:
        code, out, err = _cli(capsys, [*argv, *FEWER.get(argv[0], [])])
        assert code == 0, (argv, err)
        printed[" ".join(argv)] = [out, err]
    return printed


@pytest.mark.slow
def test_judging_page_commands_run_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _scifact(tmp_path / "path" / "to" / "scifact")
    (tmp_path / "my-pipeline.toml").write_text('[dataset]\npath = "path/to/scifact"\n')
    commands = documented("judging-by-relevance.md")
    assert [c[0] for c in commands] == ["datasets", "compare", "sweep", "run", "report", "frontier"]
    printed = _run_all(capsys, commands)
    out = list(printed.values())
    assert "judged queries" in out[0][0] and "9 of 9" in out[0][0]
    assert "nDCG@10" in out[1][0] and "nDCG@10" in out[2][0]  # compare, sweep: the columns
    assert "judged answers (" in out[3][0]  # run: the line
    assert "nDCG@10" in out[4][0]  # report of compare's records
    frontier = out[5][0]
    assert "cheapest within 1 % of the best nDCG@10: " in frontier
    assert "best nDCG@10 under a p99 of 15 ms: " in frontier
    records = read_records(tmp_path / "frontier.jsonl")
    assert [r["kind"] for r in records].count("run") == 24 and records[-1]["kind"] == "frontier"
    assert (tmp_path / "frontier.png").stat().st_size > 0


@pytest.mark.slow
def test_hybrid_page_commands_and_config_run_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    commands = documented("hybrid-retrieval.md")
    assert [c[0] for c in commands] == ["run", "compare"]
    printed = list(_run_all(capsys, commands).values())
    assert "bm25" in printed[0][0] and "tokenize" in printed[0][0]  # the lexical split line
    for name in ("flat", "bm25", "tantivy", "pg-fts"):
        assert name in printed[1][0]
    # the page's TOML block, as the config of a run
    page = (DOCS / "hybrid-retrieval.md").read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    (tmp_path / "hybrid.toml").write_text(toml)
    code, out, err = _cli(capsys, ["run", "-c", "hybrid.toml", *FEWER["run"], "--out", "h.jsonl"])
    assert code == 0, err
    (rec,) = read_records(tmp_path / "h.jsonl")
    assert rec["info"]["index"]["retrievers"].startswith("concurrent")
    assert "dense" in out and "lexical" in out and "fuse" in out


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ("hybrid+fusion=weighted+alpha=1.5", r"retrieve\.build\.alpha: expected float <= 1\.0"),
        ("hybrid+fusion=weighted+alpha=-0.1", r"retrieve\.build\.alpha: expected float >= 0\.0"),
        ("hybrid+fusion=max", r"unknown fusion 'max'; valid: rrf, weighted"),
        # an unreachable server, named by the index that could not reach it (pg-hybrid's said
        # pg-fts before: its messages came from pg-fts's module constant)
        ("pg-fts+dsn=postgresql://ragbench@127.0.0.1:9/none", r"index 'pg-fts': cannot connect"),
        ("pg-hybrid+dsn=postgresql://ragbench@127.0.0.1:9/none", r"index 'pg-hybrid': cannot conn"),
    ],
)
def test_bad_hybrid_and_lexical_settings_are_one_line(
    capsys: pytest.CaptureFixture[str], index: str, message: str
) -> None:
    argv = ["compare", "--dataset", "pydocs", "--embed", "hashing", "--index", f"flat,{index}"]
    code, _, err = _cli(capsys, [*argv, "--rerank", "none", "--queries", "2", "--warmup", "0"])
    assert code == 2  # before anything is measured: a server never reached is bad input too
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(message, lines[0]), lines[0]
