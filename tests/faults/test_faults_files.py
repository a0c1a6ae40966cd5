"""Results files and outputs under faults: nothing lost, everything read right, fast; Ctrl-C.

Every test drives the ``ragbench`` command line the way a user does (in this
process through :func:`ragbench.cli.main`, or as a child process where a
hang or a signal is the point), on records that real commands wrote.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench.files
from ragbench.cli import main
from ragbench.cli.bars import INTERVAL_ENV
from ragbench.errors import ConfigError, DatasetError
from ragbench.files import append_bytes, check_writable, read_regular
from ragbench.results import records as records_mod
from ragbench.results.records import append_record, pareto, read_records
from ragbench.results.tables import sweep_table
from ragbench.results.tables.cells import plain_table as _plain_table
from ragbench.results.tables.cells import rich_table as _rich_table
from ragbench.results.tables.cells import text_table

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["sweep", "--n", "1500", "--dim", "16", "--index", "flat,lsh", "--queries", "20"]
CONFIG = (
    '[dataset]\nname = "synthetic"\nn = 800\ndim = 16\nn_queries = 20\n'
    '[run]\nqueries = 12\nwarmup = 1\n[retrieve]\nbackend = "flat"\n[serialize]\nbackend = "json"\n'
)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the one error line a command prints; a command that runs past the
    progress interval (10 s: a sweep on a busy machine) would print progress lines too."""
    monkeypatch.setenv(INTERVAL_ENV, "3600")


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Results files written by real commands: a sweep, two runs of one config, a config file."""
    d = tmp_path_factory.mktemp("made")
    cfg = d / "c.toml"
    cfg.write_text(CONFIG)
    assert main([*SWEEP, "--out", str(d / "sweep.jsonl")]) == 0
    assert main(["run", "-c", str(cfg), "--out", str(d / "run.jsonl")]) == 0
    assert main(["run", "-c", str(cfg), "--out", str(d / "run.jsonl")]) == 0
    return {"dir": d, "config": cfg, "sweep": d / "sweep.jsonl", "run": d / "run.jsonl"}


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# ---------------------------------------------------------------- 1. user strings are plain text


@pytest.mark.parametrize("width", [400, 30])  # 30: too narrow, rich wraps it
def test_table_strings_are_never_markup(width: int) -> None:
    names = ["test_encode[json]", "[bold]x[/bold]", "a*b*", "]odd[", "[/]"]
    out = text_table("t [red]", [("name [x]", "left"), ("v", "right")], [[n, "1"] for n in names])
    flat = out.replace("\n", "").replace("│", "").replace(" ", "")
    for name in names:
        assert name.replace(" ", "") in (out if width == 400 else flat)
    assert "t [red]" in out and "name [x]" in out


def test_fast_table_draws_exactly_what_rich_draws() -> None:
    rnd = random.Random(3)
    alpha = list("ab yz[]*µ±—★中0123456789.,")
    drawn = 0
    for _ in range(400):
        nc = rnd.randint(1, 5)
        cols = [("".join(rnd.choices(alpha, k=rnd.randint(0, 7))), rnd.choice(["left", "right"]))]
        cols += [("".join(rnd.choices(alpha, k=4)), "right") for _ in range(nc - 1)]
        rows = [
            ["".join(rnd.choices(alpha, k=rnd.randint(0, 11))) for _ in range(nc)]
            for _ in range(rnd.randint(0, 4))
        ]
        title = "".join(rnd.choices(alpha, k=rnd.randint(1, 70)))
        width = rnd.choice([30, 80, 400])
        fast = _plain_table(title, cols, rows, width)
        if fast is not None:
            drawn += 1
            assert fast == _rich_table(title, cols, rows, width), (title, cols, rows)
    assert drawn > 200


def test_report_and_diff_print_bracketed_names(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = lines_of(made["run"])
    for i, rec in enumerate(recs):
        rec["label"] = f"flat[json]*{i}"
        rec["dataset"]["name"] = "docs[v2]"
    runs = write_lines(tmp_path / "runs[1].jsonl", recs)
    sweeps = lines_of(made["sweep"])
    for rec in sweeps:
        rec["dataset"] = "ds[x]"
        rec["index"] = f"{rec['index']}[cpu]"
    sweep = write_lines(tmp_path / "sweep.jsonl", sweeps)
    code, out, err = cli(capsys, "report", str(runs), str(sweep))
    assert code == 0, err
    for needle in ("flat[json]*0", "flat[json]*1", "docs[v2]", "ds[x]", "flat[cpu]", "lsh[cpu]"):
        assert needle in out, needle
    code, out, err = cli(capsys, "diff", str(runs), str(runs))
    assert code == 0, err
    assert "flat[json]*0" in out and "flat[json]*1" in out


def test_pytest_benchmark_files_with_parametrized_names(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real pytest-benchmark file: ``test_encode[json]`` and ``[protobuf]`` stay apart."""
    pytester.makepyfile(
        """
        import json
        import pytest

        @pytest.mark.parametrize("codec", ["json", "protobuf"])
        def test_encode(benchmark, codec):
            benchmark(json.dumps, {"codec": codec, "n": list(range(50))})
        """
    )
    files = []
    for side in ("a", "b"):
        path = pytester.path / f"{side}.json"
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--benchmark-json={path}", "--benchmark-max-time=0.05"
        )
        result.assert_outcomes(passed=2)
        assert path.read_text().startswith("{\n")  # the indented document, not JSON lines
        files.append(str(path))
    capsys.readouterr()
    code, out, err = cli(capsys, "diff", *files)
    assert code in (0, 1), err
    assert "test_encode[json]" in out and "test_encode[protobuf]" in out
    code, out, err = cli(capsys, "report", files[0])
    assert code == 0, err
    assert "pytest-benchmark file" in out
    assert "test_encode[json]" in out and "test_encode[protobuf]" in out
    code, _, err = cli(capsys, "report", files[0], "--format", "csv")
    assert code == 2 and "pytest-benchmark" in one_line(err)
    # cut short, or some other JSON document: said what it is not, in one line
    torn = pytester.path / "torn.json"
    torn.write_text(Path(files[0]).read_text()[:300])
    other = pytester.path / "other.json"
    other.write_text(json.dumps({"results": []}, indent=2))
    for path, needle in ((torn, "not valid JSON"), (other, "without a benchmarks list")):
        for argv in (["report", str(path)], ["diff", str(path), files[0]]):
            code, _, err = cli(capsys, *argv)
            line = one_line(err)
            assert code == 2 and needle in line and "pytest-benchmark file" in line, line


# ---------------------------------------------------------------- 2. diff honesty


def test_diff_warns_when_a_side_is_one_run(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = lines_of(made["run"])
    a = write_lines(tmp_path / "a.jsonl", recs[:1])
    b = write_lines(tmp_path / "b.jsonl", recs[1:])
    code, out, err = cli(capsys, "diff", str(a), str(b))
    assert code in (0, 1), err
    assert "WARNING: both sides hold a single run" in out
    assert "no run-to-run variance is known" in out
    # two runs pooled on side A: only B is a single run
    both = write_lines(tmp_path / "both.jsonl", recs)
    code, out, _ = cli(capsys, "diff", str(both), str(b))
    assert "WARNING: side B holds a single run" in out


@pytest.mark.parametrize("text", ["5%", "0.05", "5 %"])
def test_threshold_as_percent_or_fraction(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str
) -> None:
    code, out, err = cli(capsys, "diff", str(made["run"]), str(made["run"]), "--threshold", text)
    assert code == 0, err
    assert "threshold 5%" in out


@pytest.mark.parametrize("text", ["5", "1.5", "-0.1", "lots"])
def test_threshold_a_bare_number_above_one_is_refused(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str
) -> None:
    code, _, err = cli(capsys, "diff", str(made["run"]), str(made["run"]), "--threshold", text)
    assert code == 2
    line = one_line(err)
    assert "--threshold" in line
    if text == "5":
        assert "500%" in line and "5%" in line


def test_diff_of_load_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load.jsonl"
    code, _, err = cli(
        capsys, "load", "--dataset", "synthetic", "--n", "800", "--dim", "16", "--index", "flat",
        "--qps", "40,80", "--duration", "0.3", "--workers", "1", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    code, stdout, err = cli(capsys, "diff", str(out), str(out))
    assert code == 0, err
    assert "at 40.0 QPS" in stdout and "at 80.0 QPS" in stdout
    assert "no interval (no raw samples)" in stdout and "no configuration" not in err


# ---------------------------------------------------------------- 4. outputs checked before work


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any measurement starting fails the test loudly."""
    from ragbench import datasets, pipeline, sweeps

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("work started before the outputs were checked")

    monkeypatch.setattr(datasets, "from_table", refuse)
    monkeypatch.setattr(pipeline.Pipeline, "setup", refuse)
    monkeypatch.setattr(sweeps, "scale_points", refuse)


def _commands(cfg: Path, flag: str, target: str) -> list[list[str]]:
    out = [
        [*SWEEP, flag, target],
        ["scale", "--index", "flat", "--n", "1k", flag, target],
        ["load", "--qps", "10", "--duration", "0.2", flag, target],
    ]
    if flag == "--out":
        out += [["run", "-c", str(cfg), flag, target], ["compare", "--n", "1k", flag, target]]
    return out


@pytest.mark.parametrize("flag", ["--out", "--plot"])
@pytest.mark.parametrize("where", ["missing", "unwritable"])
def test_unwritable_outputs_are_refused_before_any_work(
    made: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_work: None,
    flag: str,
    where: str,
) -> None:
    # /proc accepts no new file, even from root (a mode-0555 folder does, for root)
    target = str(tmp_path / "no" / "such" / "r.jsonl") if where == "missing" else "/proc/rb.out"
    for argv in _commands(made["config"], flag, target):
        code, _, err = cli(capsys, *argv)
        assert code == 2, (argv, err)
        line = one_line(err)
        assert ("does not exist" in line) if where == "missing" else ("/proc" in line), line
        assert "AssertionError" not in err
    assert not (tmp_path / "no").exists()  # the folder was not created


def test_a_full_device_loses_no_table_and_says_what_was_not_saved(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *SWEEP, "--out", "/dev/full")
    assert code == 1
    assert "recall" in out and "flat" in out  # the table is printed anyway
    line = one_line(err)
    assert "2 of 2 record(s) NOT saved to /dev/full" in line and "No space left" in line
    code, out, err = cli(capsys, "run", "-c", str(made["config"]), "--out", "/dev/full")
    assert code == 1 and "before first token" in out
    assert "NOT saved to /dev/full" in one_line(err)
    code, out, err = cli(capsys, "report", str(made["sweep"]), "--plot", "/dev/full")
    assert code == 1 and "recall" in out
    assert "chart NOT written to /dev/full" in one_line(err)


def test_plot_path_printed_is_the_file_written(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    code, out, err = cli(
        capsys, "report", str(made["sweep"]), "--plot", str(tmp_path / "out/chart")
    )
    assert code == 0, err
    written = tmp_path / "out" / "chart.png"
    assert f"wrote {written}" in out
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = cli(capsys, "report", str(made["sweep"]), "--plot", str(tmp_path / "x/chart"))
    assert code == 2 and "does not exist" in one_line(err)


def test_check_writable_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        check_writable(tmp_path, "--out file")
    with pytest.raises(ConfigError, match=r"folder .*nope does not exist"):
        check_writable(tmp_path / "nope" / "f", "--out file")
    existing = tmp_path / "f.jsonl"
    existing.write_text("kept\n")
    check_writable(existing, "--out file")
    check_writable(tmp_path / "new.jsonl", "--out file")
    assert existing.read_text() == "kept\n" and sorted(os.listdir(tmp_path)) == ["f.jsonl"]


# ---------------------------------------------------------------- 5. atomic appends, torn lines


def _failing_write(monkeypatch: pytest.MonkeyPatch, fail_on: int) -> list[int]:
    """os.write in ragbench.files writes half of call number ``fail_on``'s bytes, then ENOSPC."""
    real = os.write
    calls = [0]

    def write(fd: int, data: Any) -> int:
        calls[0] += 1
        if calls[0] == fail_on:
            real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if calls[0] == fail_on + 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(ragbench.files.os, "write", write)
    return calls


def test_a_failed_append_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.jsonl"
    rec = records_mod.new_record("sweep", {"index": "flat", "x": list(range(100))})
    append_record(path, rec)
    before = path.read_bytes()
    _failing_write(monkeypatch, 1)
    with pytest.raises(OSError, match="No space"):
        append_record(path, rec)
    assert path.read_bytes() == before
    fresh = tmp_path / "fresh.jsonl"
    with pytest.raises(OSError):
        append_bytes(fresh, b"x" * 1000 + b"\n")
    assert not fresh.exists()  # created by the failed append: removed again


def test_a_full_disk_mid_sweep_keeps_every_record_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.jsonl"
    _failing_write(monkeypatch, 2)  # the second record's write fails half way
    code, stdout, err = cli(capsys, *SWEEP, "--out", str(out))
    assert code == 1
    assert "flat" in stdout and "lsh" in stdout
    assert "1 of 2 record(s) NOT saved" in one_line(err)
    monkeypatch.undo()
    assert [r["index"] for r in read_records(out)] == ["flat"]
    code, stdout, err = cli(capsys, "report", str(out))
    assert code == 0 and err == ""


def _append_on_a_small_disk(path: str, capacity: int, who: int, count: int, saved: Any) -> None:
    """A child process appending ``count`` records to ``path`` on a disk of ``capacity`` bytes.

    The disk (os.write on regular files) takes what fits of a write and
    returns that short count, then fails with ENOSPC, as Linux does; each
    write first waits 2 ms (a slow disk: other appenders run meanwhile). The
    numbers of the records whose append returned are put on ``saved``.
    """
    real = os.write

    def write(fd: int, data: Any) -> int:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return real(fd, data)
        time.sleep(0.002)
        free = capacity - os.fstat(fd).st_size
        if free <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, bytes(data[:free]))

    os.write = write  # type: ignore[assignment]  # this child only
    ok = []
    for i in range(count):
        rec = _point(who, i)
        try:
            append_record(path, rec)
            ok.append(i)
        except OSError:
            pass
    saved.put((who, ok))


def _point(who: int, i: int) -> dict[str, Any]:
    """A sweep record of about 700 bytes, told apart by ``who`` wrote it and its number ``i``."""
    return {**_sweep_points(1)[0], "index": "flat", "who": who, "i": i, "pad": "x" * 300}


@pytest.mark.integration
def test_concurrent_appends_on_a_filling_disk_leave_only_whole_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import multiprocessing

    path = tmp_path / "shared.jsonl"
    one = len(json.dumps(_point(0, 0), separators=(",", ":")))
    writers, count = 4, 25
    ctx = multiprocessing.get_context("spawn")
    saved = ctx.Queue()
    procs = [
        ctx.Process(
            target=_append_on_a_small_disk,
            args=(str(path), writers * count * one // 2, who, count, saved),
        )
        for who in range(writers)
    ]
    for proc in procs:
        proc.start()
    reported = dict(saved.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    # space freed: the next append lands after whole lines only
    append_record(path, _point(-1, 0))
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = [json.loads(line) for line in data.splitlines()]  # every line whole: no fragment
    kept = sorted((r["who"], r["i"]) for r in lines)
    expected = sorted([(-1, 0)] + [(w, i) for w, ok in reported.items() for i in ok])
    assert kept == expected  # no record lost, none twice
    assert 0 < sum(len(ok) for ok in reported.values()) < writers * count  # the disk did fill
    code, out, err = cli(capsys, "report", str(path))
    assert code == 0 and err == "" and "flat" in out, err


def test_torn_lines_anywhere_are_skipped_counted_and_named(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = made["sweep"].read_bytes()
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(whole + whole.splitlines(keepends=True)[0][:57])
    code, out, err = cli(capsys, "report", str(torn))
    assert code == 0
    assert "flat" in out and "lsh" in out
    warning = one_line(err)
    assert "torn.jsonl" in warning and "skipped 1 line" in warning and "line 3" in warning
    code, out, err = cli(capsys, "diff", str(torn), str(made["sweep"]))
    assert code in (0, 1) and "lsh" in out and "torn.jsonl" in err and "skipped 1 line" in err
    # a fragment left mid-file by a failed append, then more appends: the fragment's line is
    # skipped, the record appended after it on the same line and every other record are read
    lines = whole.splitlines(keepends=True)
    assert len(lines[1]) > 700
    middle = tmp_path / "middle.jsonl"
    middle.write_bytes(
        lines[0] + lines[1][:681] + lines[1] + b"{not json\n" + lines[0] + lines[1][:40]
    )
    code, out, err = cli(capsys, "report", str(middle))
    assert code == 0, err
    warning = one_line(err)
    assert "middle.jsonl" in warning and "skipped 3 line(s)" in warning
    assert "line 2, 3, 5" in warning and "read the 3 whole record(s)" in warning
    assert [r["index"] for r in read_records(middle)] == ["flat", "lsh", "flat"]
    code, out, err = cli(capsys, "diff", str(middle), str(made["sweep"]))
    assert code in (0, 1) and "lsh" in out and "skipped 3 line(s)" in err
    # two whole records with no newline between them are both read, without a warning
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(lines[0].rstrip(b"\n") + lines[1])
    code, out, err = cli(capsys, "report", str(joined))
    assert code == 0 and err == "" and "lsh" in out
    # a file of which no line is a record is still an error naming it
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"a,b,c\n1,2,3\n")
    code, _, err = cli(capsys, "report", str(junk))
    assert code == 2 and "junk.jsonl:1" in one_line(err) and "holds no record" in err


# ---------------------------------------------------------------- 6. only regular files


def test_read_regular_refuses_fifos_devices_and_big_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(DatasetError, match="FIFO"):
        read_regular(fifo, limit_bytes=100, what="results file")
    assert time.monotonic() - t0 < 5  # refused, not waited on for a writer
    with pytest.raises(DatasetError, match="character device"):
        read_regular("/dev/zero", limit_bytes=100, what="results file")
    with pytest.raises(DatasetError, match="directory"):
        read_regular(tmp_path, limit_bytes=100, what="results file")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(ConfigError, match="over the 100 bytes"):
        read_regular(big, limit_bytes=100, what="config", error=ConfigError)
    assert read_regular(big, limit_bytes=101, what="config") == b"x" * 101


def _ragbench(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_fifos_and_devices_given_as_files_are_refused_at_once(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """As child processes with a timeout: a hang would fail the test instead of hanging it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv, needle in (
        (["run", "-c", str(fifo)], "FIFO"),
        (["run", "-c", "/dev/zero"], "character device"),
        (["report", str(fifo)], "FIFO"),
        (["diff", str(fifo), str(made["sweep"])], "FIFO"),
        (["diff", str(made["sweep"]), "/dev/zero"], "character device"),
    ):
        done = _ragbench(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        named = str(fifo) if str(fifo) in argv else "/dev/zero"
        line = one_line(done.stderr)
        assert needle in line and named in line, line


def test_an_oversized_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "big.toml"
    cfg.write_text(CONFIG + "#" * (1 << 20))
    code, _, err = cli(capsys, "run", "-c", str(cfg))
    assert code == 2 and "over the 1.0 MiB" in one_line(err)


def _tiny_bundled(root: Path) -> Path:
    from ragbench import datasets, embedders
    from ragbench.datasets.shipped import write_shipped

    folder = root / "tiny"
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as fh:
        for i in range(120):
            fh.write(json.dumps({"id": f"d{i}", "text": f"passage {i} about item {i % 7}"}) + "\n")
    with (folder / "queries.jsonl").open("w") as fh:
        for i in range(6):
            fh.write(json.dumps({"id": f"q{i}", "text": f"item {i}"}) + "\n")
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=32)
    arrays = {"corpus": emb.embed(ds.corpus.texts), "queries": emb.embed(ds.queries.texts)}
    write_shipped(folder, "hashing", emb.fingerprint, (ds.corpus_hash, ds.queries_hash), arrays)
    return folder


def test_an_empty_shipped_vectors_file_is_a_dataset_error_not_an_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGBENCH_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    folder = _tiny_bundled(tmp_path / "datasets")
    npy = folder / "vectors-hashing-corpus.npy"
    args = ["compare", "--dataset", "tiny", "--embed", "hashing", "--set", "embed.dim=32"]
    args += ["--index", "flat", "--queries", "3", "--warmup", "0"]
    npy.write_bytes(b"")
    code, _, err = cli(capsys, *args)
    assert code == 2
    line = one_line(err)
    assert "interrupted" not in line and str(npy) in line and "--re-embed" in line
    npy.unlink()
    os.mkfifo(npy)
    code, _, err = cli(capsys, *args)
    assert code == 2 and "FIFO" in one_line(err)


# ---------------------------------------------------------------- 7. linear report and diff


class Counted(dict):  # type: ignore[type-arg]
    """A record that counts how often its fields are read."""

    reads = 0

    def __getitem__(self, key: Any) -> Any:
        Counted.reads += 1
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        Counted.reads += 1
        return super().get(key, default)


def _sweep_points(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        records_mod.new_record(
            "sweep",
            {
                "dataset": "synthetic",
                "n": 1000,
                "dim": 16,
                "metric": "ip",
                "k": 10,
                "index": f"idx{i % 4}",
                "build": {"M": 16},
                "query": {"ef": i},
                "recall": round(rnd.random(), 2),
                "qps_single": rnd.random() * 1e5,
                "p50_us": 10.0,
                "p95_us": 12.0,
                "p99_us": 20.0,
                "qps_batch": 1e4,
                "build_s": 0.1,
                "memory_bytes": 1e6,
                "latency_ns": [10_000, 11_000, 12_000],
            },
            env={"node": "n", "cpu": "c", "cores": 2},
        )  # fmt: skip
        for i in range(n)
    ]


def test_sweep_table_reads_each_record_a_constant_number_of_times() -> None:
    per_record = []
    for n in (500, 2000):
        points = [Counted(p) for p in _sweep_points(n)]
        Counted.reads = 0
        sweep_table(points)
        per_record.append(Counted.reads / n)
    # a pairwise step (the old Pareto flags) reads each record n times: 4x more at 4x the size
    assert per_record[1] < 1.2 * per_record[0], per_record


def test_pareto_flags_match_the_pairwise_definition() -> None:
    rnd = np.random.default_rng(5)
    for _ in range(200):
        n = int(rnd.integers(1, 30))
        pts = [
            {"recall": float(rnd.integers(0, 5)), "qps_single": float(rnd.integers(0, 5))}
            for _ in range(n)
        ]
        if n > 3:
            pts[0]["recall"] = float("nan")
        want = [
            not any(
                o["recall"] >= p["recall"]
                and o["qps_single"] >= p["qps_single"]
                and (o["recall"] > p["recall"] or o["qps_single"] > p["qps_single"])
                for o in pts
            )
            for p in pts
        ]
        assert pareto(pts) == want, pts


def test_diff_pools_repetitions_in_linear_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragbench.results import diff as diffing

    copied = [0]
    real = np.concatenate

    def counting(arrays: Any, *a: Any, **k: Any) -> Any:
        out = real(arrays, *a, **k)
        copied[0] += out.size
        return out

    monkeypatch.setattr(diffing.np, "concatenate", counting)
    work = []
    for n in (100, 400):  # records of one configuration, 3 samples each
        path = tmp_path / f"{n}.jsonl"
        for p in _sweep_points(n):
            p["query"], p["index"] = {"ef": 1}, "flat"
            append_record(path, p)
        copied[0] = 0
        (c,) = diffing.read_comparables(path).values()
        assert c.runs == n and c.samples["latency"].size == 3 * n
        work.append(copied[0] / n)
    assert work[1] < 1.2 * work[0], work  # pooling one record at a time copied n²/2 samples


# ---------------------------------------------------------------- 8. malformed records


def test_malformed_records_name_line_and_field(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = lines_of(made["run"])
    sweeps = lines_of(made["sweep"])
    bad_run = dict(runs[1])
    del bad_run["summary"]
    bad_sweep = {**sweeps[1], "recall": "high"}
    for recs, needles in (
        ([runs[0], bad_run], ["x.jsonl:2", "run record", "'summary'"]),
        ([sweeps[0], bad_sweep], ["x.jsonl:2", "sweep record", "wrong type"]),
    ):
        path = write_lines(tmp_path / "x.jsonl", recs)
        code, _, err = cli(capsys, "report", str(path))
        line = one_line(err)
        assert code == 2 and all(n in line for n in needles), line
    # what diff reads: a run's per-stage samples, a sweep point's index
    missing = dict(runs[0])
    del missing["samples_ns"]["embed"]
    no_index = dict(sweeps[0])
    del no_index["index"]
    for rec, needle in ((missing, "'embed'"), (no_index, "'index'")):
        path = write_lines(tmp_path / "y.jsonl", [runs[1], rec])
        code, _, err = cli(capsys, "diff", str(path), str(path))
        line = one_line(err)
        assert code == 2 and "y.jsonl:2" in line and needle in line, line


@pytest.mark.parametrize(
    "line",
    ["[" * 100_000 + "]" * 100_000, '{"kind": "run", "n": ' + "7" * 5000 + "}"],
    ids=["nested-100000-deep", "5000-digit-integer"],
)
def test_pathological_json_lines_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    for command in ("report", "diff"):
        code, _, err = cli(capsys, command, str(path), *([str(path)] if command == "diff" else []))
        assert code == 2 and "p.jsonl:1" in one_line(err)


# ---------------------------------------------------------------- 9. a run that stopped early


def test_report_marks_a_run_that_stopped_early(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = lines_of(made["run"])
    stopped = recs[1]
    stopped["label"] = "http-run"
    stopped["config"]["run"]["queries"] = 4000
    stopped["error"] = "TransportError: the http far side exited (exit code -9)"
    path = write_lines(tmp_path / "s.jsonl", [recs[0], stopped])
    code, out, err = cli(capsys, "report", str(path))
    assert code == 0, err
    assert "http-run [stopped early]" in out
    assert (
        f"http-run: STOPPED EARLY after {stopped['requests']} of 4,000 requests: "
        "TransportError: the http far side exited" in out
    )


# ---------------------------------------------------------------- 11. Ctrl-C


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


#: Ctrl-C ends a command within the CLI's 1.5 s grace (INTERRUPT_GRACE_S); the bound here
#: only tells "ended" from "hung" on a loaded 2-core machine, it is not a timing claim.
SLACK_S = 6.0


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _interrupt(
    procs: list[subprocess.Popen[bytes]], argv: list[str], ready: Any
) -> tuple[int, str, float, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragbench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(),
        start_new_session=True,  # a group of its own: the fixture can clean up whatever is left
    )
    procs.append(proc)
    deadline = time.monotonic() + 120
    while not ready(proc):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never got going"
        time.sleep(0.1)
    kids = _descendants(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    time.sleep(0.5)  # children wind down when the parent's end closes their stdin
    return proc.returncode, err.decode(), took, [k for k in kids if _alive(k)]


def test_ctrl_c_ends_a_run_with_child_servers(
    made: dict[str, Path], started: list[subprocess.Popen[bytes]]
) -> None:
    cfg = made["dir"] / "stub.toml"
    cfg.write_text(CONFIG.replace("queries = 12", "queries = 1000000"))
    argv = ["run", "-c", str(cfg), "--set", 'generate.backend="stub"']
    argv += ["--set", 'transport.backend="http"', "--set", "generate.base_ms=1"]

    def ready(proc: subprocess.Popen[bytes]) -> bool:  # both child servers are up
        return len(_descendants(proc.pid)) >= 2 and time.sleep(1.0) is None

    code, err, took, left = _interrupt(started, argv, ready)
    assert code == 130, err
    assert one_line(err) == "ragbench: interrupted; records already written are kept"
    assert took < SLACK_S, took
    assert left == []


def test_ctrl_c_ends_a_sweep_and_keeps_finished_records(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "s.jsonl"
    argv = ["sweep", "--n", "20000", "--dim", "32", "--index", "flat,hnsw,lsh"]
    argv += ["--param", "ef=16,32,64,128,256,512", "--queries", "3000", "--out", str(out)]
    code, err, took, left = _interrupt(
        started, argv, lambda p: out.exists() and out.stat().st_size > 0
    )
    assert code == 130, err
    assert one_line(err) == "ragbench: interrupted; records already written are kept"
    assert took < SLACK_S, took
    assert left == []
    kept = read_records(out)
    assert kept and kept[0]["index"] == "flat"


def test_ctrl_c_ends_a_compare(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    argv = ["compare", "--n", "2k", "--dim", "16", "--index", "flat,lsh", "--transport", "grpc"]
    argv += ["--queries", "1000000"]

    def ready(proc: subprocess.Popen[bytes]) -> bool:
        return len(_descendants(proc.pid)) >= 1 and time.sleep(1.5) is None

    code, err, took, left = _interrupt(started, argv, ready)
    assert code == 130, err
    assert one_line(err) == "ragbench: interrupted; records already written are kept"
    assert took < SLACK_S, took
    assert left == []


def test_progress_bar_descriptions_are_not_markup() -> None:
    import io

    from rich.console import Console

    from ragbench import progress
    from ragbench.cli.bars import RichReporter

    buf = io.StringIO()
    reporter = RichReporter(Console(file=buf, force_terminal=True, width=120))
    with progress.installed(reporter), progress.task("statistics of docs[v2] [bold]", 4) as advance:
        advance(2)
        reporter._bar.refresh()
    assert "statistics of docs[v2] [bold]" in buf.getvalue()
