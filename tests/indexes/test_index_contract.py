"""The index contract (ragbench.indexes.contract) as a new backend meets it.

Two backends from outside ragbench, installed the way a user installs one
(an entry point in the group ``ragbench.indexes``, found on ``PYTHONPATH``):
the how-to's example (``docs/how-to/examples/sq_index.py``, on the public
base classes) and one written from the ``Index`` Protocol alone. Both run in
``ragbench sweep``; the contract tests collect the second and skip, by
capability name, everything it does not declare.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import index_contract
import numpy as np
import pytest

import ragbench as rb
from ragbench._registry import BUILTIN_INDEXES
from ragbench.errors import ConfigError, IndexFileError, UnsupportedOperationError
from ragbench.indexes import builds, persist
from ragbench.live_writes import StreamOptions, run_stream
from ragbench.results.records import read_records

ROOT = Path(__file__).resolve().parents[2]

#: A backend written from the Index Protocol alone: no base class, no capability.
PROTOCOL_ONLY = """
import numpy as np


class BruteIndex:
    name = "protocol-only"
    input_kind = "vectors"
    query_params = frozenset()

    def __init__(self, dim=None, metric="ip", **build_params):
        self.metric, self.dim, self.build_params = metric, dim, dict(build_params)
        self._x = np.empty((0, dim or 1), np.float32)

    def build(self, data):
        self._x = np.ascontiguousarray(data, dtype=np.float32)

    def search(self, queries, k, **params):
        scores = np.atleast_2d(np.asarray(queries, np.float32)) @ self._x.T
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return ids.astype(np.int64), np.take_along_axis(scores, ids, axis=1)

    def memory_bytes(self):
        return self._x.nbytes

    @property
    def ntotal(self):
        return len(self._x)
"""


def install_plugins(folder: Path) -> dict[str, str]:
    """Both backends as an installed distribution's entry points; the env that finds them."""
    (folder / "protocol_only.py").write_text(PROTOCOL_ONLY)
    dist = folder / "contract_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: contract-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[ragbench.indexes]\n"
        "sq8-example = sq_index:ScalarQuantizerIndex\n"
        "protocol-only = protocol_only:BruteIndex\n"
    )
    path = os.pathsep.join([str(folder), str(index_contract.EXAMPLES), str(ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.slow
def test_plugins_run_in_sweep_and_a_silent_backend_is_determinism_unknown(tmp_path: Path) -> None:
    env = install_plugins(tmp_path)
    out = tmp_path / "sweep.jsonl"
    res = subprocess.run(
        [
            sys.executable, "-m", "ragbench", "sweep", "--index", "sq8-example,protocol-only",
            "--n", "2000", "--dim", "32", "--queries", "20", "--out", str(out),
        ],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recs = {r["index"]: r for r in read_records(out)}
    assert set(recs) == {"sq8-example", "protocol-only"}
    # the example declares what its builds promise (BaseIndex: one thread, deterministic)
    assert recs["sq8-example"]["build_info"]["deterministic"] is True
    assert recs["sq8-example"]["recall"] >= 0.9
    # the Protocol-only one says nothing: unknown, not stamped deterministic
    assert recs["protocol-only"]["build_info"]["deterministic"] is None
    assert recs["protocol-only"]["recall"] == 1.0  # brute force
    assert "1 of unknown determinism" in " ".join(res.stdout.split())


@pytest.mark.slow
def test_contract_tests_skip_by_name_what_a_protocol_only_backend_lacks(tmp_path: Path) -> None:
    env = install_plugins(tmp_path)
    files = [
        str(ROOT / "tests" / "indexes" / f)
        for f in ("test_index_filters.py", "test_index_writes.py")
    ]
    res = subprocess.run(
        [
            sys.executable, "-m", "pytest", *files, "-q", "-rs", "-p", "no:cacheprovider",
            "-p", "no:randomly", "-k", "protocol-only", "--rootdir", str(ROOT),
        ],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    text = res.stdout + res.stderr
    assert "error" not in text.lower().split("short test summary")[-1], text[-3000:]
    assert res.returncode == 0, text[-3000:]
    assert "protocol-only does not declare FilteredIndex" in text
    assert "protocol-only does not declare WritableIndex" in text
    assert " passed" not in text.splitlines()[-1]  # every case of it skipped, none run


def test_deleting_backends_are_what_the_classes_declare() -> None:
    names = rb.indexes.deleting_backends()
    assert index_contract.EXAMPLE in names  # registered in code, declares delete_mode
    for name in rb.indexes.names():
        try:
            cls = rb.indexes.registry.factory(name)
        except ImportError:
            continue
        assert (name in names) == rb.indexes.can_delete(cls), name
    assert set(rb.indexes.writable_backends()) >= set(names)
    idx = rb.indexes.create("faiss-hnsw", dim=8)
    idx.build(np.eye(8, dtype=np.float32))
    with pytest.raises(UnsupportedOperationError, match=f"can: {', '.join(names)}$"):
        idx.delete([1])


def test_stream_deletes_on_any_backend_that_declares_delete() -> None:
    ds = rb.datasets.load("synthetic", n=600, dim=16, n_queries=10, seed=2)
    x, q = ds.vectors, ds.query_vectors_precomputed
    assert x is not None and q is not None
    opts = StreamOptions(
        index=index_contract.EXAMPLE, delete_rate=50, insert_rate=50, duration=0.3,
        checkpoints=1, qps=50, search_threads=1, seed=1,
    )  # fmt: skip
    recs = run_stream(x, q, "ip", opts)
    assert recs and recs[-1]["deleted_returned"] == 0
    with pytest.raises(
        ConfigError, match=f"use one of {', '.join(rb.indexes.deleting_backends())}"
    ):
        run_stream(x, q, "ip", StreamOptions(index="faiss-hnsw", delete_rate=10))


def test_backend_without_persistence_is_not_cached_and_cannot_be_loaded(tmp_path: Path) -> None:
    class Plain:  # the Index Protocol alone
        name, input_kind, metric, query_params = "plain", "vectors", "ip", frozenset()

        def __init__(self) -> None:
            self.build_params: dict[str, object] = {}
            self.n = 0

        def build(self, data: np.ndarray) -> None:
            self.n = len(data)

        def search(self, queries: np.ndarray, k: int, **params: object) -> tuple:
            return np.zeros((len(queries), k), np.int64), np.zeros((len(queries), k), np.float32)

        def memory_bytes(self) -> int:
            return 0

        @property
        def ntotal(self) -> int:
            return self.n

    index = Plain()
    assert isinstance(index, rb.indexes.Index)
    assert not isinstance(index, rb.indexes.PersistentIndex | rb.indexes.DeclaresBuild)
    built = builds.build(index, np.ones((3, 4), np.float32))
    assert built.index is index and index.build_record["deterministic"] is None  # type: ignore[attr-defined]
    # the example declares PersistentIndex: saved and loaded by its public restore
    example = rb.indexes.create(index_contract.EXAMPLE, dim=16)
    vectors = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    example.build(vectors)
    example.save(tmp_path / "sq.rbi", data=vectors)  # type: ignore[attr-defined]
    loaded = rb.indexes.load(tmp_path / "sq.rbi")
    np.testing.assert_array_equal(
        loaded.search(vectors[:5], 3)[0], example.search(vectors[:5], 3)[0]
    )
    rb.indexes.register("plain-test", Plain)
    try:
        header = dict(persist.read_index_header(tmp_path / "sq.rbi"))
        header["backend"] = "plain-test"
        payload = (tmp_path / "sq.rbi").read_bytes()[-header["payload"]["bytes"] :]
        persist.write_index_file(tmp_path / "plain.rbi", header, payload)
        with pytest.raises(IndexFileError, match="does not support loading saved indexes"):
            rb.indexes.load(tmp_path / "plain.rbi")
    finally:
        rb.indexes.registry.unregister("plain-test")


def test_docs_show_the_example_file_and_counts_made_from_the_classes() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    page_dir = ROOT / "docs" / "how-to"
    page = (page_dir / "writing-a-backend.md").read_text(encoding="utf-8")
    shown = docs_hooks.expand(page, page_dir)
    assert (index_contract.EXAMPLES / "sq_index.py").read_text(encoding="utf-8").strip() in shown
    table = docs_hooks.index_capabilities_markdown()
    shipped = set(BUILTIN_INDEXES)
    deleting = [n for n in rb.indexes.deleting_backends() if n in shipped]
    filtering = [n for n in rb.indexes.filtering_backends() if n in shipped]
    assert table.startswith(f"{len(shipped)} index backends ship with ragbench: {len(filtering)} ")
    assert f", {len(deleting)} `delete`" in table
    for name in deleting:
        assert any(
            line.startswith(f"| `{name}` |") and "| yes (" in line for line in table.splitlines()
        )
    assert "<!-- gen: index-capabilities -->" in (page_dir / "indexes.md").read_text(
        encoding="utf-8"
    )
