"""``ragbench stream``: live inserts and deletes beside searches, checked from outside."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import datasets
from ragbench.errors import ConfigError
from ragbench.files import CONFIG_LIMIT
from ragbench.live_writes import LiveStream, Step, StreamOptions, read_runbook, run_stream
from ragbench.results.records import read_records
from ragbench.stream_limits import LIMITS, MAX_SEARCHES, MAX_STEP_COUNT, number_text
from ragbench.threads import MAX_THREADS

RUNBOOK = """
[[step]]
insert = 300
search = 60
checkpoint = true

[[step]]
delete = 250
search = 60
checkpoint = true

[[step]]
insert = 200
delete = 100
search = 80
checkpoint = true
"""


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    ds = datasets.load("synthetic", n=2000, dim=32, n_queries=30, seed=5)
    assert ds.vectors is not None and ds.query_vectors_precomputed is not None
    return ds.vectors, ds.query_vectors_precomputed


def _run(
    data: tuple[np.ndarray, np.ndarray], index: str, tmp_path: Path
) -> tuple[list[dict], LiveStream]:
    path = tmp_path / "runbook.toml"
    path.write_text(RUNBOOK)
    steps = read_runbook(path)
    assert steps[1] == Step(0, 250, 60, True)
    opts = StreamOptions(index=index, initial=0.5, qps=0, fresh=0.5, search_threads=2, seed=1)
    st = LiveStream(data[0], data[1], "ip", opts)
    recs = run_stream(data[0], data[1], "ip", opts, runbook=steps, stream=st)
    return recs, st


def _exact(q: np.ndarray, x: np.ndarray, live: np.ndarray, k: int) -> list[set[int]]:
    ids = np.flatnonzero(live)
    scores = q @ x[ids].T
    return [set(ids[np.argsort(-row, kind="stable")[:k]].tolist()) for row in scores]


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_runbook_counts_deletes_inserts_and_recall(
    data: tuple[np.ndarray, np.ndarray], index: str, tmp_path: Path
) -> None:
    recs, st = _run(data, index, tmp_path)
    assert [r["checkpoint"] for r in recs] == [1, 2, 3]
    # counts add up: every operation issued completed or failed, and the live count follows
    assert sum(r["insert"]["items"] for r in recs) == 500
    assert sum(r["delete"]["items"] for r in recs) == 350
    assert [r["live"] for r in recs] == [1300, 1050, 1150]
    for r in recs:
        for kind in ("search", "insert", "delete"):
            ops = r[kind]
            assert ops["issued"] == ops["completed"] + ops["failed"]
            assert ops["failed"] == 0
    assert [r["search"]["completed"] for r in recs] == [60, 60, 80]
    assert st.index.ntotal == 1150
    # a deleted id is never returned, even to its own vector
    deleted = np.flatnonzero(st.deleted_ns > 0)
    assert deleted.size == 350
    got, _ = st.index.search(st.V[deleted], 10)
    assert not np.isin(got, deleted).any()
    assert all(r["deleted_returned"] == 0 for r in recs)
    # an inserted id (still live) is found by its own vector
    inserted = np.flatnonzero((st.inserted_ns > 0) & (st.deleted_ns == 0))
    top1, _ = st.index.search(st.V[inserted], 1)
    found = float((top1[:, 0] == inserted).mean())
    assert found == 1.0 if index == "flat" else found > 0.95
    # recall at the last checkpoint matches an independent exact computation over the live set
    live = np.zeros(len(st.V), dtype=bool)
    live[: st.m0] = True
    live[np.flatnonzero(st.inserted_ns > 0)] = True
    live[deleted] = False
    truth = _exact(data[1], st.V, live, 10)
    res, _ = st.index.search(data[1], 10)
    mine = np.mean([len(truth[i] & set(res[i].tolist())) / 10 for i in range(len(truth))])
    assert recs[-1]["recall"] == pytest.approx(mine, abs=1e-9)
    if index == "flat":
        assert mine == 1.0
    # aimed queries found their fresh documents
    assert sum(r["freshness"]["found"] for r in recs) > 0


def test_timed_stream_accounts_every_operation(data: tuple[np.ndarray, np.ndarray]) -> None:
    opts = StreamOptions(
        index="hnsw",
        initial=0.5,
        insert_rate=300,
        delete_rate=150,
        qps=300,
        duration=1.6,
        checkpoints=2,
        fresh=0.5,
        seed=2,
    )
    recs = run_stream(data[0], data[1], "ip", opts)
    assert len(recs) == 2
    total = {k: sum(r[k]["completed"] + r[k]["failed"] for r in recs) for k in ("search", "insert")}
    assert all(
        r["search"]["issued"] == r["search"]["completed"] + r["search"]["failed"] for r in recs
    )
    assert total["search"] >= 0.7 * 300 * 1.6  # open loop kept roughly to its rate
    assert sum(r["insert"]["items"] for r in recs) >= 0.7 * 300 * 1.6
    assert all(r["deleted_returned"] == 0 for r in recs)
    assert recs[-1]["live"] == 1000 + recs[-1]["inserted_total"] - recs[-1]["deleted_total"]
    assert sum(r["freshness"]["found"] for r in recs) > 10
    assert all(r["freshness"]["p50_s"] is None or r["freshness"]["p50_s"] >= 0 for r in recs)
    assert all(0.5 < r["recall"] <= 1.0 for r in recs)


def test_index_that_cannot_delete_is_refused(data: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(ConfigError, match="cannot delete"):
        run_stream(data[0], data[1], "ip", StreamOptions(index="faiss-hnsw", delete_rate=10))


def test_stream_cli_runbook(tmp_path: Path) -> None:
    book = tmp_path / "book.toml"
    book.write_text(RUNBOOK)
    out = tmp_path / "stream.jsonl"
    res = subprocess.run(
        [
            sys.executable, "-m", "ragbench", "stream",
            "--n", "2000", "--dim", "32", "--index", "hnsw", "--queries", "30",
            "--runbook", str(book), "--qps", "0", "--out", str(out),
            "--plot", str(tmp_path / "stream.png"),
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recs = read_records(out)
    assert [r["kind"] for r in recs] == ["stream"] * 3
    assert "stream — synthetic" in res.stdout and "deleted returned" in res.stdout
    assert (tmp_path / "stream.png").stat().st_size > 0
    bad = subprocess.run(
        [sys.executable, "-m", "ragbench", "stream", "--n", "500", "--initial", "0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "--initial" in bad.stderr and "Traceback" not in bad.stderr


def test_stream_records_render_as_md_and_csv_rows(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """`ragbench report --format md|csv` gives one row per checkpoint (the findings' tables)."""
    import csv
    import io

    from ragbench.results.tables import render

    recs, _ = _run(data, "hnsw", tmp_path)
    md = render(recs, "md").splitlines()
    assert len(md) == 2 + len(recs)
    head = [c.strip() for c in md[0].strip("|").split("|")]
    assert {"checkpoint", "recall", "search_p50_us", "insert_p99_us", "fresh_p50_s"} <= set(head)
    rows = list(csv.DictReader(io.StringIO(render(recs, "csv"))))
    assert [int(r["checkpoint"]) for r in rows] == [r["checkpoint"] for r in recs]
    for row, rec in zip(rows, recs, strict=True):
        assert float(row["recall"]) == rec["recall"]
        assert float(row["search_p50_us"]) == rec["search"]["p50_us"]
        assert int(row["delete_completed"]) == rec["delete"]["completed"]
        assert int(row["deleted_returned"]) == 0


def test_diff_compares_two_stream_runs_checkpoint_by_checkpoint(tmp_path: Path) -> None:
    """Each call's ns is in the record, so ``ragbench diff`` gives every operation an interval."""
    book = tmp_path / "book.toml"
    book.write_text(RUNBOOK)
    outs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for out in outs:
        res = subprocess.run(
            [
                sys.executable, "-m", "ragbench", "stream",
                "--n", "2000", "--dim", "32", "--index", "hnsw", "--queries", "30",
                "--runbook", str(book), "--qps", "0", "--out", str(out),
            ],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    for rec in read_records(outs[0]):
        for op in ("search", "insert", "delete"):
            assert len(rec[op]["latency_ns"]) == rec[op]["completed"], op
    saved = tmp_path / "diff.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "ragbench", "diff", *map(str, outs), "--threshold", "900%",
         "--out", str(saved)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = read_records(saved)
    assert all(r["compared"] == "stream" for r in rows)
    # the runbook's three checkpoints; step 1 inserts no rows and step 2 deletes none
    parts = {(r["key"].rsplit(" ", 1)[-1], r["part"]) for r in rows}
    want = {("1", "search"), ("1", "insert"), ("2", "search"), ("2", "delete")}
    assert want | {("3", op) for op in ("search", "insert", "delete")} == parts
    a_recs, b_recs = (read_records(o) for o in outs)
    calls = {  # (checkpoint, op) -> the fewer calls of the two runs
        (str(ra["checkpoint"]), op): min(len(ra[op]["latency_ns"]), len(rb[op]["latency_ns"]))
        for ra, rb in zip(a_recs, b_recs, strict=True)
        for op in ("search", "insert", "delete")
    }
    for r in rows:
        n = calls[(r["key"].rsplit(" ", 1)[-1], r["part"])]
        if n >= 5:  # a real interval, and within a 10x band
            assert r["ratio_low"] <= r["ratio"] <= r["ratio_high"], r
            assert r["verdict"].startswith("no detectable difference"), r
        else:  # a runbook step's one delete call: a ratio, but no interval and no verdict
            assert r["ratio_low"] != r["ratio_low"] and r["ratio"] > 0, r
            assert (
                r["verdict"] == f"no interval ({n} sample{'s' * (n != 1)} on a side, fewer than 5)"
            )
    assert any(n < 5 for n in calls.values()) and any(n >= 5 for n in calls.values())


# ------------------------------------------------------------ bad input, refused before any work
# Each case runs the command as a child process with a timeout: before these checks, several
# of them never ended (a FIFO runbook, --duration inf, --qps 1e7) and would hang the suite.

STREAM = ["stream", "--n", "2000", "--dim", "16", "--queries", "20"]
TIMED = [*STREAM, "--duration", "2", "--checkpoints", "2"]


def _ragbench(
    cwd: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *argv],
        capture_output=True, text=True, cwd=cwd, timeout=120, env=env,
    )  # fmt: skip


def _refused(res: subprocess.CompletedProcess, *words: str) -> str:
    """The one stderr line of a command that exited 2, holding each of ``words``."""
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _top(name: str) -> str:
    return number_text(LIMITS[name][1])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--duration", "nan"], ["--duration", _top("duration")]),
        (["--duration", "inf"], ["--duration", _top("duration")]),
        (["--qps", "1e7"], ["--qps", _top("qps")]),
        (["--qps", "nan"], ["--qps"]),
        (["--qps", "inf"], ["--qps"]),
        (["--qps", "100000", "--duration", "1000"], ["--qps x --duration", str(MAX_SEARCHES)]),
        (["--insert-rate", "nan"], ["--insert-rate", _top("insert_rate")]),
        (["--insert-rate", "inf"], ["--insert-rate"]),
        (["--delete-rate", "1e308"], ["--delete-rate", _top("delete_rate")]),
        (["--noise", "nan"], ["--noise", _top("noise")]),
        (["--checkpoints", "100000"], ["--checkpoints", _top("checkpoints")]),
        (["--search-threads", "1000000"], ["--search-threads", str(MAX_THREADS)]),
        (["--out", "/nonexistent/s.jsonl"], ["/nonexistent", "does not exist"]),
        (["--plot", "/nonexistent/p.png"], ["/nonexistent", "does not exist"]),
    ],
)
def test_stream_options_outside_their_limits_are_one_line(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    """Each of these used to run forever, end in a traceback, or exit 0 having saved nothing."""
    _refused(_ragbench(tmp_path, *TIMED, *args), *words)
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written


def test_stream_help_states_every_limit(tmp_path: Path) -> None:
    """The CLI reference is made from --help: each option's maximum is in it."""
    res = _ragbench(tmp_path, "stream", "--help")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    for name in ("insert_rate", "delete_rate", "qps", "duration", "checkpoints", "noise", "k"):
        assert f"--{name.replace('_', '-')}" in text and _top(name) in text, name
    assert str(MAX_THREADS) in text and str(MAX_SEARCHES) in text and str(MAX_STEP_COUNT) in text


def test_stream_out_on_a_full_disk_says_what_was_not_saved(tmp_path: Path) -> None:
    """``--out /dev/full`` passes the up-front check; each failed append is reported, exit 1."""
    res = _ragbench(tmp_path, *TIMED, "--out", "/dev/full")
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "2 of 2 record(s) NOT saved to /dev/full" in lines[0]
    assert lines[0].endswith("(No space left on device); none of them is in it"), lines[0]
    assert "deleted returned" in res.stdout  # the table is still printed


def test_stream_runs_on_pydocs(tmp_path: Path) -> None:
    """``--seed`` orders the run; it is not passed to a dataset that takes none."""
    out = tmp_path / "s.jsonl"
    res = _ragbench(
        tmp_path, "stream", "--dataset", "pydocs", "--duration", "1", "--checkpoints", "1",
        "--queries", "5", "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert [r["dataset"] for r in read_records(out)] == ["pydocs"]


def _deep_array() -> str:
    return "a = " + "[\n" * 3000 + "]" * 3000 + "\n"  # 3 001 lines


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[step]]\ninsert = 1000000000000000\ncheckpoint = true\n", [str(MAX_STEP_COUNT)]),
        ("[[step]]\nsearch = 1000000000000000\ncheckpoint = true\n", [str(MAX_STEP_COUNT)]),
        (
            "[[step]]\nsearch = 6000000\n[[step]]\nsearch = 6000000\ncheckpoint = true\n",
            [str(MAX_SEARCHES)],
        ),
        ("step = [1, 2]\n", ["step 1", "table"]),
        ("[[step]]\n", ["step 1", "does nothing"]),
        ("[[step]]\ninsert = 10\n", ["checkpoint"]),
        ("[[step]]\ncheckpoint = true\n" * 1001, ["checkpoints", _top("checkpoints")]),
        (_deep_array(), ["nested deeper than 32"]),
        ("[[step]]\ncheckpoint = true\nx = " + "{a = " * 3000 + "1" + "}" * 3000, ["nested"]),
    ],
    ids=[
        "insert-1e15", "search-1e15", "searches-in-all", "not-a-table", "empty-step",
        "no-checkpoint", "1001-checkpoints", "deep-array", "deep-inline-table",
    ],
)  # fmt: skip
def test_bad_runbooks_are_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    """Used to run for ever (10**15 inserts), exit 0 having measured nothing, or end in a traceback."""
    book = tmp_path / "book.toml"
    book.write_text(text)
    _refused(_ragbench(tmp_path, *STREAM, "--qps", "0", "--runbook", str(book)), "runbook", *words)


def test_runbook_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO used to block for ever and ``/dev/zero`` to be read until memory ran out."""
    fifo = tmp_path / "book.toml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "FIFO"), (zero, "character device")):
        res = _ragbench(tmp_path, *STREAM, "--runbook", str(path))
        _refused(res, str(path), kind, "not a regular file")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (CONFIG_LIMIT + 1))
    _refused(_ragbench(tmp_path, *STREAM, "--runbook", str(big)), str(big), "over the 1.0 MiB")


def test_runbook_inserting_past_the_corpus_stops_at_its_end(tmp_path: Path) -> None:
    """The largest count a step may have runs: its inserts stop at the corpus's last row."""
    book = tmp_path / "book.toml"
    book.write_text("[[step]]\ninsert = 10000000\nsearch = 10\ncheckpoint = true\n")
    out = tmp_path / "s.jsonl"
    res = _ragbench(tmp_path, *STREAM, "--qps", "0", "--runbook", str(book), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (rec,) = read_records(out)
    assert rec["live"] == 2000 and rec["inserted_total"] == 2000 - rec["initial"]


def test_stream_limits_are_the_documented_ones() -> None:
    """docs/how-to/indexes.md states each maximum next to its option (kept in step with the code)."""
    doc = (Path(__file__).resolve().parents[1] / "docs/how-to/indexes.md").read_text()
    section = " ".join(doc.split("## Streaming inserts and deletes")[1].split("\n## ")[0].split())
    for name in ("delete_rate", "qps", "duration", "checkpoints", "search_threads", "k", "noise"):
        flag = "--" + name.replace("_", "-")
        # the flag, then its maximum before the next `option`
        assert re.search(rf"`{flag}`[^`]*?\b{_top(name)}\b", section), flag
    assert str(MAX_SEARCHES) in section and str(MAX_STEP_COUNT) in section


def test_run_stream_checks_steps_and_options_given_in_code(tmp_path: Path) -> None:
    """The Python API checks what the CLI checks, before building (a child process: this used
    to run 10**15 searches, and a NaN rate used to end in a ValueError mid-run)."""
    code = (
        "import math\n"
        "from ragbench import datasets\n"
        "from ragbench.errors import ConfigError\n"
        "from ragbench.live_writes import Step, StreamOptions, run_stream\n"
        "ds = datasets.load('synthetic', n=500, dim=16, n_queries=10, seed=1)\n"
        "X, Q = ds.vectors, ds.query_vectors_precomputed\n"
        "cases = [\n"
        "    (StreamOptions(qps=0), [Step(search=10**15, checkpoint=True)]),\n"
        "    (StreamOptions(qps=0), [Step(insert=10)]),\n"
        "    (StreamOptions(qps=0), [Step(), Step(checkpoint=True)]),\n"
        "    (StreamOptions(insert_rate=math.nan, duration=0.1, checkpoints=1), None),\n"
        "]\n"
        "for opts, book in cases:\n"
        "    try:\n"
        "        run_stream(X, Q, 'ip', opts, runbook=book)\n"
        "    except ConfigError as exc:\n"
        "        print('refused:', exc)\n"
        "    else:\n"
        "        print('ran')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("refused: ") for line in lines), res.stdout
    assert str(MAX_STEP_COUNT) in lines[0] and "checkpoint" in lines[1]
    assert "step 1: does nothing" in lines[2] and "--insert-rate" in lines[3]
