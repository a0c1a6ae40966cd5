"""The search half of the float32 faiss backends: :class:`FaissSearch`.

The base of ``FaissVectorIndex`` (:mod:`ragbench.indexes.faiss_indexes`,
which adds the build and the files, and whose docstring describes the
behaviour: scores, query parameters, filters, thread-safety): the search
state, the unfiltered search, the query checks, the filtered search's
library calls and the writes. Subclasses supply the search parameters
(``_params_for``, ``_selector_params``).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import faiss
import numpy as np

from ..threads import get_threads
from ..validate import check_k
from ._common import F32, FLT_MAX, I64, INF, batch_is_finite, fix_padding
from ._live import IdSpace
from .base import LiveVectorIndex

_ndarray = np.ndarray
_empty = np.empty
# The C function behind np.vdot, without the __array_function__ dispatcher
# (a Python-level call, ~3 µs when cold); only called on exact np.ndarray.
_vdot = getattr(np.vdot, "_implementation", np.vdot)
# Marks "not passed" (None is not a valid ef/nprobe and must keep raising).
UNSET: Any = object()
_negative = np.negative
_swig_ptr = faiss.swig_ptr


def sync_threads() -> None:
    """Apply the pinned thread count to faiss's OpenMP if someone changed it."""
    n = get_threads()
    if faiss.omp_get_max_threads() != n:
        faiss.omp_set_num_threads(n)


FAISS_METRIC = {
    "ip": faiss.METRIC_INNER_PRODUCT,
    "cosine": faiss.METRIC_INNER_PRODUCT,
    "l2": faiss.METRIC_L2,
}


class FaissSearch(LiveVectorIndex):
    """The search half of a float32 faiss index: state, checks, filters, writes."""

    library: ClassVar[str] = "faiss"
    chunked_add: ClassVar[bool] = True  # whether add() in chunks builds the same index
    payload_format: ClassVar[str] = "faiss.serialize_index"
    #: Whether a NaN/inf in an ip/l2 query always leaves a pad or an infinite
    #: score last in its answer (float distances that faiss's heaps refuse as
    #: NaN), so a finite last score proves the query finite: true for flat
    #: storage (flat, HNSW, IVF-flat), not for codes the query is quantized
    #: against (LSH's sign bits, fast-scan's 8-bit tables), which turn a NaN
    #: into finite distances. See ``_check_single_answer``.
    finite_answer_proves_query: ClassVar[bool] = False
    # Negate library distances into scores (L2 distances, Hamming distances).
    _negate: bool

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._negate = metric == "l2"
        self._index: Any = None
        # (search_c, (1, dim), live count, labels_ext or None, check_after) once
        # built: the fast path reads one attribute.
        self._state: tuple[Any, tuple[int, int], int, Any, bool] | None = None
        # (ef object, nprobe object, compiled) of the last call that passed one.
        self._last_call: tuple[Any, Any, Any] = (UNSET, UNSET, None)
        # The repeat fast path of search(): (search_c, (1, dim), k, ef, nprobe,
        # SearchParameters, (1, k), negate) of the last checked single ip/l2
        # query. The same float32 C-contiguous (1, dim) query shape with the
        # same k, ef and nprobe objects (ints are immutable: the same object is
        # the same validated value) skips parsing and the parameter lookup:
        # after a search through a large index every object touched is cold,
        # and each attribute or call saved is ~0.3-2 µs then.
        self._fast: (
            tuple[Any, tuple[int, int], Any, Any, Any, Any, tuple[int, int], bool] | None
        ) = None
        self._memory: int | None = None
        self._tls = threading.local()
        self._init_live()
        sync_threads()

    # -- backend hooks ----------------------------------------------------------------

    def _params_for(self, compiled: Any, k: int) -> Any:
        """The ``faiss.SearchParameters`` for one call (``None`` = index defaults)."""
        return None

    def _on_space(self, space: IdSpace) -> None:
        self._state = (
            self._index.search_c,
            (1, self.dim),
            space.live,
            space.labels_ext(),
            self.finite_answer_proves_query and not self._cosine,
        )
        self._fast = None
        self._memory = None

    # -- search -----------------------------------------------------------------------

    def search(
        self,
        queries: Any,
        k: int,
        ef: Any = UNSET,
        nprobe: Any = UNSET,
        filter: Any = None,
        strategy: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, optionally restricted to an allow-list.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query; other
                numeric dtypes are converted).
            k: results per query, ``1 <= k <= ntotal``.
            ef, nprobe: the query parameter of ``faiss-hnsw`` / ``ivf``, per
                call. Named so a call passing one builds no dict; a backend
                without that parameter raises ConfigError as for any unknown
                name.
            filter: allow-list, see :mod:`ragbench.indexes.base`: a bool
                mask ``(id_bound,)`` or int ids for the batch, a bool
                ``(nq, id_bound)`` mask or a list of ``nq`` of them per query.
            strategy: ``"auto"`` (default), ``"pre"``, ``"post"`` or
                ``"in-graph"`` where the backend has it (:attr:`filter_strategies`).
            **params: further query parameters (see ``query_params``; none
                exist today, so any name here raises ConfigError).

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.

        Searches hold off while a write (``add``/``delete``) runs and a write
        waits for running searches (:class:`~ragbench.indexes._live.WriteGate`:
        no lock taken by a search unless a write is under way).
        """
        entries = self._gate_entries  # see WriteGate
        entries.append(None)
        if entries[0]:
            entries.pop()
            self._gate.wait_enter()
        try:
            if filter is None and strategy is None:
                # The repeat fast path of the index (see _fast), inline: a call
                # frame saved is ~1 µs on cold caches.
                fast = self._fast
                if (
                    fast is not None
                    and k is fast[2]
                    and ef is fast[3]
                    and nprobe is fast[4]
                    and not params
                    and type(queries) is _ndarray
                    and queries.dtype is F32
                    and queries.shape == fast[1]
                ):
                    try:
                        q_ptr = _swig_ptr(queries)
                    except ValueError:  # not C-contiguous: the checked path copies it
                        return self._search(queries, k, ef, nprobe, params)
                    scores = _empty(fast[6], F32)
                    ids = _empty(fast[6], I64)
                    fast[0](1, q_ptr, k, _swig_ptr(scores), _swig_ptr(ids), fast[5])
                    if fast[7]:
                        _negative(scores, scores)
                    if not -FLT_MAX < scores.item(-1) < INF:
                        self._check_single_answer(queries, ids, scores)
                    return ids, scores
                return self._search(queries, k, ef, nprobe, params)
            return self._search_filtered(
                queries, k, self._call_params(ef, nprobe, params), filter, strategy
            )
        finally:
            entries.pop()

    def _check_single_answer(self, q: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> None:
        """Raise for a NaN/inf single ip/l2 query, else mend the answer's pads in place.

        Called when the answer's last score is not a finite value above
        ``-FLT_MAX``. A NaN or inf anywhere in an ip/l2 query makes every
        distance NaN or ±inf; faiss's heaps (flat, HNSW, IVF) never take a
        NaN, so such a query's answer ends in a pad or an infinite score,
        never a finite one. A finite last score thus proves the query finite
        for one ``item()`` after the search, instead of a numpy pass over the
        query before it on cold caches (``np.vdot`` of the row measured 14.6
        µs right after a flat search of 2k rows, 0.6 µs warm, on a host whose
        cache misses were slow). A finite query whose score overflows, or an
        answer with pads, also lands here: the exact check tells them apart.
        """
        self._slow_queries(q)
        if ids.item(-1) < 0:
            fix_padding(ids, scores)

    def _call_params(self, ef: Any, nprobe: Any, params: dict[str, Any]) -> Any:
        if ef is UNSET and nprobe is UNSET and not params:
            return self._default_compiled
        return self._parse_call(ef, nprobe, params)

    def _search(
        self, queries: Any, k: Any, ef: Any, nprobe: Any, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` without a filter, inside the gate; records the repeat fast path."""
        # Every object touched here is cold after a search through a large
        # index (~0.5-12 µs per numpy call then): one state tuple, one shape
        # comparison, faiss, and one item() after it on a single ip/l2 query
        # unless something must be fixed.
        if ef is UNSET and nprobe is UNSET and not params:
            compiled = self._default_compiled
        else:
            last = self._last_call
            # Identity: the same objects validated on an earlier call.
            if ef is last[0] and nprobe is last[1] and not params:
                compiled = last[2]
            else:
                compiled = self._parse_call(ef, nprobe, params)
        state = self._state
        if state is None:
            raise self._not_built()
        search_c, one_row, ntotal, labels_ext, check_after = state
        q, k_passed = queries, k
        if (
            type(q) is _ndarray
            and q.dtype is F32
            and q.shape == one_row
            and q.flags.c_contiguous
            # ip/l2: checked after the search (see _check_single_answer).
            # cosine: NaN/inf make the sum of squares NaN/inf; zero and
            # overflow (|x| > ~1e19) take the exact check in _queries.
            and (check_after or 0.0 < float(_vdot(q, q)) < INF)
        ):
            n = 1
        else:
            q = self._queries(q)
            n = q.shape[0]
            check_after = False
        if type(k) is not int or k < 1 or k > ntotal:
            k = check_k(k, ntotal)
        if n != 1:
            if n == 0:
                return _empty((0, k), I64), _empty((0, k), F32)
            sync_threads()
        if self._cosine:
            q = self._normalize_queries(q)
        scores = _empty((n, k), F32)
        ids = _empty((n, k), I64)
        sp = self._params_for(compiled, k)
        search_c(n, _swig_ptr(q), k, _swig_ptr(scores), _swig_ptr(ids), sp)
        if self._negate:
            _negative(scores, scores)
        if check_after:
            if labels_ext is None and type(k_passed) is int and not params:
                self._fast = (search_c, one_row, k_passed, ef, nprobe, sp, (1, k), self._negate)
            # One item() proves both: no pad (faiss pads last, with -FLT_MAX
            # as a score) and a finite query (see _check_single_answer).
            if not -FLT_MAX < scores.item(-1) < INF:
                self._check_single_answer(q, ids, scores)
        # faiss sorts each row and puts its -1 pads last: a pad anywhere means
        # one in the last column. item(): a Python int, no numpy scalar.
        elif ids.item(-1) < 0 or (n > 1 and (ids[:, k - 1] < 0).any()):
            fix_padding(ids, scores)
        if labels_ext is not None:
            ids = labels_ext[ids]
        return ids, scores

    # -- filtered search and writes (see ragbench.indexes.base) -----------------

    def _selector_params(self, compiled: Any, k: int, sel: Any) -> Any:
        """``SearchParameters`` restricted by the selector ``sel`` for one call."""
        return faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        q = self._queries(queries)
        return self._normalize_queries(q) if self._cosine and q.shape[0] else q

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        n = q.shape[0]
        q = np.ascontiguousarray(q, dtype=F32)
        scores = _empty((n, k), F32)
        ids = _empty((n, k), I64)
        if allow is None:
            params = self._params_for(self._default_compiled if compiled is None else compiled, k)
            bits = sel = None
        else:
            bits = np.packbits(allow, bitorder="little")
            sel = faiss.IDSelectorBitmap(allow.size, _swig_ptr(bits))
            params = self._thread_params(compiled, k)
            params.sel = sel
        if n > 1:
            sync_threads()
        # The cached params keep a pointer to this call's selector after it is
        # freed; harmless, as sel is set again before every use (unsetting it
        # through SWIG costs ~3 µs).
        self._index.search_c(n, _swig_ptr(q), k, _swig_ptr(scores), _swig_ptr(ids), params)
        del bits, sel
        if self._negate:
            _negative(scores, scores)
        if ids.item(-1) < 0 or (n > 1 and (ids[:, k - 1] < 0).any()):
            pads = ids < 0
            # faiss puts its pads last in each row; only their scores (±FLT_MAX) change.
            scores[pads] = -INF
            if (pads[:, :-1] & ~pads[:, 1:]).any():
                fix_padding(ids, scores)
        return ids, scores

    def _thread_params(self, compiled: Any, k: int) -> Any:
        """This thread's ``SearchParameters`` for ``(compiled, k)``, to take a selector.

        Building one costs ~5-7 µs in faiss's Python layer; kept per thread
        because its ``sel`` field is set for each call.
        """
        cache = getattr(self._tls, "params", None)
        if cache is None:
            cache = self._tls.params = {}
        key = (compiled, k)
        params = cache.get(key)
        if params is None:
            if len(cache) > 64:
                cache.clear()
            params = cache[key] = self._selector_params(compiled, k, None)
        return params

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        out: np.ndarray = self._index.reconstruct_n(0, space.n_pos)
        return out

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        sync_threads()
        self._index.add(vectors)

    def _lib_delete(self, positions: np.ndarray) -> None:
        removed = int(self._index.remove_ids(positions))
        if removed != positions.size:
            raise RuntimeError(f"faiss removed {removed} of {positions.size} rows")

    def _parse_call(self, ef: Any, nprobe: Any, params: dict[str, Any]) -> Any:
        """Validate this call's query params; remember a lone ef/nprobe object for the next call."""
        named = {
            key: value for key, value in (("ef", ef), ("nprobe", nprobe)) if value is not UNSET
        }
        compiled = self._parse_query({**named, **params})
        if not params:
            self._last_call = (ef, nprobe, compiled)
        return compiled

    def _queries(self, q: Any) -> np.ndarray:
        """Checked queries for anything but one float32 ``(1, dim)`` row (batches, other types).

        A float32 C-contiguous ``(nq, dim)`` batch passes on a min and a max pass
        (:func:`batch_is_finite`); a cosine batch needs its per-row zero-norm check, and every
        other input the full check of :meth:`_slow_queries`.
        """
        if (
            type(q) is _ndarray
            and q.dtype is F32
            and q.ndim == 2
            and q.shape[1] == self.dim
            and q.flags.c_contiguous
            and not self._cosine
            and batch_is_finite(q)
        ):
            return q
        return self._slow_queries(q)
