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
everywhere else. For ``ip``/``l2`` float32 queries, single or batched, the
check is made on hnswlib's answer: a NaN or inf component makes every
distance of its row NaN or inf, so finite best distances prove the queries
finite (cheaper, on caches the graph walk leaves cold, than a pass over the
queries: a batch's best scores are summed by the compiled conversion itself);
anything else gets the exact element check before the error. ``cosine``
queries (whose zero vector hnswlib answers with finite distances) and other
dtypes are checked before the search.

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
(:class:`~ragbench.indexes._writes_and_filters.WriteGate`; a search takes no lock,
~0.1 µs per call). A search running beside an ``add`` may or may not see
the new rows; one started after ``add``/``delete`` returned sees the result.

Search state: ``HnswIndex`` holds the per-index search state (set up in
``__init__``), the unfiltered search with its repeat fast path, the query
checks, hnswlib's ``ef`` and the row-by-row search that pads what hnswlib
cannot return, beside the build, persistence, filtered search and writes.

Threads: builds and batch searches use ``ragbench.threads.get_threads()``;
a single query runs on the calling thread (hnswlib does not spawn threads
for so few rows).
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from typing import Any, ClassVar

import hnswlib
import numpy as np

from .. import progress
from ..errors import IndexFileError
from ..threads import get_threads
from ..validate import check_k
from ..validate import positive_int as int_param
from ._arrays import F32, I64, INF, INT32_MAX, batch_is_finite, build_step
from ._hnsw_layout import check_hnswlib_payload
from ._writes_and_filters import IdSpace
from .base import LiveVectorIndex

__all__ = ["HnswIndex"]

_ndarray = np.ndarray
_empty = np.empty
# The C function behind np.vdot: the __array_function__ dispatcher in front of
# it runs a Python-level dispatcher function each call (~3 µs when cold, i.e.
# right after a graph walk). Only ever called on exact np.ndarray operands,
# where dispatch cannot change the result.
_vdot = getattr(np.vdot, "_implementation", np.vdot)
_subtract = np.subtract
_negative = np.negative
_ONE = np.ones((), dtype=np.float32)
# Marks "not passed" (None is an invalid ef and must keep raising ConfigError).
UNSET: Any = object()


def _can_retype_in_place() -> bool:
    """Whether ``arr.dtype = other`` works here without a warning.

    Setting ``dtype`` is the cheapest reinterpretation numpy offers but may be
    deprecated by a later numpy; then ``search`` falls back to ``.view``.
    """
    probe = np.zeros((1, 1), dtype=np.uint64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            probe.dtype = I64  # type: ignore[misc, assignment]
        except Exception:  # DeprecationWarning as an error, or a future removal
            return False
    return probe.dtype == I64


RETYPE_IN_PLACE = _can_retype_in_place()


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
        # (knn_query, (1, dim), ntotal, check_after) once built: the fast path
        # reads one attribute. check_after: a single query's NaN/inf check is
        # made on hnswlib's answer (ip, l2) rather than on the query (cosine).
        self._state: tuple[Any, tuple[int, int], int, bool] | None = None
        self._set_ef: Any = None
        self._ef = -1
        self._similarity = metric != "l2"
        # (last ef object passed, its validated value): one tuple so a
        # concurrent caller never pairs one call's ef with another's value.
        self._last_ef: tuple[Any, Any] = (UNSET, None)
        # (k, float32 ones (1, k)): the operand for single-query score conversion.
        self._ones: tuple[int, np.ndarray] = (0, _ONE)
        # ip/l2: compiled in-place distance-to-score conversion of one row
        # (ragbench.indexes._hnsw_score_kernels), loaded after build/load, outside the
        # build time; None for cosine (its query is checked before the search).
        self._to_scores: Any = None
        # The repeat fast path: (knn_query, (1, dim), k, ef, to_scores) of the
        # last single-query call that took the checked path successfully, for
        # the very same k and ef objects; None until then and whenever ef changes.
        self._fast: tuple[Any, tuple[int, int], Any, Any, Any] | None = None
        # labels_ext of the id snapshot (None: ids are hnswlib's labels).
        self._labels_ext: np.ndarray | None = None
        self._init_live()

    def search(
        self,
        queries: Any,
        k: int,
        ef: Any = UNSET,
        filter: Any = None,
        strategy: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, optionally restricted to an allow-list.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            ef: beam width for this call (int >= 1, default 64; see the module
                docstring). A named parameter rather than part of ``**params``
                so a call with ``ef=`` builds no dict.
            filter, strategy: the allow-list and how to apply it, see
                :mod:`ragbench.indexes.base` (``in-graph`` is hnswlib's
                ``filter`` callable: the graph walk only returns allowed rows).
            **params: no other query parameters exist; any name here raises
                :class:`~ragbench.errors.ConfigError`.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.

        Searches run beside ``add`` (hnswlib allows it); only a resize of the
        graph's capacity and ``delete`` hold them off (see :class:`HnswIndex`).
        """
        entries = self._gate_entries  # see WriteGate
        entries.append(None)
        if entries[0]:
            entries.pop()
            self._gate.wait_enter()
        try:
            if filter is None and strategy is None:
                # The repeat fast path, inline (a call frame saved is ~1 µs on
                # cold caches): one float32 (1, dim) ip/l2 query with the same
                # k and ef objects as the last checked single query (ints are
                # immutable: the same object is the same, already validated
                # value, and that ef is the one set on hnswlib). After a walk
                # through a large graph everything touched here is cold in
                # cache and TLB, so it touches as little as the contract
                # allows: one tuple, the query's type, dtype and shape,
                # hnswlib's call, one compiled conversion that also returns the
                # best score for the NaN/inf check (see the module docstring),
                # and the ids' dtype.
                fast = self._fast
                if (
                    fast is not None
                    and k is fast[2]
                    and ef is fast[3]
                    and not params
                    and type(queries) is _ndarray
                    and queries.dtype is F32
                    and queries.shape == fast[1]
                    and self._labels_ext is None  # no add published new ids meanwhile
                ):
                    try:
                        labels, dist = fast[0](queries, k)
                    except RuntimeError:
                        pass  # fewer than k reachable: the checked path pads
                    else:
                        if not -INF < fast[4](dist) < INF:
                            self._slow_queries(queries)  # raises for NaN/inf; overflow answers
                        labels.dtype = I64
                        return labels, dist
                return self._search(queries, k, ef, params)
            if ef is UNSET and not params:
                compiled = self._default_compiled
            else:
                compiled = self._parse_ef(ef, params)
            return self._search_filtered(queries, k, compiled, filter, strategy)
        finally:
            entries.pop()

    def _search(
        self, queries: Any, k: Any, ef: Any, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` with every check; records the repeat fast path when it applies."""
        k_passed, ef_passed = k, ef
        if ef is UNSET and not params:
            ef = self._default_compiled
        else:
            last = self._last_ef
            # Identity: the same object validated last call (ints are immutable).
            ef = last[1] if ef is last[0] and not params else self._parse_ef(ef, params)
        # Fast path cost matters: after a walk through a large graph every
        # object this method touches is cold in cache and TLB (each numpy
        # call or attribute getter costs ~0.5-6 µs then), so a single query
        # makes as few numpy calls as the contract allows and reads one
        # state tuple.
        state = self._state
        if state is None:
            raise self._not_built()
        knn, one_row, ntotal, check_after = state
        q, n, check_after = self._checked_or_deferred(queries, one_row, check_after)
        if type(k) is not int or k < 1 or k > ntotal:
            k = check_k(k, ntotal)
        if ef < k:
            ef = k
        if ef != self._ef:
            self._change_ef(ef)
        try:
            if n == 1:
                labels, dist = knn(q, k)
            elif n:
                labels, dist = knn(q, k, num_threads=get_threads())
            else:
                return _empty((0, k), I64), _empty((0, k), F32)
        except RuntimeError:
            if check_after:
                self._slow_queries(q)  # a NaN/inf query raises before the per-row searches
            labels, dist = self._search_padded(q, k)
        if check_after and n > 1:
            return self._check_batch_answer(q, labels, dist)
        if self._similarity:
            # Positional out (no kwargs parsing); a same-shape ones operand
            # takes numpy's trivial loop, ~1 µs cheaper cold than a 0-d one.
            ones_k, ones = self._ones
            if ones_k != k or n != 1:
                ones = self._ones_for(n, k)
            _subtract(ones, dist, dist)
        else:
            _negative(dist, dist)
        if (
            check_after
            and self._to_scores is not None
            and self._labels_ext is None
            and type(k_passed) is int
            and not params
            and dist.dtype is F32
            and dist.shape == (1, k)
            and dist.flags.carray  # what the compiled conversion's entry point assumes
        ):
            self._fast = (knn, one_row, k_passed, ef_passed, self._to_scores)
        if check_after and not -INF < dist.item(0) < INF:
            self._check_nonfinite_answer(q)
        return self._answer(labels, dist)

    def _answer(self, labels: Any, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, scores)`` from hnswlib's labels and the converted distances."""
        # Labels are the row ids (< 2**63): reinterpret uint64 as int64 in
        # place (the array is ours); ~2 µs cheaper cold than creating a view.
        if RETYPE_IN_PLACE:
            labels.dtype = I64
            if self._labels_ext is None:
                return labels, dist
        return self._to_ids(labels), dist

    def _to_ids(self, labels: np.ndarray) -> np.ndarray:
        """hnswlib's labels (positions; int64, or uint64 to view) as the caller's ids."""
        if labels.dtype != I64:
            labels = labels.view(I64)
        ext = self._labels_ext  # read after the search: it covers every row hnswlib holds
        return labels if ext is None else ext[labels]

    def _change_ef(self, ef: int) -> None:
        """Set hnswlib's beam width (kept on the index, not per call); drops the fast path."""
        self._fast = None
        self._set_ef(ef)
        self._ef = ef

    def _checked_or_deferred(
        self, q: Any, one_row: tuple[int, int], check_after: bool
    ) -> tuple[Any, int, bool]:
        """``(queries, nq, check_after)``: queries checked now, or left to their answer.

        ``check_after`` (ip/l2) leaves a float32 ``(1, dim)`` row or ``(nq,
        dim)`` batch to the check on hnswlib's answer (a single row: its best
        score, see :meth:`_check_nonfinite_answer`; a batch: every row's, see
        :meth:`_check_batch_answer`); a cosine row takes one sum of squares
        (NaN/inf make it NaN/inf; zero and overflow, |x| > ~1e19, take the
        exact check). Everything else is checked here (:meth:`_queries`) and
        comes back with ``check_after`` false. float(): comparing a numpy
        scalar costs more than converting it.
        """
        if type(q) is _ndarray and q.dtype is F32:
            if q.shape == one_row:
                if check_after or 0.0 < float(_vdot(q, q)) < INF:
                    return q, 1, check_after
            elif (
                check_after
                and self._to_scores is not None
                and q.ndim == 2
                and q.shape[1] == one_row[1]
            ):
                return q, q.shape[0], True
        q = self._queries(q)
        return q, q.shape[0], False

    def _check_batch_answer(
        self, q: np.ndarray, labels: Any, dist: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """An ip/l2 batch's answer as scores and ids, raising if a query row holds NaN/inf.

        One compiled call converts every distance in place and returns the
        sum of the rows' best scores. A NaN or inf anywhere in an ip/l2 row
        makes that row's distances NaN or inf (as for a single query, see
        :meth:`_check_nonfinite_answer`), so the sum is finite only if every
        row is; a non-finite sum (NaN/inf, an overflow, a padded row) takes
        the exact check of the queries, which raises only for NaN/inf. After
        a batch the caches hold the graph: each numpy call costs tens of µs
        then, and this replaces four of them (a min and a max pass over the
        queries, a ones operand, the subtraction) with one compiled call.
        """
        if not (dist.dtype is F32 and dist.flags.carray):
            dist = np.ascontiguousarray(dist, dtype=F32)  # what the entry point assumes
        if not -INF < self._to_scores(dist) < INF:
            self._slow_queries(q)
        return self._answer(labels, dist)

    def _check_nonfinite_answer(self, q: np.ndarray) -> None:
        """Raise :class:`~ragbench.errors.NonFiniteError` if the single ip/l2 query ``q`` holds NaN/inf.

        Called when the best score is not finite. A NaN or inf anywhere in an
        ip/l2 query makes every distance NaN or inf (hnswlib's walk over it
        ends normally: comparisons with NaN are false and no node is visited
        twice), so a finite best score proves the query finite, for one
        ``item()`` instead of a numpy pass over the query on cold caches
        (measured 4-6 µs after a walk through a 100k graph). A finite query
        whose dot product overflows, or a walk that found nothing, also lands
        here: the exact check tells them apart and raises only for NaN/inf.
        """
        self._slow_queries(q)

    def _queries(self, q: Any) -> np.ndarray:
        """Checked queries for anything but one float32 ``(1, dim)`` row (batches, other types).

        A float32 ``(nq, dim)`` batch passes on a min and a max pass
        (:func:`batch_is_finite`); a cosine batch needs its per-row zero-norm check, and every other input
        the full check of :meth:`_slow_queries`.
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

    def _ones_for(self, n: int, k: int) -> np.ndarray:
        """A read-only float32 ones array of shape ``(n, k)``; a single row is kept."""
        ones = np.ones((n, k), dtype=F32)
        ones.flags.writeable = False  # shared by concurrent calls: an operand only
        if n == 1:
            self._ones = (k, ones)  # batch shapes vary; single queries repeat
        return ones

    def _parse_ef(self, ef: Any, params: dict[str, Any]) -> Any:
        """Validate this call's query params; remember a lone ``ef`` for the next call."""
        if ef is not UNSET:
            params["ef"] = ef
        compiled = self._parse_query(params)
        if len(params) == 1 and ef is not UNSET:
            self._last_ef = (ef, compiled)
        return compiled

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
            # In chunks, to report progress: hnswlib inserts rows one by one in order, so
            # this builds what one call does (exactly so on one thread).
            n, step = vectors.shape[0], build_step(vectors.shape[0])
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start in range(0, n, step):
                    stop = min(n, start + step)
                    rows = np.arange(start, stop)
                    index.add_items(vectors[start:stop], rows, num_threads=get_threads())
                    advance(stop - start)
            self._set_index(index)

        self._timed_build(run)
        self._load_to_scores()

    def _load_to_scores(self) -> None:
        """Load the compiled score conversion (numba, on-disk cache) for ip/l2 indexes."""
        if not self._cosine and RETYPE_IN_PLACE:
            t0 = time.perf_counter_ns()
            from ._hnsw_score_kernels import entry_point

            self._to_scores = entry_point(self.metric)
            self.compile_ns = time.perf_counter_ns() - t0

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._set_ef = index.set_ef
        self._ef = -1
        self._fast = None
        self._publish_built(int(index.get_current_count()))

    def _on_space(self, space: IdSpace) -> None:
        self._labels_ext = space.labels_ext()
        if self._labels_ext is not None:
            self._fast = None  # the repeat fast path returns hnswlib's labels as they are
        knn = self._index.knn_query
        self._state = (knn, (1, self.dim), space.live, not self._cosine)

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
        ids = labels.astype(np.uint64).view(I64)
        scores = (1.0 - dist if self._similarity else -dist).astype(F32)
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
