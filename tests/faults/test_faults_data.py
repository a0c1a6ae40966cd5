"""Faults in index files, caches, sizes and the stub LLM: each refused in one clear line.

Every test here is a finding of a reliability attack (ragbench issue #17): a
file or an input that used to give silently wrong numbers, unbounded memory,
a hang or a traceback. Files are damaged the way an attacker would: with
valid checksums, consistent sidecars and crafted headers.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench import datasets, indexes
from ragbench.datasets.cache import ArrayCache
from ragbench.errors import ConfigError, DatasetError, IndexFileError
from ragbench.generators.stub_server import SERVER_OPTIONS, StubModel, StubServer
from ragbench.indexes.persist import MAGIC, read_index_file, write_index_file
from ragbench.validate import load_npy

RAGBENCH = str(Path(sys.executable).with_name("ragbench"))
DEFAULT_TOML = str(Path(__file__).resolve().parents[2] / "bench" / "configs" / "default.toml")
SMALL = {"name": "synthetic", "n": 1200, "dim": 32, "n_queries": 30, "seed": 0}
SYN = {"n": 1200, "dim": 32, "n_queries": 30}


def config(index_file: Path, **tables: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "dataset": dict(SMALL),
        "embed": {"backend": "hashing", "dim": 32},
        "run": {"queries": 20, "warmup": 1, "k": 10, "k_candidates": 10},
        "retrieve": {"backend": "hnsw", "index_file": str(index_file)},
        "serialize": {"backend": "json"},
        "transport": {"backend": "inproc"},
    }
    for table, value in tables.items():
        cfg[table] = {**cfg.get(table, {}), **value}
    return cfg


def run_pipeline(cfg: dict[str, Any]) -> rb.Pipeline:
    with rb.Pipeline(cfg) as pipe:
        report = pipe.run()
    pipe.last_recall = report.mean_recall  # type: ignore[attr-defined]
    return pipe


def run_cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAGBENCH, *argv], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def rewrite_payload(src: Path, dst: Path, patch: Any) -> None:
    """Write ``dst``: ``src``'s header, its payload changed by ``patch(bytearray)``, a new checksum."""
    header, payload = read_index_file(src)
    data = bytearray(payload)
    patch(data)
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    write_index_file(dst, header, bytes(data))


def raw_index_file(path: Path, header_blob: bytes, payload: bytes = b"") -> None:
    """An index file with any header bytes (not produced by write_index_file)."""
    path.write_bytes(struct.pack("<14sHQ", MAGIC, 1, len(header_blob)) + header_blob + payload)


def vectors(n: int = 300, dim: int = 16, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# --------------------------------------------------------------------------- stale index files


def test_an_index_file_of_another_embedder_is_refused_naming_both(tmp_path: Path) -> None:
    index_file = tmp_path / "x.index"
    built = run_pipeline(config(index_file))
    assert index_file.exists() and "index_save" in built.setup_ns
    assert built.last_recall > 0.5  # type: ignore[attr-defined]

    # the same file reused: loaded, not rebuilt, same answers
    again = run_pipeline(config(index_file))
    assert "index_load" in again.setup_ns and "index_build" not in again.setup_ns
    assert again.last_recall == built.last_recall  # type: ignore[attr-defined]

    other = config(index_file, embed={"backend": "precomputed"})
    other["embed"].pop("dim")
    with rb.Pipeline(other) as pipe, pytest.raises(IndexFileError) as err:
        pipe.setup()
    message = str(err.value)
    assert "embedded with hashing(dim=32)" in message  # what the file was built for
    assert "embedded with precomputed" in message  # what it is used with
    assert "delete the file" in message


def test_an_index_file_of_another_seed_is_refused(tmp_path: Path) -> None:
    index_file = tmp_path / "x.index"
    first = config(index_file)
    first["embed"] = {"backend": "precomputed"}
    run_pipeline(first)
    cfg = config(index_file, dataset={"seed": 1})
    cfg["embed"] = {"backend": "precomputed"}
    with rb.Pipeline(cfg) as pipe, pytest.raises(IndexFileError) as err:
        pipe.setup()
    assert "synthetic-n1200-d32-q30-s0" in str(err.value)
    assert "synthetic-n1200-d32-q30-s1" in str(err.value)


def test_the_cli_refuses_a_foreign_index_file_in_one_line(tmp_path: Path) -> None:
    index_file = tmp_path / "x.index"
    toml = tmp_path / "c.toml"
    toml.write_text(
        textwrap.dedent(
            f"""
            [dataset]
            name = "synthetic"
            n = 1200
            dim = 32
            n_queries = 30
            [embed]
            backend = "hashing"
            dim = 64
            [retrieve]
            backend = "flat"
            index_file = "{index_file}"
            [run]
            queries = 5
            warmup = 1
            """
        )
    )
    first = run_cli("run", "-c", str(toml))
    assert first.returncode == 0, first.stderr
    proc = run_cli("run", "-c", str(toml), "--set", "dataset.seed=1")
    assert_one_line_exit_2(proc, "index_file", "-s0", "-s1")


def test_an_index_file_without_a_data_fingerprint_is_refused(tmp_path: Path) -> None:
    index_file = tmp_path / "x.index"
    run_pipeline(config(index_file))
    # an index saved by an older ragbench: no "data" record in its header
    rewrite = tmp_path / "old.index"
    header, payload = read_index_file(index_file)
    for key in ("magic", "format_version", "payload", "data"):
        header.pop(key)
    write_index_file(rewrite, header, bytes(payload))
    assert indexes.load(rewrite).saved_data is None  # type: ignore[attr-defined]
    with rb.Pipeline(config(rewrite)) as pipe, pytest.raises(IndexFileError, match="rebuilt"):
        pipe.setup()


def test_save_with_data_records_a_fingerprint_that_load_returns(tmp_path: Path) -> None:
    x = vectors()
    index = indexes.create("flat", dim=16)
    index.build(x)
    index.save(tmp_path / "f.index", data=x, source="my vectors")
    loaded = indexes.load(tmp_path / "f.index")
    saved = loaded.saved_data  # type: ignore[attr-defined]
    assert saved == {"fingerprint": indexes.data_fingerprint(x), "source": "my vectors"}
    y = x.copy()
    y[7, 3] += 1e-3
    assert indexes.data_fingerprint(y) != saved["fingerprint"]
    assert indexes.data_fingerprint(["a", "b"]) != indexes.data_fingerprint(["ab"])


# --------------------------------------------------------------------------- unsearchable files


def hnsw_file(tmp_path: Path, x: np.ndarray) -> tuple[Any, Path]:
    index = indexes.create("hnsw", dim=x.shape[1], M=8)
    index.build(x)
    path = tmp_path / "h.index"
    index.save(path, data=x)
    return index, path


def test_an_hnsw_file_with_every_element_deleted_is_refused(tmp_path: Path) -> None:
    x = vectors()
    index, _ = hnsw_file(tmp_path, x)
    for i in range(x.shape[0]):
        index._index.mark_deleted(i)  # what a foreign hnswlib user could have saved
    path = tmp_path / "deleted.index"
    index.save(path, data=x)
    with pytest.raises(IndexFileError, match="300 of the 300 items are marked deleted"):
        indexes.load(path)


def test_an_hnsw_file_with_nan_vectors_is_refused(tmp_path: Path) -> None:
    x = vectors()
    _, path = hnsw_file(tmp_path, x)
    header, payload = read_index_file(path)
    raw = bytes(payload)
    first = x[0].tobytes()
    assert raw.count(first) == 1  # the stored copy of row 0

    def nan_row(data: bytearray) -> None:
        at = raw.index(first)
        data[at : at + len(first)] = np.full(16, np.nan, np.float32).tobytes()

    rewrite_payload(path, tmp_path / "nan.index", nan_row)
    with pytest.raises(IndexFileError, match="NaN"):
        indexes.load(tmp_path / "nan.index")


@pytest.mark.parametrize("backend", ["flat", "faiss-hnsw", "ivf"])
def test_a_faiss_file_with_nan_vectors_is_refused(tmp_path: Path, backend: str) -> None:
    x = vectors()
    index = indexes.create(backend, dim=16)
    index.build(x)
    path = tmp_path / "f.index"
    index.save(path, data=x)
    raw = bytes(read_index_file(path)[1])
    row = x[5].tobytes()
    assert row in raw

    def nan_row(data: bytearray) -> None:
        at = raw.index(row)
        data[at : at + 4] = np.float32(np.nan).tobytes()

    rewrite_payload(path, tmp_path / "nan.index", nan_row)
    with pytest.raises(IndexFileError, match="NaN or inf"):
        indexes.load(tmp_path / "nan.index")


def test_a_faiss_file_claiming_gigabytes_of_codes_allocates_nothing(tmp_path: Path) -> None:
    x = vectors(n=20_000, dim=64)
    index = indexes.create("flat", dim=64)
    index.build(x)
    path = tmp_path / "f.index"
    index.save(path, data=x)
    # IndexFlat: fourcc, d, ntotal, 2 dummies, is_trained, metric (37 bytes), then the
    # codes' length in 4-byte words: claim 3 GB of codes in a 5 MB file.
    claim = 3 * 2**30 // 4
    rewrite_payload(
        path,
        tmp_path / "big.index",
        lambda d: d.__setitem__(slice(37, 45), struct.pack("<Q", claim)),
    )
    assert (tmp_path / "big.index").stat().st_size < 6 * 2**20
    probe = textwrap.dedent(
        f"""
        import ragbench as rb
        try:
            rb.indexes.load({str(tmp_path / "big.index")!r})
        except rb.errors.IndexFileError as exc:
            print("refused:", exc)
        # VmHWM is this process's own peak: ru_maxrss would also count the forking parent's RSS
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
        print("maxrss_kb", int(hwm.split()[1]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert "refused:" in proc.stdout and "claims" in proc.stdout, proc.stdout + proc.stderr
    maxrss_kb = int(proc.stdout.split("maxrss_kb")[1])
    assert maxrss_kb < 1024 * 1024  # faiss would have zeroed 3 GB first


@pytest.mark.parametrize(
    ("offset", "value", "why"),
    [
        (4, struct.pack("<i", 17), "d=17"),  # dimension unlike the ragbench header
        (8, struct.pack("<q", 10**12), "ntotal=1000000000000"),
    ],
)
def test_a_faiss_header_unlike_the_ragbench_header_is_refused(
    tmp_path: Path, offset: int, value: bytes, why: str
) -> None:
    x = vectors()
    index = indexes.create("flat", dim=16)
    index.build(x)
    index.save(tmp_path / "f.index", data=x)
    rewrite_payload(
        tmp_path / "f.index",
        tmp_path / "bad.index",
        lambda d: d.__setitem__(slice(offset, offset + len(value)), value),
    )
    with pytest.raises(IndexFileError, match=why):
        indexes.load(tmp_path / "bad.index")


# --------------------------------------------------------------------------- caches and .npy files


def crafted_npy(path: Path, shape: tuple[int, ...], body: bytes = b"\0" * 4096) -> None:
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    text = repr(header).encode("latin-1")
    pad = 64 - (10 + len(text) + 1) % 64
    path.write_bytes(
        b"\x93NUMPY\x01\x00"
        + struct.pack("<H", len(text) + pad + 1)
        + text
        + b" " * pad
        + b"\n"
        + body
    )


def test_a_npy_header_claiming_40_gb_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "big.npy"
    crafted_npy(path, (10**10,))
    assert path.stat().st_size < 8192
    with pytest.raises(DatasetError, match="header claims"):
        load_npy(path, "cache entry", DatasetError)
    # a dataset given as a .npy file goes through the same check
    crafted_npy(tmp_path / "queries.npy", (10**5, 10**5))
    with pytest.raises(DatasetError, match="header claims"):
        datasets.load(path)


def entry_of(ds: Any, what: str) -> Path:
    (event,) = [e for e in ds.cache_events if e.what.startswith(what)]
    return Path(event.path)


def test_a_cache_entry_with_too_few_rows_is_rebuilt(tmp_path: Path) -> None:
    ds = datasets.load("synthetic", seed=11, **SYN)
    full = ds.corpus_vectors("hashing", dim=32)
    npy = entry_of(ds, "corpus_vectors")
    # a consistent sidecar for a shorter array: sha256, size, shape, dtype all agree
    ArrayCache(npy.parent.parent).save(npy.stem, full[:-7])
    again = datasets.load("synthetic", seed=11, **SYN)
    got = again.corpus_vectors("hashing", dim=32)
    assert got.shape == full.shape and np.array_equal(got, full)
    (event,) = again.cache_events
    assert not event.hit and "1193 rows, expected 1200" in event.note


def test_a_cache_entry_with_a_40_gb_header_is_rebuilt(tmp_path: Path) -> None:
    ds = datasets.load("synthetic", seed=12, **SYN)
    full = ds.corpus_vectors("hashing", dim=32)
    npy = entry_of(ds, "corpus_vectors")
    crafted_npy(npy, (10**10,))
    side = npy.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["bytes"] = npy.stat().st_size
    meta["sha256"] = hashlib.sha256(npy.read_bytes()).hexdigest()
    side.write_text(json.dumps(meta))
    again = datasets.load("synthetic", seed=12, **SYN)
    assert np.array_equal(again.corpus_vectors("hashing", dim=32), full)
    assert "header claims" in again.cache_events[0].note


def test_cached_neighbour_ids_out_of_range_are_rebuilt(tmp_path: Path) -> None:
    spec = {**SYN, "seed": 13}
    ds = datasets.load("synthetic", **spec)
    truth = ds.exact_neighbors(10)
    npy = entry_of(ds, "exact_neighbors")
    bad = truth.copy()
    bad[3, 2] = 10**9
    ArrayCache(npy.parent.parent).save(npy.stem, bad)
    again = datasets.load("synthetic", **spec)
    assert np.array_equal(again.exact_neighbors(10), truth)
    assert "outside the corpus" in again.cache_events[-1].note


def test_shipped_vectors_with_a_crafted_header_are_a_dataset_error(tmp_path: Path) -> None:
    from ragbench.datasets.shipped import find_shipped, write_shipped

    write_shipped(
        tmp_path, "hashing", "fp", ("c", "q"), {"corpus": vectors(), "queries": vectors(5)}
    )
    crafted_npy(tmp_path / "vectors-hashing-corpus.npy", (10**6, 10**4))
    found = find_shipped(tmp_path, "hashing")
    assert found is not None
    with pytest.raises(DatasetError, match="header claims"):
        found.load("corpus")


# --------------------------------------------------------------------------- FIFOs and deep JSON


def fails_without_blocking(fn: Any, exc: type[Exception], match: str) -> None:
    """``fn()`` raises ``exc`` within 20 s (run on a thread, so a hang fails the test)."""
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            fn()
        except BaseException as caught:  # noqa: BLE001 - handed to the test thread
            box["exc"] = caught

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        # unblock the reader so the thread ends: open the FIFO for writing once
        pytest.fail("reading blocked on a FIFO")
    assert isinstance(box.get("exc"), exc), box
    assert match in str(box["exc"])


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pipe.index"
    os.mkfifo(path)
    yield path
    # a writer end opened non-blocking releases any reader a regression left waiting
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


def test_a_fifo_is_refused_as_an_index_file(fifo: Path) -> None:
    fails_without_blocking(lambda: indexes.load(fifo), IndexFileError, "a FIFO")
    with pytest.raises(ConfigError, match="not a regular file"):
        rb.Pipeline(config(fifo))


def test_a_fifo_in_place_of_a_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    ds = datasets.load("synthetic", seed=14, **SYN)
    full = ds.corpus_vectors("hashing", dim=32)
    npy = entry_of(ds, "corpus_vectors")
    side = npy.with_suffix(".json")
    side.unlink()
    os.mkfifo(side)
    again = datasets.load("synthetic", seed=14, **SYN)
    box: list[np.ndarray] = []
    thread = threading.Thread(
        target=lambda: box.append(again.corpus_vectors("hashing", dim=32)), daemon=True
    )
    thread.start()
    thread.join(30)
    if thread.is_alive():
        fd = os.open(side, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("reading the cache blocked on a FIFO")
    assert np.array_equal(box[0], full)
    assert "a FIFO" in again.cache_events[0].note


def test_a_fifo_in_place_of_shipped_vectors_is_a_dataset_error(tmp_path: Path) -> None:
    from ragbench.datasets.shipped import find_shipped, write_shipped

    write_shipped(
        tmp_path, "hashing", "fp", ("c", "q"), {"corpus": vectors(), "queries": vectors(5)}
    )
    part = tmp_path / "vectors-hashing-corpus.npy"
    part.unlink()
    os.mkfifo(part)
    found = find_shipped(tmp_path, "hashing")
    assert found is not None
    fails_without_blocking(lambda: found.load("corpus"), DatasetError, "a FIFO")


def test_a_deeply_nested_index_header_is_an_index_file_error(tmp_path: Path) -> None:
    blob = b'{"magic":"ragbench-index","x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    raw_index_file(tmp_path / "deep.index", blob)
    with pytest.raises(IndexFileError, match="nested deeper"):
        indexes.load(tmp_path / "deep.index")


def test_a_deeply_nested_sidecar_is_rebuilt(tmp_path: Path) -> None:
    ds = datasets.load("synthetic", seed=15, **SYN)
    full = ds.corpus_vectors("hashing", dim=32)
    side = entry_of(ds, "corpus_vectors").with_suffix(".json")
    side.write_text("[" * 100_000 + "]" * 100_000)
    again = datasets.load("synthetic", seed=15, **SYN)
    assert np.array_equal(again.corpus_vectors("hashing", dim=32), full)
    assert "nested deeper" in again.cache_events[0].note


def test_a_deeply_nested_known_datasets_file_is_a_dataset_error() -> None:
    path = Path(os.environ["RAGBENCH_CACHE_DIR"]) / "known_datasets.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    before = path.read_bytes() if path.exists() else None
    path.write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    try:
        with pytest.raises(DatasetError, match="nested deeper.*delete"):
            datasets.names()
        proc = run_cli("datasets")
        assert_one_line_exit_2(proc, "known_datasets.json")
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)


def test_a_minhash_header_whose_extra_is_not_a_table_is_refused(tmp_path: Path) -> None:
    index = indexes.create("minhash-lsh", num_perm=16)
    texts = [f"passage number {i} about topic {i % 7}" for i in range(50)]
    index.build(texts)
    index.save(tmp_path / "m.index", data=texts)
    header, payload = read_index_file(tmp_path / "m.index")
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    for extra in ([1, 2], "scheme", 7):
        header["extra"] = extra
        write_index_file(tmp_path / "bad.index", header, bytes(payload))
        with pytest.raises(IndexFileError, match="'extra' is a"):
            indexes.load(tmp_path / "bad.index")


# --------------------------------------------------------------------------- saving


def test_two_threads_saving_one_path_both_succeed(tmp_path: Path) -> None:
    x = vectors(n=3000, dim=32)
    index = indexes.create("flat", dim=32)
    index.build(x)
    path = tmp_path / "shared.index"
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def save() -> None:
        barrier.wait()
        try:
            for _ in range(10):
                index.save(path, data=x)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert indexes.load(path).ntotal == 3000
    assert [p.name for p in tmp_path.iterdir()] == ["shared.index"]  # no temp file left


def test_an_index_file_in_a_missing_directory_fails_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "x.index"
    with pytest.raises(ConfigError, match="does not exist"):
        rb.Pipeline(config(missing))
    toml = tmp_path / "c.toml"
    toml.write_text(f'[retrieve]\nbackend = "flat"\nindex_file = "{missing}"\n')
    proc = run_cli("run", "-c", str(toml), "--dataset", "synthetic")
    assert_one_line_exit_2(proc, "does not exist")
    assert "index_save" not in proc.stdout and proc.stdout == ""


def test_an_index_file_in_an_unwritable_directory_fails_before_any_work() -> None:
    # /proc refuses new files even to root (a chmod'ed directory would not stop root)
    with pytest.raises(ConfigError, match="cannot create a file in /proc"):
        rb.Pipeline(config(Path("/proc/ragbench-test.index")))


# --------------------------------------------------------------------------- sizes and counts


@pytest.mark.parametrize("value", [float("nan"), float("-inf"), float("inf"), -1.0, "10"])
def test_a_bad_cache_ttl_is_a_config_error(tmp_path: Path, value: Any) -> None:
    cfg = config(tmp_path / "x.index", cache={"backend": "lru", "ttl_s": value})
    with pytest.raises(ConfigError, match="ttl_s"):
        rb.Pipeline(cfg)


def test_a_nan_ttl_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("run", "-c", DEFAULT_TOML, "--set", "cache.ttl_s=nan")
    assert_one_line_exit_2(proc, "ttl_s")


@pytest.mark.parametrize("backend", ["faiss-hnsw", "hnsw"])
def test_an_ef_beyond_int32_is_a_config_error(backend: str) -> None:
    index = indexes.create(backend, dim=16)
    index.build(vectors())
    with pytest.raises(ConfigError, match=r"ef must be in \[1, 2147483647\]"):
        index.search(vectors(2), 5, ef=2**31)
    with pytest.raises(ConfigError, match="2147483647"):
        indexes.create(backend, dim=16, ef_construction=2**40)
    ids, _ = index.search(vectors(2), 5, ef=2**31 - 1)  # the largest accepted still works
    # ... and answers as a beam as wide as the index does (faiss's is lowered to ntotal)
    assert np.array_equal(ids, index.search(vectors(2), 5, ef=300)[0])


@pytest.mark.parametrize(
    "params",
    [{"n": 10**12}, {"n_queries": 10**12}, {"dim": 10**8}],
)
def test_synthetic_sizes_beyond_memory_are_refused_first(params: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match="memory"):
        datasets.synthetic(**{"n": 1000, "dim": 16, "n_queries": 10, **params})


def test_synthetic_sizes_beyond_memory_on_the_command_line_are_one_line() -> None:
    proc = run_cli("compare", "--dataset", "synthetic", "--n", "1e12", "--index", "flat")
    assert_one_line_exit_2(proc, "memory")


@pytest.mark.parametrize(
    ("key", "value"), [("queries", 10**30), ("warmup", 10**20), ("repeat", 10**10)]
)
def test_request_counts_no_machine_can_run_are_refused(
    tmp_path: Path, key: str, value: int
) -> None:
    with pytest.raises(ConfigError, match=key):
        rb.Pipeline(config(tmp_path / "x.index", run={key: value}))


def test_queries_times_repeat_beyond_the_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="queries x repeat"):
        rb.Pipeline(config(tmp_path / "x.index", run={"queries": 10**6, "repeat": 10**4}))


def test_request_counts_whose_records_exceed_memory_are_refused(tmp_path: Path) -> None:
    from ragbench.pipeline.samples import RECORD_BYTES
    from ragbench.validate import available_memory

    free = available_memory()
    assert free is not None  # /proc/meminfo on Linux
    queries = 2 * free // RECORD_BYTES  # twice the memory; under the 10**9 cap below 1.5 TB
    assert queries <= 10**9
    with pytest.raises(ConfigError, match="memory"):
        rb.Pipeline(config(tmp_path / "x.index", run={"queries": queries}))
    with rb.Pipeline(config(tmp_path / "x.index")) as pipe, pytest.raises(ConfigError):
        pipe.run(queries=queries // 2, repeat=2)


def test_huge_query_counts_on_the_command_line_are_one_line() -> None:
    proc = run_cli("run", "-c", DEFAULT_TOML, "--queries", "1" + "0" * 30, "--warmup", "0")
    assert_one_line_exit_2(proc, "queries")


# --------------------------------------------------------------------------- Ray


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_ray_address_fails_fast_in_one_line() -> None:
    from ragbench.executors import RayExecutor, check_reachable

    port = free_port()  # nothing listens there any more
    with pytest.raises(ConfigError, match="cannot reach Ray"):
        check_reachable(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="needs a host and a port"):
        check_reachable("ray://127.0.0.1")
    with pytest.raises(ConfigError, match="Connection refused"):
        RayExecutor(f"ray://127.0.0.1:{port}")
    proc = run_cli(
        "compare", "--dataset", "synthetic", "--n", "1k", "--index", "flat",
        "--executor", "ray", "--ray-address", f"ray://127.0.0.1:{port}",
    )  # fmt: skip
    assert_one_line_exit_2(proc, "cannot reach Ray")


# --------------------------------------------------------------------------- stub LLM limits


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer(
        ("127.0.0.1", 0),
        StubModel(base_ms=0, inter_token_ms=0, prefill_ms_per_1k_tokens=0),
        read_timeout_s=0.5,
        max_body_bytes=1000,
        max_connections=2,
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


def connect(server: StubServer) -> socket.socket:
    sock = socket.create_connection(server.server_address[:2], timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (10 s per recv, then the test fails)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_stalled_client_is_closed_after_the_read_timeout(stub: StubServer) -> None:
    with connect(stub) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert read_all(sock) == b""  # closed by the server, not by our 10 s recv timeout
    with connect(stub) as sock:
        body = b'{"prompt": "hello"}'
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n" + body
        )  # a body that stops short of its length
        assert read_all(sock) == b""


def test_a_slow_body_past_the_deadline_gets_408(stub: StubServer) -> None:
    import select

    with connect(stub) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n")
        for _ in range(50):  # a byte every 0.2 s: each recv within the 0.5 s timeout
            sock.sendall(b" ")
            if select.select([sock], [], [], 0.2)[0]:
                break  # the server answered (and stops reading)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]


def test_an_oversized_body_gets_413_without_being_read(stub: StubServer) -> None:
    with connect(stub) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 16777216\r\n\r\n"
        )  # headers only: the server must answer without waiting for 16 MB
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
    assert b"0..1000 bytes" in answer and b"Connection: close" in answer


def test_connections_beyond_the_cap_are_refused_with_503(stub: StubServer) -> None:
    held = [connect(stub), connect(stub)]
    try:
        for sock in held:  # both served: a request on each is answered
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        with connect(stub) as extra:
            answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
        assert b"Retry-After: 1" in answer and b"at most 2 connections" in answer
        assert stub.refused >= 1
    finally:
        for sock in held:
            sock.close()
    # once they are gone (closed by us, noticed by the server) a new one is served
    for _ in range(100):
        with connect(stub) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = read_all(sock)
        if answer.startswith(b"HTTP/1.1 200"):
            break
        time.sleep(0.05)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]


def test_the_stub_limits_are_options_of_the_command_line() -> None:
    flags = {opt.flag: opt for opt in SERVER_OPTIONS}
    assert {"--read-timeout-s", "--max-body-bytes", "--max-connections"} <= set(flags)
    proc = run_cli("stub-llm", "--help")
    assert proc.returncode == 0
    for flag in ("--read-timeout-s", "--max-body-bytes", "--max-connections"):
        assert flag in proc.stdout
    bad = run_cli("stub-llm", "--max-connections", "0")
    assert_one_line_exit_2(bad, "max_connections")


def test_the_stub_child_serves_with_its_limits() -> None:
    argv = [RAGBENCH, "stub-llm", "--port", "0", "--max-body-bytes", "100", "--exit-on-stdin-eof"]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = proc.stdout.readline()
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n"
                )
                assert read_all(sock).startswith(b"HTTP/1.1 413")
        finally:
            proc.stdin.close()
            assert proc.wait(20) == 0
