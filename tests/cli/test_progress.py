"""The progress hook: set-up steps report totals and advances; the CLI draws only on a terminal."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbench import datasets, embedders, indexes, progress
from ragbench import threads as th
from ragbench.cli import main
from ragbench.cli.bars import PlainReporter, RichReporter, on_stderr
from ragbench.indexes import _arrays as _common
from ragbench.indexes._arrays import FIRST_BUILD_CHUNK, build_chunks


class Recorder:
    """A reporter that remembers what it was told."""

    def __init__(self) -> None:
        self.tasks: list[dict[str, Any]] = []

    def start(self, description: str, total: int, unit: str) -> int:
        self.tasks.append(
            {"description": description, "total": total, "unit": unit, "steps": [], "open": True}
        )
        return len(self.tasks) - 1

    def advance(self, handle: int, n: int) -> None:
        self.tasks[handle]["steps"].append(n)

    def finish(self, handle: int) -> None:
        self.tasks[handle]["open"] = False

    def named(self, prefix: str) -> list[dict[str, Any]]:
        return [t for t in self.tasks if t["description"].startswith(prefix)]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def one_thread() -> Any:
    before = th.get_threads()
    th.set_threads(1)
    yield
    th.set_threads(before)


def test_default_reporter_is_silent_and_restored() -> None:
    assert isinstance(progress.current(), progress.NullReporter)
    rec = Recorder()
    with progress.installed(rec):
        assert progress.current() is rec
        with progress.task("work", 3, unit="things") as advance:
            advance(2)
            advance(1)
    assert isinstance(progress.current(), progress.NullReporter)
    assert rec.tasks == [
        {"description": "work", "total": 3, "unit": "things", "steps": [2, 1], "open": False}
    ]


def test_task_is_finished_when_the_work_fails() -> None:
    rec = Recorder()
    with progress.installed(rec), pytest.raises(RuntimeError), progress.task("x", 5):
        raise RuntimeError("boom")
    assert rec.tasks[0]["open"] is False


def test_embedding_reports_passages_in_chunks() -> None:
    ds = datasets.load("synthetic", n=600, dim=16, n_queries=10, seed=2)
    emb = embedders.create("hashing", dim=32)
    rec = Recorder()
    with progress.installed(rec):
        vectors = ds.corpus_vectors(emb)
    (task,) = rec.named("embedding corpus")
    assert task["total"] == 600 and task["unit"] == "passages"
    assert task["steps"] == [256, 256, 88]
    # chunked and sorted by length, yet rows stay in input order
    np.testing.assert_array_equal(vectors, emb.embed(ds.corpus.texts))


def test_exact_neighbours_report_rows_per_block() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2000, 8), dtype=np.float32)
    queries = rng.standard_normal((20_000, 8), dtype=np.float32)  # many queries: small blocks
    rec = Recorder()
    with progress.installed(rec):
        got = datasets.brute_force_neighbors(queries, base, 5)
    (task,) = rec.named("exact neighbours")
    assert task["total"] == 2000 and task["unit"] == "rows"
    assert len(task["steps"]) > 1 and sum(task["steps"]) == 2000
    want = np.argsort(-(queries[:50] @ base.T), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got[:50], want)


@pytest.mark.parametrize("name", ["hnsw", "lsh", "ivf", "flat"])
def test_chunked_build_reports_and_builds_the_same_index(
    name: str, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((25_000, 8), dtype=np.float32)
    queries = rng.standard_normal((200, 8), dtype=np.float32)
    rec = Recorder()
    params = {"ef_construction": 40} if name == "hnsw" else {}  # a cheaper graph, same rules
    chunked = indexes.create(name, dim=8, **params)
    with progress.installed(rec):
        chunked.build(vectors)
    (task,) = rec.tasks
    assert task["description"] == f"building {name}" and task["total"] == 25_000
    assert len(task["steps"]) > 1 and sum(task["steps"]) == 25_000
    assert task["steps"][0] == FIRST_BUILD_CHUNK
    # the same index from one add call (on one thread hnswlib is deterministic)
    module = sys.modules[type(chunked).__module__]
    monkeypatch.setattr(module, "build_chunks", lambda n: iter([(0, n)]))
    whole = indexes.create(name, dim=8, **params)
    whole.build(vectors)
    a_ids, a_scores = chunked.search(queries, k=10)
    b_ids, b_scores = whole.search(queries, k=10)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_array_equal(a_scores, b_scores)


def test_build_chunks_are_sized_to_the_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk is sized from the last call's time to take BUILD_CALL_S: a build answers
    Ctrl-C between calls of ~0.1 s. Old code: 10 000-row calls whatever they took (seconds
    for hnswlib at dim 256 on a loaded machine), and Ctrl-C ended `scale` only by the grace."""
    clock = [0.0]
    monkeypatch.setattr(_common.time, "perf_counter", lambda: clock[0])

    def chunks(n: int, seconds_per_row: float) -> list[tuple[int, int]]:
        got = []
        for start, stop in build_chunks(n, call_s=0.1):
            got.append((start, stop))
            clock[0] += (stop - start) * seconds_per_row
        assert got[0] == (0, min(n, FIRST_BUILD_CHUNK)) and got[-1][1] == n
        assert all(a == b for (_, a), (b, _) in zip(got, got[1:], strict=False))  # no gap
        return got

    slow = [b - a for a, b in chunks(2_000, 0.01)]  # a slow engine: 10 ms a row
    assert slow[1:-1] and all(size == 10 for size in slow[1:-1])  # 0.1 s of rows each
    fast = [b - a for a, b in chunks(1_000_000, 1e-7)]  # a fast one grows at most 2x a call
    assert fast[:4] == [FIRST_BUILD_CHUNK * 2**i for i in range(4)]
    assert len(fast) < 40


def test_numba_kernel_compile_reports_one_step() -> None:
    from ragbench import rerankers

    rec = Recorder()
    with progress.installed(rec):
        rerankers.create("numba").warmup(16)
    assert [(t["description"], t["steps"]) for t in rec.tasks] == [
        ("compiling the numba rerank kernels", [1])
    ]


def test_faiss_hnsw_is_built_in_one_call() -> None:
    rec = Recorder()
    index = indexes.create("faiss-hnsw", dim=8, ef_construction=40)
    with progress.installed(rec):
        index.build(np.random.default_rng(2).standard_normal((12_000, 8), dtype=np.float32))
    assert rec.tasks[0]["steps"] == [12_000]


def _compare_args() -> list[str]:
    return [
        "compare",
        "--dataset",
        "synthetic",
        "--n",
        "600",
        "--dim",
        "16",
        "--embed",
        "hashing",
        "--index",
        "flat",
        "--rerank",
        "numpy",
        "--queries",
        "5",
        "--warmup",
        "0",
    ]


def test_no_bar_output_when_not_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_PROGRESS_INTERVAL_S", "3600")  # no step is that long
    assert not sys.stderr.isatty()
    assert main(_compare_args()) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "\x1b[" not in captured.out
    assert "cache: corpus_vectors[hashing]: miss" in captured.out


def test_bars_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with on_stderr():
        assert isinstance(progress.current(), RichReporter)
    assert isinstance(progress.current(), progress.NullReporter)


def test_plain_lines_when_not_a_terminal() -> None:
    assert not sys.stderr.isatty()
    with on_stderr():
        reporter = progress.current()
        assert isinstance(reporter, PlainReporter)
    assert isinstance(progress.current(), progress.NullReporter)
    assert not any(t.name == "ragbench-progress" for t in threading.enumerate())


class Lines(io.StringIO):
    """A stream that tells when a line arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()

    def write(self, text: str) -> int:
        self.arrived.set()
        return super().write(text)


def test_plain_reporter_reports_a_step_that_never_advances() -> None:
    out = Lines()
    reporter = PlainReporter(out, interval=0.05)
    with progress.installed(reporter), progress.task("building hnsw", 3274, unit="vectors") as adv:
        assert out.arrived.wait(30)  # the background thread, not an advance, wrote it
        adv(3274)
    reporter.close()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"ragbench: building hnsw 0/3 274 vectors \(0 %\), \d+\.\d s", lines[0])
    assert re.fullmatch(
        r"ragbench: building hnsw 3 274/3 274 vectors \(100 %\), \d+\.\d s, done", lines[-1]
    )


def test_plain_reporter_is_silent_for_short_steps() -> None:
    out = Lines()
    reporter = PlainReporter(out, interval=3600)
    with progress.installed(reporter), progress.task("tiny", 2) as advance:
        advance(2)
    reporter.close()
    assert out.getvalue() == ""


def test_progress_interval_must_be_a_positive_number(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_PROGRESS_INTERVAL_S", "soon")
    assert main(["datasets"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RAGBENCH_PROGRESS_INTERVAL_S" in err and "'soon'" in err


def test_piped_stderr_gets_plain_progress_lines(tmp_path: Path) -> None:
    """The console script with stderr a pipe: plain progress lines, no escape codes."""
    exe = Path(sys.executable).with_name("ragbench")
    env = {
        **os.environ,
        "RAGBENCH_CACHE_DIR": str(tmp_path / "cache"),  # nothing cached: embed for real
        "RAGBENCH_PROGRESS_INTERVAL_S": "0.05",
    }
    proc = subprocess.run(
        [str(exe), "compare", "--dataset", "pydocs", "--embed", "hashing", "--index", "flat",
         "--queries", "3", "--warmup", "0"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "embedding corpus (hashing)" in line]
    line = r"ragbench: embedding corpus \(hashing\) ([\d ]+)/3 274 passages \((\d+) %\), [\d.]+ s"
    assert all(re.fullmatch(line + "(, done)?", x) for x in lines), lines
    assert lines[-1].endswith(", done") and "3 274/3 274" in lines[-1]
    assert len(lines) >= 2
    done = [int(re.fullmatch(line + "(, done)?", x).group(1).replace(" ", "")) for x in lines]
    assert done == sorted(done)


def test_rich_reporter_draws_description_count_and_rate() -> None:
    from rich.console import Console

    buf = io.StringIO()
    reporter = RichReporter(Console(file=buf, force_terminal=True, width=120))
    with progress.installed(reporter), progress.task("setting up", 2) as outer:
        with progress.task("embedding corpus (minilm)", 512, unit="passages") as advance:
            advance(256)
            reporter._bar.refresh()
            advance(256)
        outer(2)
    text = buf.getvalue()
    assert "setting up" in text and "embedding corpus (minilm)" in text
    assert "256/512 passages" in text and "/s" in text and "eta" in text
    assert reporter._bar is None  # the display stops with the last bar
