"""``usearch`` backend: usearch's HNSW graph (``pip install ragbench[vectordb]``).

Build parameters: ``M`` (usearch ``connectivity``, default 16),
``ef_construction`` (``expansion_add``, default 128), ``dtype`` (how usearch
stores the vectors: ``f32`` default, ``f16``, or ``i8`` quantization; the
queries are converted by usearch to the same type).
Query parameter: ``ef`` (``expansion_search``, default 64).

Metrics: ``ip`` → usearch ``ip`` (distance ``1 - dot``), ``cosine`` → ``cos``
(the corpus is normalized at build, usearch normalizes again), ``l2`` →
``l2sq`` (squared distance). Scores: ``1 - distance`` for ``ip``/``cosine``,
``-distance`` for ``l2``, as every ragbench backend.

``ef`` semantics: usearch keeps ``expansion_search`` on the index object;
``search`` sets it when it changes (to ``max(ef, k)``). Concurrent searches
with different ``ef`` values on one index therefore race, as for ``hnsw``.

Filtered search: ``post`` only. usearch's Python ``search`` takes no
predicate (the C++ ``filtered_search`` is not exposed in 2.26), and ragbench
keeps no float32 copy for ``pre`` (the stored vectors may be f16/i8).

Live writes: ``add`` = ``Index.add`` (usearch grows its capacity itself),
``delete`` = ``Index.remove`` (the node is marked removed and never returned;
memory is not freed). Both hold searches off (usearch may reallocate on add).

Files: ``save`` stores usearch's own serialization; ``load`` walks its layout
(sizes; the head's metric, scalar, key and slot kinds against an empty index
of the header's configuration, its count and dimensions; levels, keys, every
neighbour slot, finite vectors) before usearch reads it
(:func:`check_usearch_payload`): usearch trusts its bytes.

Search: the engines' reference (:meth:`~ragbench.indexes._embedded_engines.EngineIndex.search`
over :meth:`UsearchIndex._raw_search`); one float32 ``(1, dim)`` ``ip``/``l2`` query
of ``f32``/``f16`` storage is answered first by
:func:`~ragbench.indexes._fast_paths.usearch_one_query` (the engine-wrapper
target), which returns exactly what the reference returns.

Threads: builds and batch searches use ``ragbench.threads.get_threads()``; a
single query runs on the calling thread (``threads=1``).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import numpy as np

from .. import progress
from ..errors import ConfigError, IndexFileError
from ..threads import get_threads
from ._arrays import I64, build_chunks
from ._embedded_engines import EngineIndex, check_graph_params, import_engine, pad_rows
from ._fast_paths import usearch_one_query

__all__ = ["UsearchIndex"]

_METRIC = {"ip": "ip", "cosine": "cos", "l2": "l2sq"}
DTYPES = ("f32", "f16", "i8")
_subtract = np.subtract
_negative = np.negative
_ONE = np.ones((), dtype=np.float32)


def _usearch() -> Any:
    return import_engine("usearch", "usearch.index", "the usearch package")


class UsearchIndex(EngineIndex):
    """usearch HNSW graph; see the module docstring for ef, dtype, filters and threads."""

    name: ClassVar[str] = "usearch"
    library: ClassVar[str] = "usearch"
    payload_format: ClassVar[str] = "usearch.Index.save"
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 128, "dtype": "f32"}
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 64}
    filter_strategies: ClassVar[tuple[str, ...]] = ("post",)
    default_strategy: ClassVar[str] = "post"
    delete_mode: ClassVar[str | None] = "mark"
    contiguous_queries: ClassVar[bool] = True  # usearch reads rows as contiguous

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._index: Any = None
        self._ef = -1
        self._search_fn: Any = None
        # usearch_one_query's state for the current id snapshot (see _on_space), or
        # None where it cannot vouch for an answer (cosine, i8 storage).
        self._fast: tuple[Any, tuple[int, int], int, bool, np.ndarray | None] | None = None

    def search(
        self, queries: Any, k: int, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`EngineIndex.search`, the reference, after :func:`usearch_one_query`."""
        if filter is None and strategy is None:
            answer = usearch_one_query(self, queries, k, params)
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        return super().search(queries, k, filter, strategy, **params)

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        check_graph_params(owner, params, "ef_construction")
        if params["dtype"] not in DTYPES:
            raise ConfigError(
                f"{owner}: dtype={params['dtype']!r} is not one of {', '.join(DTYPES)}"
            )
        return params

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["ef"]

    def _new_index(self) -> Any:
        p = self.build_params
        return _usearch().Index(
            ndim=self.dim,
            metric=_METRIC[self.metric],
            dtype=p["dtype"],
            connectivity=p["M"],
            expansion_add=p["ef_construction"],
        )

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1; row ``i`` gets id ``i``."""
        vectors = self._corpus(data)

        def run() -> None:
            index = self._new_index()
            n = vectors.shape[0]
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start, stop in build_chunks(n):  # Ctrl-C is answered between calls
                    keys = np.arange(start, stop, dtype=np.uint64)
                    index.add(keys, vectors[start:stop], threads=get_threads())
                    advance(stop - start)
            self._set_index(index)

        self._timed_build(run)

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._search_fn = index._compiled.search_many
        self._ef = -1
        self._publish_built(len(index))

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        ef = max(int(compiled), k)
        if ef != self._ef:
            self._index.expansion_search = ef
            self._ef = ef
        n = q.shape[0]
        # usearch's compiled search_many, positionally (what Index.search calls after
        # its asserts; its Matches/BatchMatches wrappers are not needed here):
        # keys uint64 (n, k), distances float32 (n, k), found counts int64 (n,).
        keys, dist, counts = self._search_fn(q, k, False, 1 if n == 1 else get_threads())[:3]
        if self._similarity:
            _subtract(_ONE, dist, dist)
        else:
            _negative(dist, dist)
        ids = keys.view(I64)
        if counts.min() < k:
            # -1/-inf past each row's found count
            ids, dist = pad_rows(
                [ids[r, : int(c)] for r, c in enumerate(counts)],
                [dist[r, : int(c)] for r, c in enumerate(counts)],
                k,
            )
        return ids, dist

    def _on_space(self, space: Any) -> None:
        # Called with no search running (build, load, or inside a write's exclusive section).
        super()._on_space(space)
        self._fast = None
        # i8 storage quantizes the query (a NaN becomes a finite code); cosine
        # needs its zero-norm check: the reference answers both.
        if not self._cosine and self.build_params["dtype"] != "i8":
            self._fast = (
                self._search_fn,
                (1, self.dim),
                space.live,
                self._similarity,
                space.labels_ext(),
            )

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        self._index.add(positions.astype(np.uint64), vectors, threads=get_threads())

    def _lib_delete(self, positions: np.ndarray) -> None:
        self._index.remove(positions.astype(np.uint64))

    def memory_bytes(self) -> int:
        """Bytes of the graph and the stored vectors (usearch's ``serialized_length``).

        usearch's allocator reserves arenas in large steps beyond that
        (``Index.memory_usage``, in :meth:`info` as ``reserved_bytes``).
        """
        if self._index is None:
            raise self._not_built()
        return int(self._index.serialized_length)

    def extra_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": "usearch (in process)",
            "dtype": self.build_params["dtype"],
        }
        if self._index is not None:
            out["reserved_bytes"] = int(self._index.memory_usage)
        return out

    def _payload(self) -> bytes:
        if self._index is None:
            raise self._not_built()
        blob: bytes = self._index.save()
        return blob

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        count = header.get("count")
        if not isinstance(count, int) or count < 0:
            raise IndexFileError("usearch: header count is missing")
        p = self.build_params
        index = self._new_index()
        # usearch writes the kinds this configuration stands for into an empty
        # index's head: the file's head must carry the same ones
        expected = bytes(index.save())
        check_usearch_payload(payload, self.dim, count, p["M"], p["dtype"], expected)
        try:
            index.load(bytes(payload))
        except Exception as exc:  # usearch raises RuntimeError/ValueError on bad bytes
            raise IndexFileError(f"usearch: usearch cannot read the payload: {exc}") from None
        if index.ndim != self.dim or str(index.dtype).lower().split(".")[-1] != str(
            self.build_params["dtype"]
        ):
            raise IndexFileError(
                f"usearch: payload holds dim={index.ndim} dtype={index.dtype}, the header "
                f"says dim={self.dim} dtype={self.build_params['dtype']}"
            )
        keys = np.asarray(index.keys, dtype=np.uint64) if len(index) else np.empty(0, np.uint64)
        if not isinstance(count, int) or len(index) != count or not _identity_keys(keys):
            raise IndexFileError("usearch: payload keys are not the row ids 0..count-1")
        self._set_index(index)


def _identity_keys(keys: np.ndarray) -> bool:
    return bool(np.array_equal(np.sort(keys), np.arange(keys.size, dtype=np.uint64)))


_MATRIX = struct.Struct("<II")
# usearch 2.x dense head (64 bytes): magic, version (3 x u16), metric, scalar, key and
# slot kinds (u8 each), count_present, count_deleted, dimensions (u64), multi (bool).
_HEAD = struct.Struct("<7s3H4B3Q?")
_HEAD_SIZE = 64
# graph header: size, connectivity, connectivity_base, max_level, entry_slot (u64)
_GRAPH = struct.Struct("<5Q")
_BYTES_PER = {"f32": 4, "f16": 2, "i8": 1}


def check_usearch_payload(
    data: memoryview, dim: int, count: int, m: int, dtype: str, empty: bytes
) -> None:
    """Walk usearch's serialized layout; reject what it could mis-read.

    usearch trusts its bytes: a neighbour slot or level past the graph makes
    it read out of bounds, and ``load`` takes the metric and scalar kinds
    from the file's head (metric kind 0 crashed the first search; another
    valid kind answered under another metric). Sizes, the head (see
    :func:`_check_usearch_head`; ``empty`` is an empty index of the header's
    configuration, serialized), levels, keys and every neighbour slot are
    checked against the headers before usearch sees the bytes.
    """
    size = len(data)
    if size < _MATRIX.size:
        raise IndexFileError("usearch: payload is shorter than its vectors header")
    rows, cols = _MATRIX.unpack_from(data, 0)
    if rows != count or cols != dim * _BYTES_PER[dtype]:
        raise IndexFileError(
            f"usearch: payload holds {rows} x {cols} bytes of vectors, expected "
            f"{count} x {dim * _BYTES_PER[dtype]} ({dtype}, dim={dim})"
        )
    pos = _MATRIX.size + rows * cols
    if size < pos + _HEAD_SIZE + _GRAPH.size:
        raise IndexFileError("usearch: payload is truncated before its headers")
    if dtype != "i8":
        vectors = np.frombuffer(
            data, dtype="<f4" if dtype == "f32" else "<f2", count=rows * dim, offset=8
        )
        if not np.isfinite(vectors).all():
            raise IndexFileError("usearch: a stored vector holds NaN or inf: rebuild the index")
    _check_usearch_head(data, pos, count, dim, empty)
    graph = _GRAPH.unpack_from(data, pos + _HEAD_SIZE)
    n, conn, base, max_level, entry = graph
    if (n, conn, base) != (count, m, 2 * m) or max_level >= 64 or (n and entry >= n):
        raise IndexFileError("usearch: payload graph header does not match M or count")
    pos += _HEAD_SIZE + _GRAPH.size
    _check_usearch_nodes(data, pos, n, m, max_level, entry)


#: The head's fields that say how usearch reads the file, by their place in _HEAD.
_KINDS = {
    0: "magic",
    1: "major version",
    4: "metric kind",
    5: "scalar kind",
    6: "key kind",
    7: "slot kind",
}


def _check_usearch_head(data: memoryview, pos: int, count: int, dim: int, empty: bytes) -> None:
    """The 64-byte head at ``pos``: kinds as in ``empty``'s, count, dimensions, one vector a key.

    ``empty``: an empty usearch index of the header's ndim/metric/dtype,
    serialized (its head follows an 8-byte vectors header). The minor and
    patch versions may differ (usearch reads files of its major version).
    """
    head = _HEAD.unpack_from(data, pos)
    want = _HEAD.unpack_from(empty, _MATRIX.size)
    for i, field in _KINDS.items():
        if head[i] != want[i]:
            raise IndexFileError(
                f"usearch: payload head's {field} is {head[i]!r}, an index of the header's "
                f"metric and dtype has {want[i]!r}"
            )
    if head[8:12] != (count, 0, dim, False):
        raise IndexFileError(
            f"usearch: payload head says {head[8]} present, {head[9]} deleted, dim={head[10]}, "
            f"multi={head[11]}; the header says {count} present, dim={dim}"
        )


def _check_usearch_nodes(
    data: memoryview, pos: int, n: int, m: int, max_level: int, entry: int
) -> None:
    """Check the node levels, keys and neighbour lists that follow the graph header.

    The entry node must reach ``max_level``: a search starts there at the top
    level and would read the lists of levels the node does not have.
    """
    if len(data) < pos + 2 * n:
        raise IndexFileError("usearch: payload is truncated inside the node levels")
    levels = np.frombuffer(data, dtype="<i2", count=n, offset=pos).astype(np.int64)
    if n and (levels.min() < 0 or levels.max() > max_level or levels[entry] != max_level):
        raise IndexFileError("usearch: a node level is out of range")
    pos += 2 * n
    base_bytes, upper_bytes = 4 + 4 * 2 * m, 4 + 4 * m
    sizes = 10 + base_bytes + levels * upper_bytes
    starts = pos + np.concatenate([[0], np.cumsum(sizes)[:-1]]) if n else np.empty(0, np.int64)
    if pos + int(sizes.sum()) != len(data):
        raise IndexFileError("usearch: payload length does not match its node levels")
    raw = np.frombuffer(data, dtype=np.uint8)
    head = raw[starts[:, None] + np.arange(10 + base_bytes)]
    keys = head[:, :8].copy().view("<u8").ravel()
    if not np.array_equal(np.sort(keys), np.arange(n, dtype=np.uint64)):
        raise IndexFileError("usearch: payload keys are not the row ids 0..count-1")
    if not np.array_equal(head[:, 8:10].copy().view("<i2").ravel(), levels):
        raise IndexFileError("usearch: a node's level differs from the level table")
    _check_lists(head[:, 10:].copy().view("<u4"), 2 * m, n)
    for i in np.flatnonzero(levels).tolist():
        at = int(starts[i]) + 10 + base_bytes
        upper = raw[at : at + int(levels[i]) * upper_bytes].copy().view("<u4")
        _check_lists(upper.reshape(int(levels[i]), 1 + m), m, n)


def _check_lists(lists: np.ndarray, cap: int, n: int) -> None:
    """Rows of ``[count, slot...]``: count <= cap, the used slots < n."""
    counts = lists[:, 0]
    if (counts > cap).any():
        raise IndexFileError("usearch: a neighbour list is longer than the graph allows")
    used = np.arange(cap)[None, :] < counts[:, None]
    if (lists[:, 1:][used] >= n).any():
        raise IndexFileError("usearch: a neighbour slot is out of range")
