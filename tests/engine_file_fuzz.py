"""Child process of ``tests/faults/test_faults_engine_files.py``: load altered index files, one engine.

``python tests/engine_file_fuzz.py ENGINE FOLDER [--quick]`` builds a small index
with ``ENGINE`` (``usearch``, ``qdrant-edge``, ``lancedb``, ``chroma``),
saves it, and loads a copy for every case: each field of the ragbench
header changed (the payload checksum recomputed where the payload changes),
and for ``usearch`` each field of usearch's own head and graph header. A
case passes when ``rb.indexes.load`` raises a ``ragbench.errors`` error, or
when the loaded index answers like an exact search under the metric it
reports. ``--quick``: each field dropped, null and set to its first other
value only (for ``qdrant-edge``, whose every load takes about a second).
Prints ``case -> outcome`` per case (``WRONG`` for a failure) and flushes
before each load, so a crash names the case that caused it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import ragbench as rb
from ragbench.errors import RagbenchError

N, DIM, NQ = 300, 16, 30
_PREFIX = struct.Struct("<14sHQ")


def read(path: Path) -> tuple[dict[str, Any], bytes, int]:
    """(header, payload, version) of an index file."""
    raw = path.read_bytes()
    _, version, hlen = _PREFIX.unpack_from(raw, 0)
    return json.loads(raw[24 : 24 + hlen]), raw[24 + hlen :], version


def write(
    path: Path, header: dict[str, Any], payload: bytes, version: int = 1, late: Any = None
) -> None:
    """An index file with ``header`` (its payload size and sha256 recomputed, then ``late``
    applied to it) and ``payload``."""
    header = dict(header)
    if isinstance(header.get("payload"), dict):
        header["payload"] = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    if late is not None:
        late(header, bytearray())
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(_PREFIX.pack(b"ragbench-index", version, len(blob)) + blob + payload)


Edit = Callable[[dict[str, Any], bytearray], None]


def _set(path: tuple[str, ...], value: Any) -> Edit:
    def edit(header: dict[str, Any], _payload: bytearray) -> None:
        node = header
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _drop(key: str) -> Edit:
    def edit(header: dict[str, Any], _payload: bytearray) -> None:
        header.pop(key, None)

    return edit


def header_cases(header: dict[str, Any], quick: bool) -> Iterator[tuple[str, Edit]]:
    """Every field of the ragbench header: dropped, null, another type, other values."""
    others: dict[str, list[Any]] = {
        "backend": ["usearch", "qdrant-edge", "lancedb", "chroma", "hnsw", "flat", "nope"],
        "metric": ["ip", "cosine", "l2", "hamming", ""],
        "dim": [DIM - 1, DIM + 1, 1, 2**31, 2**63, -1, 0, 16.0, "16"],
        "count": [N - 1, N + 1, 1, 0, -1, 2**64],
        "input_kind": ["texts", "vectors", 3],
        "payload_format": [
            "usearch.Index.save",
            "qdrant-edge shard folder (tar)",
            "lancedb table folder (tar)",
            "x",
        ],
        "library": [{"name": "x", "version": "0"}, "x"],
        "extra": [{}, {"x": 1}, [], "x"],
        "data": [{"fingerprint": "0" * 64, "source": "x"}, {"fingerprint": 3}, "x"],
        "ragbench_version": ["0.0.0", 3],
        "magic": ["ragbench-indeX"],
        "format_version": [2, 0, "1"],
        "build_params": [{}, {"x": 1}, [], "x"],
    }
    for key in sorted(header):
        if key != "payload":
            yield f"drop {key}", _drop(key)
            yield f"{key}=null", _set((key,), None)
        for value in [v for v in others.get(key, []) if v != header[key]][: 1 if quick else None]:
            yield f"{key}={value!r}", _set((key,), value)
    params = header["build_params"]
    alternatives: dict[str, list[Any]] = {
        "M": [2, 8, 32, 4096, 0, 1, 10**9, "16", None],
        "ef_construction": [1, 10, 1000, 0, 2**40, None],
        "dtype": ["f32", "f16", "i8", "f64", None],
        "full_scan_threshold": [1, 10**9, 0, None],
        "index_type": ["flat", "ivf_flat", "ivf_pq", "ivf_hnsw_sq", "x", None],
        "num_partitions": [1, 7, -1, None],
        "num_sub_vectors": [1, 4, -1, None],
        "ef_search": [1, 500, 0, None],
    }
    for key in sorted(params):
        yield f"drop build_params.{key}", _drop_param(key)
        values = [v for v in alternatives.get(key, [None, "x", -1]) if v != params[key]]
        for value in values[: 2 if quick else None]:
            yield f"build_params.{key}={value!r}", _set(("build_params", key), value)
    # (after the checksum is recomputed: see main)
    yield "late payload.bytes+1", _set(("payload", "bytes"), header["payload"]["bytes"] + 1)
    yield "late payload.sha256=0", _set(("payload", "sha256"), "0" * 64)


def _drop_param(key: str) -> Edit:
    def edit(header: dict[str, Any], _payload: bytearray) -> None:
        header["build_params"].pop(key, None)

    return edit


# usearch's serialized index: vectors header (rows, cols: u32), the vectors, the
# 64-byte dense head, then the graph header (size, connectivity, connectivity_base,
# max_level, entry_slot: u64).
_USEARCH_HEAD = [  # (name, offset in the head, struct format)
    ("magic", 0, "7s"),
    ("version_major", 7, "<H"),
    ("version_minor", 9, "<H"),
    ("version_patch", 11, "<H"),
    ("kind_metric", 13, "B"),
    ("kind_scalar", 14, "B"),
    ("kind_key", 15, "B"),
    ("kind_compressed_slot", 16, "B"),
    ("count_present", 17, "<Q"),
    ("count_deleted", 25, "<Q"),
    ("dimensions", 33, "<Q"),
    ("multi", 41, "B"),
]
_USEARCH_GRAPH = ["size", "connectivity", "connectivity_base", "max_level", "entry_slot"]


def usearch_cases(payload: bytes) -> Iterator[tuple[str, Edit]]:
    """Each field of usearch's head and graph header set to other values (checksum recomputed)."""
    rows, cols = struct.unpack_from("<II", payload, 0)
    head = 8 + rows * cols
    fields = [(f"head.{n}", head + o, f) for n, o, f in _USEARCH_HEAD]
    fields += [(f"graph.{n}", head + 64 + 8 * i, "<Q") for i, n in enumerate(_USEARCH_GRAPH)]
    fields += [("matrix.rows", 0, "<I"), ("matrix.cols", 4, "<I")]
    for name, at, fmt in fields:
        (now,) = struct.unpack_from(fmt, payload, at)
        if fmt == "7s":
            values: list[Any] = [b"usearcH", b"\0" * 7]
        else:
            top = 2 ** (8 * struct.calcsize(fmt)) - 1
            values = sorted({0, 1, 2, now - 1, now + 1, now ^ 0x80, top} - {now})
            if name == "head.kind_metric":
                values = sorted(set(range(256)) - {now})  # every metric kind byte
            elif name == "head.kind_scalar":
                values = sorted(set(range(64)) - {now})
            values = [v for v in values if 0 <= v <= top]
        for value in values:
            yield f"usearch {name}={value!r}", _poke(at, fmt, value)
    # the entry point at a node below the top level
    yield "usearch graph.max_level+1", _poke(head + 64 + 24, "<Q", None)


def _poke(at: int, fmt: str, value: Any) -> Edit:
    def edit(_header: dict[str, Any], payload: bytearray) -> None:
        v = value
        if v is None:
            (v,) = struct.unpack_from(fmt, payload, at)
            v += 1
        struct.pack_into(fmt, payload, at, v)

    return edit


def _exact(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    if metric == "cosine":
        x64 = x64 / np.linalg.norm(x64, axis=1, keepdims=True)
        q64 = q64 / np.linalg.norm(q64, axis=1, keepdims=True)
    scores: np.ndarray = q64 @ x64.T
    if metric == "l2":
        scores = -((q64**2).sum(1)[:, None] - 2 * scores + (x64**2).sum(1))
    return scores


def check_answers(index: Any, x: np.ndarray, q: np.ndarray) -> str | None:
    """None when ``index`` answers as an exact search under its own metric, else what differs."""
    if index.dim != DIM or index.ntotal != N:
        return f"loaded with dim={index.dim} count={index.ntotal}"
    try:
        ids, scores = index.search(q, 5)
    except RagbenchError as exc:
        return f"search raised {type(exc).__name__}: {exc}"
    s = _exact(x, q, index.metric)
    best = np.argmax(s, axis=1)
    hit = ids[:, 0] == best
    if hit.mean() < 0.9:
        return f"top-1 agrees with an exact {index.metric} search for {hit.mean():.2f} of queries"
    want = s[np.arange(len(q)), best][hit]
    if not np.allclose(scores[hit, 0], want, rtol=1e-3, atol=1e-3):
        return f"top-1 scores differ from exact {index.metric} scores"
    return None


def main(engine: str, folder: str, quick: bool = False) -> int:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((N, DIM)) * rng.uniform(0.5, 2.0, (N, 1))).astype(np.float32)
    q = x[:NQ] + np.float32(0.05) * rng.standard_normal((NQ, DIM)).astype(np.float32)
    built = rb.indexes.create(engine, dim=DIM, metric="ip")
    built.build(x)
    base = Path(folder) / f"{engine}.rbi"
    built.save(base, data=x)
    getattr(built, "close", lambda: None)()
    header, payload, version = read(base)
    cases = list(header_cases(header, quick))
    if engine == "usearch":
        cases += list(usearch_cases(payload))
    wrong = 0
    for name, edit in cases:
        h, p = copy.deepcopy(header), bytearray(payload)
        late = name.startswith("late ")
        if not late:
            edit(h, p)
        path = Path(folder) / "case.rbi"
        write(path, h, bytes(p), version, edit if late else None)
        print(f"{name} -> ", end="", flush=True)
        try:
            loaded = rb.indexes.load(path)
        except RagbenchError as exc:
            print(f"refused: {type(exc).__name__}: {exc}", flush=True)
            continue
        problem = check_answers(loaded, x, q)
        getattr(loaded, "close", lambda: None)()
        wrong += problem is not None
        print("loaded, correct" if problem is None else f"WRONG: {problem}", flush=True)
    print(f"{len(cases)} cases, {wrong} wrong", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--quick" in sys.argv[3:]))
