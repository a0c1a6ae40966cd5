"""Saved files and attribute values of the embedded vector-database engines, under faults.

usearch, qdrant-edge, lancedb and chroma index files with a field changed
(and the payload checksum recomputed, so only the engine-level checks can
catch it) load correctly or raise a ``ragbench.errors`` error, never crash
or answer wrongly; LanceDB and pgvector refuse attribute names and values
they cannot store, naming the attribute. Cases that could crash run in a
child process, so a segfault fails the test instead of ending pytest.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pgshared
import pytest

import ragbench as rb
from ragbench.attributes import mask_of
from ragbench.errors import ConfigError, IndexFileError

HERE = Path(__file__).resolve().parents[1]  # tests/, where the fuzz script lives
RAGBENCH = str(Path(sys.executable).with_name("ragbench"))
_PREFIX = struct.Struct("<14sHQ")


def run_cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAGBENCH, *argv], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def rewrite_payload(path: Path, patch: Callable[[bytes], bytes]) -> None:
    """Change ``path``'s payload in place with ``patch`` and recompute the header's checksum."""
    raw = path.read_bytes()
    _, version, hlen = _PREFIX.unpack_from(raw, 0)
    header = json.loads(raw[_PREFIX.size : _PREFIX.size + hlen])
    payload = patch(raw[_PREFIX.size + hlen :])
    header["payload"] = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(_PREFIX.pack(b"ragbench-index", version, len(blob)) + blob + payload)


# --------------------------------------------------------------------------- usearch


def test_cli_refuses_a_usearch_file_whose_metric_byte_was_changed(tmp_path: Path) -> None:
    """Metric kind 0 in usearch's head (checksum recomputed) crashed the first search (exit 139)."""
    toml = tmp_path / "c.toml"
    toml.write_text(
        textwrap.dedent(
            """
            [dataset]
            name = "synthetic"
            n = 600
            dim = 16
            n_queries = 20
            [embed]
            backend = "hashing"
            dim = 16
            [retrieve]
            backend = "usearch"
            [run]
            queries = 20
            warmup = 0
            k = 5
            k_candidates = 5
            """
        )
    )
    index_file = tmp_path / "u.index"
    argv = ["run", "-c", str(toml), "--set", f"retrieve.index_file={index_file}"]
    first = run_cli(*argv)
    assert first.returncode == 0, first.stderr[-3000:]

    def metric_zero(payload: bytes) -> bytes:
        rows, cols = struct.unpack_from("<II", payload, 0)
        head = 8 + rows * cols
        assert payload[head : head + 7] == b"usearch"
        data = bytearray(payload)
        data[head + 13] = 0  # kind_metric: after magic (7 B) and the version (3 x u16)
        return bytes(data)

    rewrite_payload(index_file, metric_zero)
    assert_one_line_exit_2(run_cli(*argv), "usearch", "metric kind is 0")


# --------------------------------------------------------------------------- every engine's header


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("engine", ["usearch", "qdrant-edge", "lancedb", "chroma"])
def test_every_saved_file_field_changed_loads_correctly_or_is_refused(
    engine: str, tmp_path: Path
) -> None:
    """Each header field (and usearch's own head and graph header) altered: a clear error or a
    load that answers as an exact search under the metric it reports; never a crash.

    Before the checks, usearch's metric kind 0 segfaulted, a header metric of
    ``cosine`` or ``l2`` on a usearch or chroma ``ip`` file loaded and answered
    under ``ip`` (top-1 agreed with the claimed metric for 0.53 of queries).
    """
    argv = [sys.executable, str(HERE / "engine_file_fuzz.py"), engine, str(tmp_path)]
    if engine == "qdrant-edge":
        argv.append("--quick")  # every Qdrant load takes about a second
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, (proc.returncode, lines[-5:], proc.stderr[-2000:])
    wrong = [line for line in lines if "WRONG" in line]
    assert not wrong
    assert lines[-1].endswith(" cases, 0 wrong")
    assert int(lines[-1].split()[0]) >= 40


# --------------------------------------------------------------------------- qdrant-edge


def _retar(payload: bytes, suffix: str, change: Callable[[bytes], bytes]) -> bytes:
    """The tar ``payload`` with the member whose name ends with ``suffix`` changed."""
    out = io.BytesIO()
    changed = 0
    with (
        tarfile.open(fileobj=io.BytesIO(payload)) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src.getmembers():
            fh = src.extractfile(member) if member.isfile() else None
            data = fh.read() if fh is not None else None
            if data is not None and member.name.endswith(suffix):
                data = change(data)
                member.size = len(data)
                changed += 1
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    assert changed == 1, f"{changed} members end with {suffix}"
    return out.getvalue()


def _flip(data: bytes) -> bytes:
    out = bytearray(data)
    for i in range(0, len(out), 7):
        out[i] ^= 0x41
    return bytes(out)


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.fixture(scope="module")
def qdrant_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    x = np.random.default_rng(5).standard_normal((300, 16)).astype(np.float32)
    index: Any = rb.indexes.create("qdrant-edge", dim=16, metric="l2")
    index.build(x)
    path = tmp_path_factory.mktemp("qdrant") / "q.index"
    index.save(path, data=x)
    index.close()
    loaded: Any = rb.indexes.load(path)
    ids, _ = loaded.search(x, 1)
    loaded.close()
    assert (ids[:, 0] == np.arange(300)).all()  # the untouched file answers exactly
    return path, x


@pytest.mark.parametrize(
    ("member", "change", "message"),
    [
        # self-recall@1 of the loaded index was 0.00 and 0.50 before the vector hash
        ("/vector_storage/matrix.dat", _flip, "stored vectors differ from those saved"),
        ("/vector_storage/matrix.dat", _truncate, "no stored vector"),
        # a Rust panic (PanicException, a BaseException) went through `except Exception`
        ("/id_tracker.mappings", _flip, "Qdrant cannot load the shard"),
    ],
    ids=["vectors-changed", "vectors-truncated", "mappings-panic"],
)
def test_qdrant_edge_changed_members_with_a_recomputed_checksum_are_refused(
    qdrant_file: tuple[Path, np.ndarray],
    tmp_path: Path,
    member: str,
    change: Callable[[bytes], bytes],
    message: str,
) -> None:
    src, _ = qdrant_file
    path = tmp_path / "changed.index"
    path.write_bytes(src.read_bytes())
    rewrite_payload(path, lambda payload: _retar(payload, member, change))
    with pytest.raises(IndexFileError, match=message):
        rb.indexes.load(path)


def test_qdrant_edge_file_without_the_vector_hash_is_refused(
    qdrant_file: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    from ragbench.indexes.persist import read_index_file, write_index_file

    header, payload = read_index_file(qdrant_file[0])
    for key in ("magic", "format_version", "payload"):
        header.pop(key)
    header["extra"] = {}
    write_index_file(tmp_path / "old.index", header, bytes(payload))
    with pytest.raises(IndexFileError, match="no hash of the stored vectors"):
        rb.indexes.load(tmp_path / "old.index")


def test_qdrant_edge_file_leaves_out_zero_preallocation_and_loads_the_same_folder(
    tmp_path: Path,
) -> None:
    """A 300 x 16 file was 70 MB: Qdrant pre-allocates 32 MiB payload pages and 1 MiB trackers
    (zeros, sparse on disk) in each of the shard's two segments, and the tar stored every byte."""
    from ragbench.indexes import qdrant_edge_index
    from ragbench.indexes.persist import read_index_file

    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    q = rng.standard_normal((20, 16)).astype(np.float32)
    index: Any = rb.indexes.create("qdrant-edge", dim=16, metric="l2")
    index.build(x)
    ids, scores = index.search(q, 10)
    path = tmp_path / "q.index"
    index.save(path, data=x)
    _, payload = read_index_file(path)
    with tarfile.open(fileobj=io.BytesIO(bytes(payload))) as tar:
        members = len(tar.getmembers())
    # what the index needs: the vectors and a level-0 graph of 2 * M four-byte links a point,
    # each a few times over, and a tar's headers and padding (< 4 KiB a member)
    need = x.nbytes + x.shape[0] * 2 * index.build_params["M"] * 4
    assert len(payload) < 4 * need + 4096 * members

    # unpacked, the folder is the saved one byte for byte (the zeros restored as holes)
    qdrant_edge_index.extract_restoring_zero_tails(payload, str(tmp_path / "out"))
    saved, out = Path(index._folder) / "shard", tmp_path / "out" / "shard"
    files = sorted(p.relative_to(saved) for p in saved.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert all((saved / f).read_bytes() == (out / f).read_bytes() for f in files)
    index.close()

    loaded: Any = rb.indexes.load(path)
    got_ids, got_scores = loaded.search(q, 10)
    loaded.close()
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_scores, scores)


@pytest.mark.parametrize("size", [str(1 << 40), "-5", "4k"])
def test_qdrant_edge_member_size_it_cannot_have_is_refused(
    qdrant_file: tuple[Path, np.ndarray], tmp_path: Path, size: str
) -> None:
    """A zero tail's recorded size above the bound, or not a size, is an IndexFileError."""
    path = tmp_path / "changed.index"
    path.write_bytes(qdrant_file[0].read_bytes())

    def resize(payload: bytes) -> bytes:
        out = io.BytesIO()
        with (
            tarfile.open(fileobj=io.BytesIO(payload)) as src,
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
        ):
            for member in src.getmembers():
                data = src.extractfile(member) if member.isfile() else None
                if member.name.endswith("/tracker.dat") and "RAGBENCH.size" in member.pax_headers:
                    member.pax_headers = {**member.pax_headers, "RAGBENCH.size": size}
                dst.addfile(member, data)
        return out.getvalue()

    rewrite_payload(path, resize)
    with pytest.raises(IndexFileError, match="gives a size .* it cannot have"):
        rb.indexes.load(path)


def _nudge(data: bytes) -> bytes:
    """Bit 6 flipped in 50 bytes a third into the file (Lance's data: inside the vectors)."""
    out = bytearray(data)
    for k in range(50):
        out[len(out) // 3 + 4 * k] ^= 0x40
    return bytes(out)


def test_lancedb_changed_vectors_with_a_recomputed_checksum_are_refused(tmp_path: Path) -> None:
    """Lance's data files carry no checksum: the changed table loaded and was searched."""
    x = np.random.default_rng(6).standard_normal((300, 16)).astype(np.float32)
    index: Any = rb.indexes.create("lancedb", dim=16, metric="l2")
    index.build(x)
    path = tmp_path / "l.index"
    index.save(path, data=x)
    index.close()
    loaded: Any = rb.indexes.load(path)  # the untouched file loads
    loaded.close()
    rewrite_payload(path, lambda payload: _retar(payload, ".lance", _nudge))
    with pytest.raises(IndexFileError, match="stored vectors differ from those saved"):
        rb.indexes.load(path)


# --------------------------------------------------------------------------- attribute values


def _nul_dataset(folder: Path, field: str = "label") -> Path:
    """A JSONL corpus whose ``field`` holds ``a<NUL>b`` on every other row, and its queries."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        words = " ".join(f"w{int(w)}" for w in rng.integers(0, 30, 8))
        rows.append({"id": f"d{i}", "text": words, field: "a\0b" if i % 2 else "c"})
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    queries = [
        {"id": f"q{i}", "text": f"w{i} w{i + 1}", "filter": {field: "a\0b"}} for i in range(4)
    ]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    return folder


def _filtered_run(data: Path, backend: str) -> list[str]:
    """``ragbench run`` of ``data``'s queries with their own filters on ``backend``."""
    toml = data / f"{backend}.toml"
    toml.write_text(
        textwrap.dedent(
            f"""
            [dataset]
            path = "{data}"
            [embed]
            backend = "hashing"
            [retrieve]
            backend = "{backend}"
            filter = {{ from = "queries" }}
            [run]
            queries = 4
            warmup = 0
            k = 5
            k_candidates = 5
            """
        )
    )
    return ["run", "-c", str(toml)]


def test_cli_refuses_a_nul_in_a_lancedb_attribute_value(tmp_path: Path) -> None:
    """LanceDB's SQL filter matched no row holding ``a<NUL>b``: recall 0.00, exit 0 (flat 1.00)."""
    data = _nul_dataset(tmp_path)
    flat = run_cli(*_filtered_run(data, "flat"))
    assert flat.returncode == 0, flat.stderr[-3000:]
    proc = run_cli(*_filtered_run(data, "lancedb"))
    assert_one_line_exit_2(proc, "'label'", "NUL")


@pytest.mark.parametrize("backend", ["lancedb", "pgvector"])
def test_a_nul_attribute_value_is_refused_before_the_corpus_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The refusal came after the corpus was embedded (3 min for 3 000 passages with MiniLM)
    and, for pgvector, after the server started; now the corpus vectors are never computed."""
    data = _nul_dataset(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    proc = run_cli(*_filtered_run(data, backend))
    assert_one_line_exit_2(proc, f"index {backend!r}: attribute 'label' holds a NUL", "row 1")
    assert not list(cache.glob("arrays/corpus-*")), "the corpus was embedded first"


def test_compare_refuses_its_third_configuration_before_any_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grid whose 3rd configuration (lancedb) cannot hold a NUL value. Old code: the early
    check ran for the first configuration of each embedder only, so flat's and hnsw's set-up
    (the corpus embedded, two indexes built) came before lancedb's refusal."""
    data = _nul_dataset(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(cache))
    config = _filtered_run(data, "flat")[-1]
    proc = run_cli("compare", "-c", config, "--index", "flat,hnsw,lancedb", "--queries", "4")
    assert_one_line_exit_2(proc, "index 'lancedb': attribute 'label' holds a NUL", "row 1")
    assert not list(cache.glob("arrays/corpus-*")), "the corpus was embedded first"


@pytest.mark.parametrize("name", ["a.b", "_rowid"])
def test_cli_refuses_a_lancedb_attribute_name_it_cannot_hold(tmp_path: Path, name: str) -> None:
    """``a.b`` and ``_rowid`` gave tracebacks from Lance."""
    rows = [{"id": f"d{i}", "text": f"w{i} w{i % 7}", name: i % 3} for i in range(40)]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    queries = [{"id": f"q{i}", "text": f"w{i}", "filter": {name: 1}} for i in range(4)]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    proc = run_cli(*_filtered_run(tmp_path, "lancedb"))
    assert_one_line_exit_2(proc, repr(name))


def _index(backend: str) -> Any:
    params = {"dsn": pgshared.dsn(), "index": "flat"} if backend == "pgvector" else {}
    return rb.indexes.create(backend, dim=8, **params)


#: names each backend cannot hold: PostgreSQL's system columns (CREATE TABLE fails on
#: them; ``oid`` was one before PostgreSQL 12); Lance's ``_`` columns (``_rowid`` raised),
#: struct paths (``a.b`` raised) and ragbench's backtick quoting
REFUSED = {
    "pgvector": ["xmin", "ctid", "oid", "tableoid", "cmax", "XMIN"],
    "lancedb": ["_rowid", "_rowaddr", "_score", "a.b", "a`b"],
}
CASES = [(b, name) for b, names in REFUSED.items() for name in names]


@pytest.mark.integration
@pytest.mark.parametrize(("backend", "name"), CASES)
def test_unrepresentable_attribute_names_are_refused_naming_them(backend: str, name: str) -> None:
    index = _index(backend)
    try:
        with pytest.raises(ConfigError, match=f"attribute name {re.escape(repr(name))}"):
            index.set_attributes({name: np.arange(40, dtype=np.int64) % 3})
    finally:
        index.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("backend", "name"), [("lancedb" if b == "pgvector" else "pgvector", n) for b, n in CASES]
)
def test_names_the_other_backend_refuses_filter_exactly(backend: str, name: str) -> None:
    """What one backend refuses, the other holds: nothing is refused beyond need."""
    x = np.random.default_rng(1).standard_normal((40, 8)).astype(np.float32)
    columns = {name: np.arange(40, dtype=np.int64) % 3}
    ids, _ = index_search_where(backend, x, columns, {name: 1}, np.ones(40, dtype=bool))
    assert set(ids.tolist()) == set(np.flatnonzero(mask_of(columns, {name: 1})).tolist())


def index_search_where(
    backend: str, x: np.ndarray, columns: dict[str, np.ndarray], spec: dict[str, Any], allow: Any
) -> tuple[np.ndarray, np.ndarray]:
    """ids found by ``where=spec`` (an all-allowed mask beside: the SQL alone selects)."""
    index = _index(backend)
    try:
        index.set_attributes(columns)
        index.build(x)
        ids, scores = index.search(x[:1], x.shape[0], where=spec, filter=allow)
    finally:
        index.close()
    return ids[0][ids[0] >= 0], scores


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["pgvector", "lancedb"])
def test_a_nul_in_an_attribute_value_is_refused_naming_it(backend: str) -> None:
    x = np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32)
    index = _index(backend)
    try:
        with pytest.raises(ConfigError, match=r"attribute 'label' holds a NUL character \(row 1"):
            index.set_attributes({"label": np.array(["c", "a\0b"] * 20)})
        index.set_attributes({"label": np.array(["c", "ab"] * 20)})  # no NUL: accepted
        index.build(x)
    finally:
        index.close()


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["pgvector", "lancedb"])
def test_a_filter_value_with_a_nul_matches_what_mask_of_says(backend: str) -> None:
    """No stored value holds a NUL, so such a filter value matches no row, as in ``mask_of``."""
    x = np.random.default_rng(3).standard_normal((40, 8)).astype(np.float32)
    columns = {"label": np.array(["a", "ab", "c", "a b"] * 10)}
    allow = np.ones(40, dtype=bool)
    for spec in ({"label": "a\0b"}, {"label": ["a\0b", "c"]}, {"label": ["ab\0", "a"]}):
        ids, _ = index_search_where(backend, x, columns, spec, allow)
        assert set(ids.tolist()) == set(np.flatnonzero(mask_of(columns, spec)).tolist()), spec
