"""``hnsw`` backend: hnswlib's HNSW graph.

Build parameters: ``M`` (default 16), ``ef_construction`` (default 200),
``seed`` (hnswlib ``random_seed`` for level assignment, default 100; with
more than one build thread the graph still depends on thread timing, so
the drivers build on one thread unless told otherwise: see
:mod:`ragbench.indexes.builds`).
Query parameter: ``ef`` (default 64).

Metric spaces: ``ip`` → hnswlib ``'ip'`` (distance ``1 - dot``), ``cosine`` →
``'cosine'`` (hnswlib normalizes the corpus at build and each query in C++,
distance ``1 - cos``), ``l2`` → ``'l2'`` (squared distance). Scores are
converted in place: ``1 - distance`` for ``ip``/``cosine``, ``-distance``
for ``l2``.

``ef`` semantics: hnswlib keeps ``ef`` on the index object, not per call.
``search`` sets it only when it changes, to ``max(ef, k)`` (hnswlib cannot
return ``k`` results from a smaller beam). Concurrent searches on one
``HnswIndex`` with different ``ef`` values therefore race; use one ``ef``
per index when searching from several threads.

Fewer than ``k`` results: hnswlib raises ``RuntimeError("Cannot return the
results in a contiguous 2D array...")`` when the graph walk reaches fewer
than ``k`` items (a disconnected graph, typically many duplicate vectors).
ragbench then searches the failing batch row by row, finds the largest
``k' < k`` hnswlib can return for that row (binary search over ``k'``), and
pads the rest with ``-1`` ids and ``-inf`` scores.

NaN/inf queries raise :class:`~ragbench.errors.NonFiniteError` like
everywhere else. Search: the reference is
:meth:`~ragbench.indexes.base.LiveVectorIndex.search` over this module's
hooks; one float32 ``(1, dim)`` ``ip``/``l2`` query is answered first by
:func:`~ragbench.indexes._fast_paths.hnswlib_one_query` (the index-wrapper
target), which returns exactly what the reference returns: it checks the
query on hnswlib's answer (a NaN or inf component makes every distance of
the row NaN or inf, so a finite best score proves the query finite) and
leaves every other answer to the reference.

Filtered search (see :mod:`ragbench.indexes.base`): ``pre``,
``post`` and ``in-graph`` (hnswlib's ``filter`` callable: a C-level
``bytes.__getitem__`` over the allowed rows, called by hnswlib for each
candidate it would return; filtered searches run on one thread, since
hnswlib's threads would queue on the GIL for each callback). ``auto`` takes
``pre`` up to 20 % selectivity: hnswlib's filtered walk continues until it
holds ``ef`` allowed rows, so it slows down as 1/selectivity.

Live writes: ``add`` = ``add_items`` (with ``resize_index`` to twice the
capacity when full), ``delete`` = ``mark_deleted`` (the rows stay in the
graph as waypoints and are never returned; memory is not freed).

Thread-safety: searches run concurrently with each other and with ``add``
(hnswlib supports concurrent ``add_items`` and ``knn_query``); writes are
serialised by a lock. Only a resize and ``delete`` are exclusive: they
wait for the running searches and hold new ones off
(:class:`~ragbench.indexes._writes_and_filters.WriteGate`; a search takes no lock).
A search running beside an ``add`` may or may not see
the new rows; one started after ``add``/``delete`` returned sees the result.

Threads: builds and batch searches use ``ragbench.threads.get_threads()``;
a single query runs on the calling thread (hnswlib does not spawn threads
for so few rows).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any, ClassVar

import hnswlib
import numpy as np

from .. import progress
from ..errors import IndexFileError
from ..threads import get_threads
from ..validate import positive_int as int_param
from ._arrays import F32, I64, INF, INT32_MAX, batch_is_finite, build_chunks
from ._fast_paths import hnswlib_one_query
from ._hnsw_layout import check_hnswlib_payload
from ._writes_and_filters import IdSpace
from .base import LiveVectorIndex

__all__ = ["HnswIndex"]

_ndarray = np.ndarray
#: ``search``'s ``ef`` when the caller passes none (``None`` is a bad ef and stays one).
_NO_EF: Any = object()

_SPACE = {"ip": "ip", "cosine": "cosine", "l2": "l2"}


class HnswIndex(LiveVectorIndex):
    """hnswlib HNSW graph; see the module docstring for ef, padding and threads."""

    name: ClassVar[str] = "hnsw"
    library: ClassVar[str] = "hnswlib"
    payload_format: ClassVar[str] = "hnswlib.save_index"
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 200, "seed": 100}
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 64}
    delete_mode: ClassVar[str | None] = "mark"
    exclusive_add: ClassVar[bool] = False
    auto_pre_fraction: ClassVar[float] = 0.2

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._index: Any = None
        self._set_ef: Any = None
        self._ef = -1  # the ef set on hnswlib's index (it keeps one, not per call)
        self._live = 0  # rows of the current id snapshot (see _on_space)
        self._similarity = metric != "l2"
        # ip/l2: compiled in-place distance-to-score conversion of one row
        # (ragbench.indexes._hnsw_score_kernels), loaded after build/load, outside the
        # build time; None for cosine (its query is checked before the search).
        self._to_scores: Any = None
        # hnswlib_one_query's state for the current id snapshot and ef (see
        # _publish_fast), or None (cosine, before the compiled conversion is loaded
        # or before the first search set an ef); published under _fast_lock.
        self._fast: tuple[Any, tuple[int, int], int, Any, int] | None = None
        self._fast_lock = threading.Lock()
        # labels_ext of the last add's id snapshot (None: ids are hnswlib's labels).
        self._labels_ext: np.ndarray | None = None
        self._init_live()

    def search(
        self,
        queries: Any,
        k: int,
        *,
        ef: Any = _NO_EF,
        filter: Any = None,
        strategy: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, optionally restricted to an allow-list.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter, strategy: the allow-list and how to apply it, see
                :mod:`ragbench.indexes.base` (``in-graph`` is hnswlib's
                ``filter`` callable: the graph walk only returns allowed rows).
            ef: the beam width for this call (int >= 1, default 64; see the
                module docstring). Named rather than left to ``**params`` so
                a call passing it builds no dict (the index-wrapper target).
            **params: no other query parameter exists: any name raises
                :class:`~ragbench.errors.ConfigError`.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.

        The reference search (:meth:`LiveVectorIndex.search`) answers every
        call that :func:`~ragbench.indexes._fast_paths.hnswlib_one_query`
        does not. Searches run beside ``add`` (hnswlib allows it); only a
        resize of the graph's capacity and ``delete`` hold them off.
        """
        if filter is None and strategy is None and not params:
            answer = hnswlib_one_query(
                self, queries, k, self._default_compiled if ef is _NO_EF else ef
            )
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        if ef is not _NO_EF:
            params["ef"] = ef
        return super().search(queries, k, filter=filter, strategy=strategy, **params)

    def _caller_ids(self, pos: np.ndarray, space: IdSpace) -> np.ndarray:
        # Read after the search: the snapshot of the last add covers every row
        # hnswlib holds, also those of an add still running beside this search.
        ext = self._labels_ext
        return pos if ext is None else ext[pos]

    def _change_ef(self, ef: int) -> None:
        """Set hnswlib's beam width (kept on the index, not per call) and publish it."""
        with self._fast_lock:
            self._set_ef(ef)
            self._ef = ef
            self._publish_fast()

    def _queries(self, q: Any) -> np.ndarray:
        """Checked float32 ``(nq, dim)`` queries: NaN/inf, width, cosine zero rows.

        A float32 ``(nq, dim)`` ip/l2 array passes on a min and a max pass
        (:func:`batch_is_finite`, which propagate NaN); cosine needs its per-row zero-norm
        check, and every other input the full check of :meth:`_slow_queries`.
        """
        if (
            type(q) is _ndarray
            and q.dtype is F32
            and q.ndim == 2
            and q.shape[1] == self.dim
            # (no contiguity check: hnswlib reads any strides)
            and not self._cosine
            and batch_is_finite(q)
        ):
            return q
        return self._slow_queries(q)

    def _search_padded(
        self, q: np.ndarray, k: int, filt: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        index_knn = self._index.knn_query

        def knn(one: np.ndarray, kk: int, num_threads: int) -> Any:
            return index_knn(one, kk, num_threads=num_threads, filter=filt)

        labels = np.full((q.shape[0], k), np.iinfo(np.uint64).max, dtype=np.uint64)
        dist = np.full((q.shape[0], k), np.inf, dtype=np.float32)
        for row in range(q.shape[0]):
            one = q[row : row + 1]
            try:
                got_labels, got_dist = knn(one, k, num_threads=1)
            except RuntimeError:
                # Largest k' hnswlib can return: the walk's reach does not
                # depend on k' (ef >= k here), so success is monotone in k'.
                lo, hi = 0, k - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    try:
                        knn(one, mid, num_threads=1)
                        lo = mid
                    except RuntimeError:
                        hi = mid - 1
                if lo == 0:
                    continue
                got_labels, got_dist = knn(one, lo, num_threads=1)
            width = got_labels.shape[1]
            labels[row, :width] = got_labels[0]
            dist[row, :width] = got_dist[0]
        # uint64 max viewed as int64 is -1; inf distance becomes -inf score.
        return labels, dist

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["M"] = int_param(owner, "M", params["M"], lo=2, hi=4096)
        params["ef_construction"] = int_param(
            owner, "ef_construction", params["ef_construction"], hi=INT32_MAX
        )
        params["seed"] = int_param(owner, "seed", params["seed"], lo=0, hi=2**31 - 1)
        return params

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["ef"]

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1. Replaces any earlier build.

        Row ``i`` gets id ``i``.
        """
        # For cosine the shared check hands over a normalized copy; hnswlib's
        # cosine space normalizes again in C++ (idempotent).
        vectors = self._corpus(data)
        p = self.build_params

        def run() -> None:
            index = hnswlib.Index(space=_SPACE[self.metric], dim=self.dim)
            index.init_index(
                max_elements=vectors.shape[0],
                M=p["M"],
                ef_construction=p["ef_construction"],
                random_seed=p["seed"],
            )
            # In chunks, to report progress and answer Ctrl-C between calls: hnswlib inserts
            # rows one by one in order, so this builds what one call does (exactly so on one
            # thread).
            n = vectors.shape[0]
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start, stop in build_chunks(n):
                    rows = np.arange(start, stop)
                    index.add_items(vectors[start:stop], rows, num_threads=get_threads())
                    advance(stop - start)
            self._set_index(index)

        self._timed_build(run)
        self._load_to_scores()

    def _load_to_scores(self) -> None:
        """Load the compiled score conversion (numba, on-disk cache) for ip/l2 indexes."""
        if not self._cosine:
            t0 = time.perf_counter_ns()
            from ._hnsw_score_kernels import entry_point

            self._to_scores = entry_point(self.metric)
            self.compile_ns = time.perf_counter_ns() - t0
            self._on_space(self._space)  # the fast path can now convert scores

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._set_ef = index.set_ef
        with self._fast_lock:
            self._ef = -1
        self._publish_built(int(index.get_current_count()))

    def _on_space(self, space: IdSpace | None) -> None:
        # Called before hnswlib sees an add's rows (see LiveVectorIndex._commit_add).
        if space is None:
            return
        self._labels_ext = space.labels_ext()
        with self._fast_lock:
            self._live = space.live
            self._publish_fast()

    def _publish_fast(self) -> None:
        """Publish :func:`hnswlib_one_query`'s state: ``(knn_query, (1, dim), k_max, to_scores, ef)``.

        ``ef`` is the beam width set on hnswlib now (the reference sets
        ``max(ef, k)``), and ``k_max`` the largest ``k`` a call may ask for
        with it: the rows of the id snapshot, and no more than that width. None for cosine, before the compiled conversion is
        loaded and before a search set an ``ef``. Called under
        ``_fast_lock`` by every change of ``ef`` or of the snapshot, so the
        last state published always holds the ``ef`` hnswlib has.
        """
        ef, to_scores = self._ef, self._to_scores
        if to_scores is None or ef < 1:
            self._fast = None
        else:
            k_max = min(self._live, ef)
            self._fast = (self._index.knn_query, (1, self.dim), k_max, to_scores, ef)

    # -- filtered search and writes (see ragbench.indexes.base) -----------------

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        return self._queries(queries)

    def _unit_queries(self, q: np.ndarray) -> np.ndarray:
        return self._normalize_queries(q) if self._cosine else q

    def _filter_callable(self, allow: np.ndarray) -> Any:
        """hnswlib's ``filter``: ``bytes.__getitem__`` over the allowed positions.

        A C method (no Python frame per candidate). Padded with zeros to the
        graph's capacity: rows added while this search runs are disallowed,
        never an IndexError inside hnswlib's walk.
        """
        cap = max(int(self._index.get_max_elements()), allow.size)
        buf = np.zeros(cap, dtype=np.uint8)
        buf[: allow.size] = allow
        return buf.tobytes().__getitem__

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        n = q.shape[0]
        kk = k
        filt = None
        if allow is not None:
            kk = max(1, min(k, int(np.count_nonzero(allow))))
            filt = self._filter_callable(allow)
        ef = self._default_compiled if compiled is None else compiled
        ef = max(ef, kk)
        if ef != self._ef:
            self._change_ef(ef)
        # With a filter, one thread: hnswlib's threads would queue on the GIL for
        # every callback (measured 2x slower on 2 cores than one thread).
        threads = 1 if filt is not None else get_threads()
        try:
            labels, dist = self._index.knn_query(q, kk, num_threads=threads, filter=filt)
        except RuntimeError:
            labels, dist = self._search_padded(q, kk, filt)
        ids = labels.view(I64)  # hnswlib's uint64 labels are positions < 2**63
        # The same float32 operations as the compiled conversion of the fast path.
        scores = np.subtract(np.float32(1), dist) if self._similarity else np.negative(dist)
        if kk < k:
            ids = np.concatenate([ids, np.full((n, k - kk), -1, dtype=I64)], axis=1)
            scores = np.concatenate([scores, np.full((n, k - kk), -INF, dtype=F32)], axis=1)
        pads = ids < 0
        if pads.any():
            scores[pads] = -INF
        return ids, scores

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        out = np.zeros((space.n_pos, self.dim), dtype=F32)
        live = np.flatnonzero(space.live_mask())
        if live.size:
            out[live] = self._index.get_items(live.tolist(), return_type="numpy")
        return out

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        index = self._index
        need = int(positions[-1]) + 1
        cap = int(index.get_max_elements())
        if need > cap:
            # hnswlib reallocates its arrays: no search may run meanwhile.
            with self._gate.exclusive():
                index.resize_index(max(need, 2 * cap))
        index.add_items(vectors, positions, num_threads=get_threads())

    def _lib_delete(self, positions: np.ndarray) -> None:
        for pos in positions.tolist():
            self._index.mark_deleted(pos)

    def memory_bytes(self) -> int:
        """Estimated bytes held by hnswlib.

        Level-0 block exact (``n * (8M + 4 + 4·dim + 8)``); upper-level links
        at their expected size (``n/(M-1)`` lists of ``4M + 4`` bytes); plus
        per-element bookkeeping (~60 bytes: level, list pointer, lock, label
        map entry) and hnswlib's fixed 65 536 label locks (~2.6 MB).
        """
        if self._index is None:
            raise self._not_built()
        n, m = self._n, int(self.build_params["M"])
        level0 = n * (2 * m * 4 + 4 + self.dim * 4 + 8)
        upper = int(n * (m * 4 + 4) / (m - 1))
        return int(level0 + upper + n * 60 + 65536 * 40)

    def _payload(self) -> bytes:
        if self._index is None:
            raise self._not_built()
        with tempfile.TemporaryDirectory(prefix="ragbench-hnsw-") as tmp:
            path = os.path.join(tmp, "index.bin")
            self._index.save_index(path)
            with open(path, "rb") as fh:
                return fh.read()

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        count = header.get("count")
        if not isinstance(count, int):
            raise IndexFileError("hnsw: header count is missing")
        check_hnswlib_payload(payload, self.dim, count, self.build_params["M"])
        index = hnswlib.Index(space=_SPACE[self.metric], dim=self.dim)
        with tempfile.TemporaryDirectory(prefix="ragbench-hnsw-") as tmp:
            path = os.path.join(tmp, "index.bin")
            with open(path, "wb") as fh:
                fh.write(payload)
            try:
                index.load_index(path, max_elements=count)
            except RuntimeError as exc:
                raise IndexFileError(f"hnsw: hnswlib cannot read the payload: {exc}") from None
        self._set_index(index)
        self._load_to_scores()
