"""Bad inputs of issue 28 (second attack), each run the way a user meets it: the ``ragbench`` CLI.

Each is one clear line and exit 2 (or, for Ctrl-C, 130), never a traceback:
a ``known_datasets.json`` entry that is not an object, a shipped vectors
sidecar whose ``parts`` is not an object of objects, ``report`` on a file
that says it is regular but cannot be read (``/proc/self/mem``), load
records whose counts no run produces, and Ctrl-C on ``ragbench stub-llm``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ragbench import datasets
from ragbench.errors import DatasetError

ROOT = Path(__file__).resolve().parents[2]
LOAD_RECORDS = ROOT / "docs" / "findings" / "data" / "load-overload-20k.jsonl"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def ragbench(*argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
        stdin=subprocess.DEVNULL,
    )


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


# ---------------------------------------------------------------- known_datasets.json


@pytest.mark.parametrize("entry", [["/tmp/x.jsonl"], "/tmp/x.jsonl", 7, {"n": 3}, {"path": 5}])
def test_a_known_datasets_entry_that_is_not_an_object_with_a_path_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: Any
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    known = cache / "known_datasets.json"
    known.write_text(json.dumps({"mine": entry}))
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    with pytest.raises(DatasetError, match="entry 'mine' is not an object"):
        datasets.load("mine")
    for argv in (["datasets"], ["run", "-c", "default", "--set", 'dataset.name="mine"']):
        proc = ragbench(*argv, RAGBENCH_CACHE_DIR=str(cache))
        assert_one_line_exit_2(proc, str(known), "'mine'", "delete")


# ---------------------------------------------------------------- shipped vectors sidecar


def _tiny_bundled(root: Path) -> Path:
    from ragbench import embedders
    from ragbench.datasets.shipped import write_shipped

    folder = root / "tiny"
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as fh:
        for i in range(60):
            fh.write(json.dumps({"id": f"d{i}", "text": f"passage {i} about item {i % 7}"}) + "\n")
    with (folder / "queries.jsonl").open("w") as fh:
        for i in range(4):
            fh.write(json.dumps({"id": f"q{i}", "text": f"item {i}"}) + "\n")
    ds = datasets.load("tiny")
    emb = embedders.create("hashing", dim=32)
    arrays = {"corpus": emb.embed(ds.corpus.texts), "queries": emb.embed(ds.queries.texts)}
    write_shipped(folder, "hashing", emb.fingerprint, (ds.corpus_hash, ds.queries_hash), arrays)
    return folder


@pytest.mark.parametrize(
    "patch",
    [
        lambda parts: ["corpus", "queries"],  # the attack's case: the names, as a list
        lambda parts: {**parts, "corpus": ["vectors-hashing-corpus.npy"]},
        lambda parts: {**parts, "corpus": {**parts["corpus"], "shape": "3x32"}},
        lambda parts: {**parts, "queries": {**parts["queries"], "file": "../../etc/passwd"}},
    ],
    ids=["parts-a-list", "part-a-list", "shape-a-string", "file-outside-the-folder"],
)
def test_a_sidecar_whose_parts_are_malformed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patch: Any
) -> None:
    monkeypatch.setenv("RAGBENCH_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))
    folder = _tiny_bundled(tmp_path / "datasets")
    side = folder / "vectors-hashing.json"
    meta = json.loads(side.read_text())
    meta["parts"] = patch(meta["parts"])
    side.write_text(json.dumps(meta))
    argv = ["compare", "--dataset", "tiny", "--embed", "hashing", "--set", "embed.dim=32"]
    argv += ["--index", "flat", "--queries", "2", "--warmup", "0"]
    proc = ragbench(
        *argv,
        RAGBENCH_DATASETS_DIR=str(tmp_path / "datasets"),
        RAGBENCH_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert_one_line_exit_2(proc, str(side), "parts must be an object")


# ---------------------------------------------------------------- report on what cannot be read


def test_report_on_a_file_that_fails_when_read_is_one_line() -> None:
    """``/proc/self/mem`` is a "regular file" of size 0 whose read fails (EIO)."""
    proc = ragbench("report", "/proc/self/mem")
    assert_one_line_exit_2(proc, "cannot read results file /proc/self/mem")
    proc = ragbench("diff", "/proc/self/mem", str(LOAD_RECORDS))
    assert_one_line_exit_2(proc, "/proc/self/mem")


def test_a_results_file_is_read_to_its_size_limit_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``/proc`` file says 0 bytes and holds more: the limit counts the bytes read, not the size."""
    import ragbench.results.records as records

    status = Path("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 200
    monkeypatch.setattr(records, "RESULTS_LIMIT", 200)
    with pytest.raises(DatasetError, match="over the 200 bytes a results file may have"):
        records.read_records(status)


# ---------------------------------------------------------------- load records' counts


def _load_file(tmp_path: Path, **changes: Any) -> Path:
    lines = LOAD_RECORDS.read_text().splitlines()
    rec = json.loads(lines[1])
    rec.update(changes)
    path = tmp_path / "load.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    return path


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        ({"completed": -5}, ["'completed' is -5", "negative"]),
        ({"timed_out": -1}, ["'timed_out' is -1"]),
        ({"achieved_qps": -560.0}, ["'achieved_qps' is -560.0"]),
        ({"workers": -2}, ["'workers' is -2"]),
        ({"scheduled": 10}, ["'scheduled' is 10", "inconsistent"]),
        ({"rejected": 10**6}, ["'scheduled'", "rejected 1000000", "inconsistent"]),
    ],
)
def test_load_records_with_counts_no_run_produces_are_refused_naming_the_field(
    tmp_path: Path, changes: dict[str, Any], needles: list[str]
) -> None:
    path = _load_file(tmp_path, **changes)
    proc = ragbench("report", str(path))
    assert_one_line_exit_2(proc, f"{path}:2", "load record field", *needles)
    good = ragbench("report", str(_load_file(tmp_path)))
    assert good.returncode == 0, good.stderr


# ---------------------------------------------------------------- Ctrl-C on stub-llm


def test_ctrl_c_on_stub_llm_exits_130_with_the_one_line() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragbench", "stub-llm", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(),
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # printed once it listens
        assert "listening on http://127.0.0.1:" in line, line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.decode().strip() == "ragbench: interrupted; records already written are kept"


def test_stub_llm_still_exits_0_when_its_stdin_ends() -> None:
    """The stub generator's child stops that way: not an interruption."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragbench", "stub-llm", "--port", "0", "--exit-on-stdin-eof"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.PIPE,
        env=_env(),
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert "listening" in proc.stdout.readline().decode()
        time.sleep(0.2)
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            pipe.close()
    assert proc.returncode == 0
