"""Filtered search and live ``add``/``delete`` for the dense backends (base class).

:class:`LiveVectorIndex` holds what the strategies share; a backend supplies
the library calls: :meth:`~LiveVectorIndex._raw_search` (search over
positions, optionally restricted in the library to a positions mask),
:meth:`~LiveVectorIndex._read_vectors`, :meth:`~LiveVectorIndex._lib_add`
and :meth:`~LiveVectorIndex._lib_delete`.

Filter strategies (``search(Q, k, filter=..., strategy=...)``):

``pre``
    Exact top-k over the allowed rows: the numba rerank kernel
    (:class:`ragbench.rerankers.numba_reranker.NumbaReranker`) scores every
    allowed row in place. Needs the vectors in ragbench's memory: the first
    ``pre`` search copies them out of the library (``n·dim·4`` bytes, kept
    and extended by ``add``; not part of ``memory_bytes()``).
``post``
    Search ``k'`` unfiltered candidates and keep the allowed ones; ``k'``
    starts at ``2k / selectivity`` (at least ``2k``) and is multiplied by 4
    for the queries still short of ``k``, up to :attr:`post_max_candidates`
    (default 4096) or the live count.
``in-graph``
    The library skips disallowed rows itself (faiss ``IDSelectorBitmap`` in
    ``SearchParameters``, hnswlib's ``filter`` callable).
``auto`` (the default)
    ``pre`` when every query allows at most :attr:`auto_pre_fraction` of the
    live rows (5 %; 20 % for hnswlib, whose filtered walk slows down as
    1/selectivity) and the backend has ``pre``, otherwise the backend's
    :attr:`default_strategy`. The fractions come from
    ``bench/test_bench_filters.py`` (20 000 × 128): where ``pre`` and
    ``in-graph`` cost the same.

Fewer than ``k`` results: when fewer than ``k`` allowed live rows exist, the
row is ``-1``/``-inf`` padded, as for any search. When ``post`` or
``in-graph`` finds fewer than ``min(k, allowed)`` rows (the library's walk
or the candidate cap ran out), the row is padded the same way and
:attr:`filter_shortfalls` (a counter of such query rows since the index was
created) goes up: compare it before and after a call to know.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError, NotBuiltError, UnsupportedOperationError
from ..validate import check_k
from ._common import F32, I64, VectorIndex
from ._live import (
    FilterPlan,
    IdSpace,
    WriteGate,
    check_strategy,
    positions_to_delete,
    resolve_filter,
    space_after_add,
    space_after_delete,
)

__all__ = ["DELETE_BACKENDS", "LiveVectorIndex", "WRITE_BACKENDS"]

#: Backends whose ``add`` / ``delete`` work (named in the errors of those that cannot).
WRITE_BACKENDS = (
    "flat",
    "hnsw",
    "faiss-hnsw",
    "ivf",
    "lsh",
    "minhash-lsh",
    "ivfpq",
    "ivfpq-fs",
    "ivf-sq8",
    "hnsw-sq",
    "hnsw-fp16",
    "binary-flat",
    "binary-hnsw",
    "usearch",
    "qdrant-edge",
    "lancedb",
    "chroma",
    "pgvector",
)
DELETE_BACKENDS = (
    "flat",
    "hnsw",
    "ivf",
    "lsh",
    "minhash-lsh",
    "ivfpq",
    "ivf-sq8",
    "binary-flat",
    "usearch",
    "qdrant-edge",
    "lancedb",
    "chroma",
    "pgvector",
)


class LiveVectorIndex(VectorIndex):
    """A dense index with filtered search, ``add`` and ``delete`` (see the module docstring)."""

    #: Filter strategies this backend offers (besides ``auto``).
    filter_strategies: ClassVar[tuple[str, ...]] = ("pre", "post", "in-graph")
    #: ``auto`` takes ``pre`` when every query allows at most this fraction of the live rows.
    auto_pre_fraction: ClassVar[float] = 0.05
    #: What ``auto`` uses above :attr:`auto_pre_fraction`.
    default_strategy: ClassVar[str] = "in-graph"
    #: ``"mark"``: deleted positions stay (hnswlib, ivf); ``"compact"``: the library
    #: renumbers the rows after them (faiss flat, lsh); ``None``: no delete.
    delete_mode: ClassVar[str | None] = None
    #: Whether ``add`` holds searches off (faiss, whose ``add`` reallocates); hnswlib
    #: adds beside running searches and holds them off only to resize.
    exclusive_add: ClassVar[bool] = True
    no_delete_reason: ClassVar[str] = "the library cannot remove rows"
    #: Largest ``k'`` the ``post`` strategy asks the library for.
    post_max_candidates: int = 4096

    _gate: WriteGate
    _gate_entries: list[bool | None]  # the gate's entries, read by every search
    _space: IdSpace | None

    def _init_live(self) -> None:
        self._gate = WriteGate()
        self._gate_entries = self._gate.entries
        self._space = None
        self._store: np.ndarray | None = None
        self._store_rows = 0
        self._store_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._reranker: Any = None
        self._written = False
        #: Query rows for which ``post``/``in-graph`` found fewer than ``min(k, allowed)`` rows.
        self.filter_shortfalls = 0

    # -- backend hooks ----------------------------------------------------------------

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions int64 ``(nq, k)`` and scores, ``-1``/``-inf`` padded; ``allow`` in the library."""
        raise NotImplementedError

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        """Checked queries as :meth:`_raw_search` takes them."""
        raise NotImplementedError

    def _unit_queries(self, q: np.ndarray) -> np.ndarray:
        """Queries from :meth:`_prepare_queries` as the ``pre`` kernel scores them."""
        return q

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        """float32 ``(n_pos, dim)`` copy of the stored rows (deleted rows may be zeros)."""
        raise UnsupportedOperationError(
            f"index {self.name!r}: the 'pre' filter strategy needs the vectors, which "
            f"{self.library} does not keep"
        )

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        raise NotImplementedError

    def _lib_delete(self, positions: np.ndarray) -> None:
        raise NotImplementedError

    def _on_space(self, space: IdSpace) -> None:
        """Refresh the backend's search state for a new id snapshot (before it is published)."""

    # -- state ------------------------------------------------------------------------

    def _publish_built(self, n: int) -> None:
        """After build/load: ids 0..n-1, nothing deleted, no copied vectors."""
        space = IdSpace.identity(n)
        with self._store_lock:
            self._store = None
        self._written = False
        self._on_space(space)
        self._space = space
        self._n = space.live

    def _publish(self, space: IdSpace) -> None:
        self._on_space(space)
        self._space = space
        self._n = space.live
        self._written = True

    @property
    def id_bound(self) -> int:
        """Length of a boolean filter mask: one more than the largest id ever held."""
        space = self._space
        if space is None:
            raise self._not_built()
        return space.id_bound

    def save(self, path: Any, *, data: Any = None, source: str | None = None) -> None:
        """As :meth:`BaseIndex.save`; an index changed by ``add``/``delete`` cannot be saved yet."""
        if self._written:
            raise UnsupportedOperationError(
                f"index {self.name!r}: saving an index changed by add()/delete() is not "
                "supported yet (its ids and deletions are not part of the file format); "
                "build it again from the final vectors and save that"
            )
        super().save(path, data=data, source=source)

    # -- filtered search --------------------------------------------------------------

    def _search_filtered(
        self, queries: Any, k: Any, compiled: Any, allow: Any, strategy: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """The body of ``search`` when ``filter=`` or ``strategy=`` is passed."""
        owner = f"index {self.name!r}"
        strategy = check_strategy(owner, strategy, self.filter_strategies)
        if allow is None:
            raise InputError(f"{owner}: strategy={strategy!r} needs filter=<mask or ids>")
        space = self._space
        if space is None:
            raise self._not_built()
        q = self._prepare_queries(queries)
        k = check_k(k, space.live)
        nq = q.shape[0]
        plan = resolve_filter(allow, nq, space)
        if nq == 0:
            return np.empty((0, k), I64), np.empty((0, k), F32)
        if strategy == "auto":
            small = int(plan.counts.max()) <= self.auto_pre_fraction * space.live
            strategy = "pre" if small and "pre" in self.filter_strategies else self.default_strategy
        if strategy == "pre":
            pos, scores = self._pre(q, k, plan, space)
        elif strategy == "post":
            pos, scores = self._post(q, k, compiled, plan, space)
        else:
            pos, scores = self._in_graph(q, k, compiled, plan)
        if strategy != "pre":
            self._count_shortfalls(pos, k, plan)
        return space.to_ids(pos), scores

    def _count_shortfalls(self, pos: np.ndarray, k: int, plan: FilterPlan) -> None:
        if pos.shape[0] == 1 and pos.item(-1) >= 0:
            return  # a full row (pads are last): nothing to count
        found = (pos >= 0).sum(axis=1)
        short = int((found < np.minimum(plan.counts, k)).sum())
        if short:
            with self._stats_lock:
                self.filter_shortfalls += short

    def _in_graph(
        self, q: np.ndarray, k: int, compiled: Any, plan: FilterPlan
    ) -> tuple[np.ndarray, np.ndarray]:
        if plan.shared is not None:
            return self._raw_search(q, k, compiled, plan.shared)
        ids = np.empty((q.shape[0], k), I64)
        scores = np.empty((q.shape[0], k), F32)
        for r in range(q.shape[0]):
            ids[r : r + 1], scores[r : r + 1] = self._raw_search(
                q[r : r + 1], k, compiled, plan.mask(r)
            )
        return ids, scores

    def _post(
        self, q: np.ndarray, k: int, compiled: Any, plan: FilterPlan, space: IdSpace
    ) -> tuple[np.ndarray, np.ndarray]:
        nq = q.shape[0]
        out_i = np.full((nq, k), -1, dtype=I64)
        out_s = np.full((nq, k), -np.inf, dtype=F32)
        limit = max(k, min(space.live, self.post_max_candidates))
        need = np.minimum(plan.counts, k)
        sel = np.maximum(plan.counts, 1) / max(space.live, 1)
        want = np.minimum(limit, np.maximum(2 * k, np.ceil(2 * k / sel))).astype(np.int64)
        pending = np.arange(nq)
        while pending.size:
            still = []
            # One library call per k' (each query's answer then depends on its own k'
            # only, as if it were searched alone).
            for kk in np.unique(want[pending]).tolist():
                rows = pending[want[pending] == kk]
                pos, scores = self._raw_search(np.ascontiguousarray(q[rows]), kk, compiled, None)
                for j, r in enumerate(rows.tolist()):
                    got_i, got_s = self._keep_allowed(pos[j], scores[j], plan.mask(r), k)
                    out_i[r, : got_i.size] = got_i
                    out_s[r, : got_s.size] = got_s
                    if got_i.size < need[r] and kk < limit:
                        want[r] = min(limit, kk * 4)
                        still.append(r)
            pending = np.asarray(still, dtype=np.int64)
        return out_i, out_s

    @staticmethod
    def _keep_allowed(
        pos: np.ndarray, scores: np.ndarray, mask: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first ``k`` of ``pos`` (best first) that ``mask`` allows."""
        ok = (pos >= 0) & (pos < mask.size)
        ok[ok] = mask[pos[ok]]
        keep = np.flatnonzero(ok)[:k]
        return pos[keep], scores[keep]

    def _pre(
        self, q: np.ndarray, k: int, plan: FilterPlan, space: IdSpace
    ) -> tuple[np.ndarray, np.ndarray]:
        x = self._vectors_for(space)
        rr = self._pre_reranker()
        uq = self._unit_queries(q)
        nq = q.shape[0]
        out_i = np.empty((nq, k), I64)
        out_s = np.empty((nq, k), F32)
        shared = None if plan.shared is None else np.flatnonzero(plan.shared).astype(I64)
        for r in range(nq):
            allowed = shared if shared is not None else np.flatnonzero(plan.mask(r)).astype(I64)
            out_i[r], out_s[r] = rr.rerank(uq[r], allowed, x, k)
        return out_i, out_s

    def _pre_reranker(self) -> Any:
        rr = self._reranker
        if rr is None:
            from ..rerankers.numba_reranker import NumbaReranker

            rr = self._reranker = NumbaReranker(metric="l2" if self.metric == "l2" else "ip")
        return rr

    def _vectors_for(self, space: IdSpace) -> np.ndarray:
        """The stored rows ``(n_pos, dim)``, copied out of the library on first use."""
        store = self._store
        if store is None or self._store_rows < space.n_pos:
            with self._store_lock:
                store = self._store
                if store is None or self._store_rows < space.n_pos:
                    store = np.ascontiguousarray(self._read_vectors(space), F32)
                    self._store, self._store_rows = store, space.n_pos
        return store[: space.n_pos]

    # -- writes -----------------------------------------------------------------------

    def _unsupported(self, op: str, can: tuple[str, ...], why: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"index {self.name!r} cannot {op}: {why}; backends that can: {', '.join(can)}"
        )

    def add(self, vectors: Any, ids: Any = None) -> np.ndarray:
        """Insert float32 ``(m, dim)`` rows; returns their ids (int64 ``(m,)``).

        ``ids``: ``m`` unique non-negative integers not live in the index, or
        ``None`` for the next ids (``id_bound``, ``id_bound + 1``, ...). For
        ``cosine`` the rows are normalized into a copy, as at build. See the
        backend's docstring for what searches running meanwhile see.
        """
        if self._space is None:
            raise NotBuiltError(f"index {self.name!r}: call build(data) before add()")
        vecs = self._corpus(vectors)
        m = vecs.shape[0]
        with self._gate.writer():
            space = self._space
            if space is None:
                raise self._not_built()
            new_space, new_ids = space_after_add(space, m, ids)
            positions = np.arange(new_space.n_pos - m, new_space.n_pos, dtype=I64)
            if self.exclusive_add:
                with self._gate.exclusive():
                    self._commit_add(vecs, positions, new_space)
            else:
                self._commit_add(vecs, positions, new_space)
        return new_ids

    def _commit_add(self, vecs: np.ndarray, positions: np.ndarray, space: IdSpace) -> None:
        self._extend_store(vecs, int(positions[0]))
        # Labels first: a search running beside hnswlib's add may already see the rows.
        self._on_space(space)
        self._lib_add(vecs, positions)
        self._publish(space)

    def _extend_store(self, vecs: np.ndarray, start: int) -> None:
        """Append to the copied vectors (if any): in place while capacity lasts, else 2x."""
        with self._store_lock:
            store = self._store
            if store is None:
                return
            if self._store_rows != start:
                self._store = None
                return
            stop = start + vecs.shape[0]
            if stop > store.shape[0]:
                grown = np.empty((max(stop, 2 * store.shape[0]), self.dim), dtype=F32)
                grown[:start] = store[:start]
                store = grown
            # Rows past a running search's snapshot: it never reads them.
            store[start:stop] = vecs
            self._store = store
            self._store_rows = stop

    def delete(self, ids: Any) -> None:
        """Remove the rows with these ids (int ``(m,)``; each must be live in the index).

        Searches never return a deleted id, filtered or not. See the backend's
        docstring for whether the memory is freed and how searches are held off.
        """
        if self.delete_mode is None:
            raise self._unsupported("delete", DELETE_BACKENDS, self.no_delete_reason)
        if self._space is None:
            raise self._not_built()
        with self._gate.writer():
            space = self._space
            if space is None:
                raise self._not_built()
            pos = positions_to_delete(space, ids)
            new_space = space_after_delete(space, pos, self.delete_mode)
            with self._gate.exclusive():
                self._lib_delete(pos)
                if self.delete_mode == "compact":
                    with self._store_lock:
                        self._store = None
                self._publish(new_space)
