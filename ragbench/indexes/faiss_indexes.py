"""faiss backends: ``flat`` (exact), ``faiss-hnsw``, ``ivf`` and ``lsh``.

Scores follow the package convention (higher is better): inner product for
``ip``, cosine for ``cosine``, negated squared L2 for ``l2``, and for ``lsh``
the negated Hamming distance between binary codes (see :class:`LshIndex`).

``cosine`` is inner product over unit vectors: the corpus is normalized into a
copy at build and every query batch is normalized into a new array at search
(one extra pass over the queries and one allocation, ~1 µs for a single
384-d query).

Search: the reference is :meth:`~ragbench.indexes.base.LiveVectorIndex.search`
over this module's hooks (``_prepare_queries``, ``_raw_search``); one float32
``(1, dim)`` ip/l2 query of ``flat``, ``faiss-hnsw`` or ``ivf`` is answered
first by :func:`~ragbench.indexes._fast_paths.faiss_one_query` (the
index-wrapper target), which returns exactly what the reference returns.
Both call ``index.search_c`` with freshly allocated result arrays and a
cached ``faiss.SearchParameters*`` object. Query parameters go through the
``SearchParameters`` object of each call, never through index fields, so
concurrent searches with different ``ef``/``nprobe`` on one index are safe.

Filtered search and live writes (see :mod:`ragbench.indexes.base`):

=============  ==========================  ========================================
backend        filter strategies           add / delete
=============  ==========================  ========================================
``flat``       pre, post, in-graph*        ``add``; ``delete`` = ``remove_ids``
                                           (the rows after shift down; ids kept)
``faiss-hnsw`` pre, post, in-graph*        ``add``; no delete (faiss HNSW has no
                                           ``remove_ids``): UnsupportedOperationError
``ivf``        pre, post, in-graph*        ``add_with_ids``; ``delete`` =
                                           ``remove_ids`` (the lists shrink)
``lsh``        post*                       ``add``; ``delete`` = ``remove_ids``
=============  ==========================  ========================================

(* what ``auto`` takes above 5 % selectivity; ``pre`` below, where offered.)
``in-graph`` passes an ``IDSelectorBitmap`` over the rows in the call's
``SearchParameters`` (``SearchParametersHNSW`` / ``SearchParametersIVF``
with the call's ``ef`` / ``nprobe``); ``IndexLSH::search`` takes no search
parameters, hence ``post`` only, and it keeps no vectors, hence no ``pre``.

Thread-safety: any number of threads may search one index at once (faiss
searches are read-only). Writes are single-writer (a lock) and exclusive:
``add`` and ``delete`` wait for the running searches to finish and hold new
ones off until the library call returns (faiss reallocates its arrays on
``add``); a search takes no lock (:class:`~ragbench.indexes._writes_and_filters.WriteGate`).
A search started after a ``delete`` returned never sees the deleted ids.

Threads: batch searches (more than one query) and builds run with
``ragbench.threads.get_threads()`` OpenMP threads (applied when it changed);
a single-query search runs on the caller's thread as faiss decides for
``n == 1``.
"""

from __future__ import annotations

import math
import threading
from typing import Any, ClassVar

import faiss
import numpy as np

from .. import progress
from ..errors import ConfigError, IndexFileError
from ..threads import get_threads
from ..validate import bool_param, positive_int
from ._arrays import F32, I64, INF, INT32_MAX, batch_is_finite, build_chunks, fix_padding
from ._faiss_layout import check_faiss_payload
from ._fast_paths import faiss_one_query
from ._writes_and_filters import IdSpace
from .base import LiveVectorIndex

__all__ = ["FaissHnswIndex", "FlatIndex", "IvfIndex", "LshIndex"]

_ndarray = np.ndarray
_empty = np.empty
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


class FaissVectorIndex(LiveVectorIndex):
    """A float32 faiss index behind the index contract: search, build, writes and files.

    A subclass supplies the faiss index (``_new_index``), the payload check
    (``_check_loaded``) and its search parameters (``_params_for``,
    ``_selector_params``).
    """

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
        # faiss_one_query's state for the current id snapshot (see _on_space), or
        # None where the fast path cannot vouch for an answer (cosine, quantized codes).
        self._fast: tuple[Any, Any, tuple[int, int], int, bool, np.ndarray | None] | None = None
        self._memory: int | None = None
        self._tls = threading.local()
        self._init_live()
        sync_threads()

    # -- backend hooks ----------------------------------------------------------------

    def _params_for(self, compiled: Any, k: int) -> Any:
        """The ``faiss.SearchParameters`` for one call (``None`` = index defaults)."""
        return None

    def _on_space(self, space: IdSpace) -> None:
        # Called with no search running (build, load, or inside a write's exclusive section).
        self._fast = None
        if self.finite_answer_proves_query and not self._cosine:
            self._fast = (
                self._index.search_c,
                _swig_ptr,
                (1, self.dim),
                space.live,
                self._negate,
                space.labels_ext(),
            )
        self._memory = None

    # -- search -----------------------------------------------------------------------

    def search(
        self, queries: Any, k: int, *, filter: Any = None, strategy: Any = None, **params: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each query, optionally restricted to an allow-list.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query; other
                numeric dtypes are converted).
            k: results per query, ``1 <= k <= ntotal``.
            filter: allow-list, see :mod:`ragbench.indexes.base`: a bool
                mask ``(id_bound,)`` or int ids for the batch, a bool
                ``(nq, id_bound)`` mask or a list of ``nq`` of them per query.
            strategy: ``"auto"`` (default), ``"pre"``, ``"post"`` or
                ``"in-graph"`` where the backend has it (:attr:`filter_strategies`).
            **params: ``ef`` (``faiss-hnsw``) or ``nprobe`` (``ivf``), per call;
                any other name raises ConfigError.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)``, best
            first; ``-1`` / ``-inf`` where fewer than ``k`` were found.

        The reference search (:meth:`LiveVectorIndex.search`) answers every
        call that :func:`~ragbench.indexes._fast_paths.faiss_one_query` does
        not. Searches hold off while a write (``add``/``delete``) runs and a
        write waits for running searches (:class:`~ragbench.indexes._writes_and_filters.WriteGate`).
        """
        if filter is None and strategy is None:
            answer = faiss_one_query(self, queries, k, params)
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        return super().search(queries, k, filter=filter, strategy=strategy, **params)

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
        # freed; harmless, as sel is set again before every use (and the params
        # are this thread's: no other search reads them meanwhile).
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

        Kept per thread, not shared: its ``sel`` field is set for each call,
        so two threads' searches must not hold the same object.
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

    def _queries(self, q: Any) -> np.ndarray:
        """Checked float32 ``(nq, dim)`` queries: NaN/inf, width, cosine zero rows.

        A float32 C-contiguous ``(nq, dim)`` ip/l2 array passes on a min and a max pass
        (:func:`batch_is_finite`, which propagate NaN); cosine needs its per-row zero-norm
        check, and every other input the full check of :meth:`_slow_queries`.
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

    # -- backend hooks ----------------------------------------------------------------

    def _new_index(self, vectors: np.ndarray) -> Any:
        raise NotImplementedError

    def _check_loaded(self, index: Any) -> None:
        """Raise IndexFileError unless ``index`` is the right faiss class and metric."""
        raise NotImplementedError

    # -- build ------------------------------------------------------------------------

    def build(self, data: Any) -> None:
        """Index ``data``: float32 ``(n, dim)``, finite, n >= 1. Replaces any earlier build."""
        vectors = self._corpus(data)

        def run() -> None:
            sync_threads()
            index = self._new_index(vectors)
            if not index.is_trained:
                index.train(vectors)
            # One add() per chunk reports progress and answers Ctrl-C between calls; rows
            # are added independently of each other (the same index as one call), except in
            # HNSW, which orders each add() call's rows by level, so it gets one call.
            n = vectors.shape[0]
            chunks = build_chunks(n) if self.chunked_add else iter([(0, n)])
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start, stop in chunks:
                    index.add(vectors[start:stop])
                    advance(stop - start)
            self._set_index(index)

        self._timed_build(run)

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._memory = None
        self._tls = threading.local()  # cached SearchParameters follow the index (nlist)
        self._on_index_set()
        self._publish_built(int(index.ntotal))

    def _on_index_set(self) -> None:
        pass

    # -- size, persistence ------------------------------------------------------------

    def memory_bytes(self) -> int:
        """Bytes of the faiss index: its serialized size (the same arrays faiss holds)."""
        if self._index is None:
            raise self._not_built()
        if self._memory is None:
            self._memory = int(faiss.serialize_index(self._index).nbytes)
        return self._memory

    def _payload(self) -> memoryview:
        if self._index is None:
            raise self._not_built()
        blob: Any = faiss.serialize_index(self._index)
        return memoryview(blob)

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        count = header.get("count")
        if not isinstance(count, int):
            raise IndexFileError(f"{self.name}: header count is missing")
        # Sizes, dimensions and stored floats checked before faiss allocates anything.
        check_faiss_payload(payload, self.dim, count, self.name)
        try:
            index = faiss.deserialize_index(np.frombuffer(payload, dtype=np.uint8))
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown error"
            raise IndexFileError(f"{self.name}: faiss cannot read the payload: {first}") from None
        self._check_loaded(index)
        if int(index.d) != self.dim:
            raise IndexFileError(
                f"{self.name}: payload has dimension {index.d}, header says {self.dim}"
            )
        self._set_index(index)

    def _expect(self, index: Any, cls: Any, what: str) -> None:
        if not isinstance(index, cls):
            raise IndexFileError(
                f"{self.name}: payload is a faiss {type(index).__name__}, expected {what}"
            )
        if index.metric_type != FAISS_METRIC[self.metric]:
            raise IndexFileError(f"{self.name}: payload metric does not match {self.metric!r}")


class FlatIndex(FaissVectorIndex):
    """Exact search: faiss ``IndexFlatIP`` (``ip``, ``cosine``) or ``IndexFlatL2`` (``l2``).

    No build or query parameters. ``search`` cost is one pass over the
    corpus per query (memory bound).
    """

    name: ClassVar[str] = "flat"
    finite_answer_proves_query: ClassVar[bool] = True
    delete_mode: ClassVar[str | None] = "compact"

    def _new_index(self, vectors: np.ndarray) -> Any:
        return faiss.IndexFlatL2(self.dim) if self.metric == "l2" else faiss.IndexFlatIP(self.dim)

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        ntotal = int(self._index.ntotal)
        flat = faiss.rev_swig_ptr(self._index.get_xb(), ntotal * self.dim)
        return np.array(flat, dtype=F32).reshape(ntotal, self.dim)

    def memory_bytes(self) -> int:
        """Bytes of stored vectors: ``ntotal * dim * 4``."""
        if self._index is None:
            raise self._not_built()
        return int(self._index.ntotal) * int(self._index.code_size)

    def _check_loaded(self, index: Any) -> None:
        self._expect(index, faiss.IndexFlat, "IndexFlat")


class FaissHnswIndex(FaissVectorIndex):
    """faiss ``IndexHNSWFlat``.

    Build parameters: ``M`` (graph degree, default 16), ``ef_construction``
    (default 200), ``seed`` (faiss's level generator ``hnsw.rng``, default
    12345 as in faiss; on one build thread the graph depends only on it and
    the data). Query parameter: ``ef`` (faiss ``efSearch``, default 64),
    passed per call through ``faiss.SearchParametersHNSW``; ``ef < k`` is
    raised to ``k`` (a smaller beam cannot return ``k`` results) and ``ef``
    above ``ntotal`` lowered to it (same answer; faiss allocates by ``ef``).
    """

    name: ClassVar[str] = "faiss-hnsw"
    finite_answer_proves_query: ClassVar[bool] = True
    no_delete_reason: ClassVar[str] = (
        "faiss's IndexHNSWFlat has no remove_ids (its graph links cannot be undone)"
    )
    chunked_add: ClassVar[bool] = False
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 200, "seed": 12345}
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 64}

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["M"] = positive_int(owner, "M", params["M"], lo=2, hi=4096)
        params["ef_construction"] = positive_int(
            owner, "ef_construction", params["ef_construction"], hi=INT32_MAX
        )
        if "seed" in params:
            params["seed"] = positive_int(owner, "seed", params["seed"], lo=0, hi=2**31 - 1)
        return params

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        # One SearchParametersHNSW per ef value, shared by concurrent searches:
        # faiss only reads it (a selector goes into a per-thread copy instead).
        self._sp_cache: dict[int, Any] = {}
        super().__init__(dim, metric, **build_params)

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["ef"]

    def _params_for(self, compiled: Any, k: int) -> Any:
        ef = compiled if compiled >= k else k
        # faiss sizes its search heaps by efSearch (2**31 - 1 takes GBs and
        # ~30 s); a beam wider than the index keeps every node anyway, so the
        # answer is the same with ef = ntotal.
        if ef > self._n:
            ef = max(k, self._n)
        sp = self._sp_cache.get(ef)
        if sp is None:
            sp = self._sp_cache[ef] = faiss.SearchParametersHNSW(efSearch=ef)  # type: ignore[attr-defined]
        return sp

    def _selector_params(self, compiled: Any, k: int, sel: Any) -> Any:
        return faiss.SearchParametersHNSW(efSearch=max(compiled, k), sel=sel)  # type: ignore[attr-defined]

    def _new_index(self, vectors: np.ndarray) -> Any:
        index = faiss.IndexHNSWFlat(self.dim, self.build_params["M"], FAISS_METRIC[self.metric])
        index.hnsw.efConstruction = self.build_params["ef_construction"]
        index.hnsw.rng = faiss.RandomGenerator(self.build_params["seed"])  # type: ignore[attr-defined]
        return index

    def _check_loaded(self, index: Any) -> None:
        self._expect(index, faiss.IndexHNSWFlat, "IndexHNSWFlat")


class IvfIndex(FaissVectorIndex):
    """faiss ``IndexIVFFlat``: k-means lists, exact scan of the ``nprobe`` nearest.

    Build parameters: ``nlist`` (number of lists; default ``None`` = about
    ``4·sqrt(n)``, at most ``n // 39``), ``seed`` for k-means (default 1234).
    Query parameter: ``nprobe`` (default 8, clamped to ``nlist``), passed per
    call through ``faiss.SearchParametersIVF``.

    The quantizer is trained on the corpus itself. ``nlist > n`` is a
    :class:`ConfigError` at build. With fewer than 39 points per list faiss
    would print a warning on stderr; ragbench lowers faiss's
    ``min_points_per_centroid`` to ``n // nlist`` instead (the lists are then
    poorer, which recall shows) and reports ``points_per_list`` in
    ``info()``. Lists can hold fewer than ``k`` items: with small ``nprobe``
    the results are ``-1`` padded.
    """

    name: ClassVar[str] = "ivf"
    finite_answer_proves_query: ClassVar[bool] = True
    delete_mode: ClassVar[str | None] = "mark"
    build_defaults: ClassVar[dict[str, Any]] = {"nlist": None, "seed": 1234}
    query_defaults: ClassVar[dict[str, Any]] = {"nprobe": 8}

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        self._sp_cache: dict[int, Any] = {}
        self._nlist = 0
        self._train_rows = 0
        super().__init__(dim, metric, **build_params)

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        if params["nlist"] is not None:
            params["nlist"] = positive_int(owner, "nlist", params["nlist"], hi=INT32_MAX)
        params["seed"] = positive_int(owner, "seed", params["seed"], lo=0, hi=2**31 - 1)
        return params

    def _lists_for(self, n: int) -> int:
        nlist = self.build_params["nlist"]
        if nlist is None:
            return max(1, min(round(4 * math.sqrt(n)), n // 39))
        if nlist > n:
            raise ConfigError(
                f"index 'ivf': nlist={nlist} is larger than the corpus ({n} vectors); "
                f"pass nlist <= {n} (ideally <= {max(1, n // 39)}) or nlist=None for automatic"
            )
        return int(nlist)

    def _new_index(self, vectors: np.ndarray) -> Any:
        n = vectors.shape[0]
        nlist = self._lists_for(n)
        quantizer = (
            faiss.IndexFlatL2(self.dim) if self.metric == "l2" else faiss.IndexFlatIP(self.dim)
        )
        index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, FAISS_METRIC[self.metric])
        index.cp.seed = self.build_params["seed"]
        index.cp.min_points_per_centroid = max(1, min(39, n // nlist))
        self._train_rows = min(n, nlist * int(index.cp.max_points_per_centroid))
        self._quantizer = quantizer  # the IVF index borrows it
        return index

    def _on_index_set(self) -> None:
        self._nlist = int(self._index.nlist)
        self._sp_cache.clear()

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["nprobe"]

    def _params_for(self, compiled: Any, k: int) -> Any:
        sp = self._sp_cache.get(compiled)
        if sp is None:
            sp = self._sp_cache[compiled] = faiss.SearchParametersIVF(  # type: ignore[call-arg]
                nprobe=min(compiled, self._nlist)
            )
        return sp

    def _selector_params(self, compiled: Any, k: int, sel: Any) -> Any:
        return faiss.SearchParametersIVF(nprobe=min(compiled, self._nlist), sel=sel)  # type: ignore[call-arg]

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        # Explicit ids: after remove_ids, ntotal no longer equals the next position.
        sync_threads()
        self._index.add_with_ids(vectors, positions)

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        # IndexIVFFlat keeps each row's float32 values in its list, with its position.
        out = np.zeros((space.n_pos, self.dim), dtype=F32)
        invlists = self._index.invlists
        for lst in range(self._nlist):
            size = int(invlists.list_size(lst))
            if not size:
                continue
            ids = faiss.rev_swig_ptr(invlists.get_ids(lst), size).astype(I64)
            codes = faiss.rev_swig_ptr(invlists.get_codes(lst), size * self.dim * 4)
            out[ids] = np.frombuffer(codes.tobytes(), dtype=F32).reshape(size, self.dim)
        return out

    def extra_info(self) -> dict[str, Any]:
        if not self._nlist:
            return {}
        out: dict[str, Any] = {"nlist": self._nlist, "points_per_list": self._n / self._nlist}
        if self._train_rows:
            # faiss's k-means trains on a sample of at most max_points_per_centroid
            # rows per list, drawn with cp.seed (the build's seed)
            out.update(train_rows=self._train_rows, train_seed=self.build_params["seed"])
        return out

    def _check_loaded(self, index: Any) -> None:
        self._expect(index, faiss.IndexIVFFlat, "IndexIVFFlat")


class LshIndex(FaissVectorIndex):
    """faiss ``IndexLSH``: random-rotation sign codes compared by Hamming distance.

    Build parameters: ``nbits`` (code length, default 512), ``rotate_data``
    (random rotation before taking signs, default True; without it the first
    ``nbits`` coordinates are used, so ``nbits <= dim``), ``train_thresholds``
    (per-bit median thresholds learnt from the corpus, default False). No
    query parameters.

    Metrics ``ip`` and ``cosine`` (sign codes approximate the angle). Scores
    are **negated Hamming distances** (0 is an identical code, ``-nbits`` the
    opposite): they rank candidates and are not comparable with other
    indexes' scores. Use it as a candidate generator (ask for
    ``k_candidates``) and let the rerank stage re-score exactly.
    """

    name: ClassVar[str] = "lsh"
    filter_strategies: ClassVar[tuple[str, ...]] = ("post",)
    default_strategy: ClassVar[str] = "post"
    delete_mode: ClassVar[str | None] = "compact"
    supported_metrics: ClassVar[tuple[str, ...]] = ("ip", "cosine")
    build_defaults: ClassVar[dict[str, Any]] = {
        "nbits": 512,
        "rotate_data": True,
        "train_thresholds": False,
    }

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._negate = True

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["nbits"] = positive_int(owner, "nbits", params["nbits"], hi=65536)
        params["rotate_data"] = bool_param(owner, "rotate_data", params["rotate_data"])
        params["train_thresholds"] = bool_param(
            owner, "train_thresholds", params["train_thresholds"]
        )
        return params

    def _new_index(self, vectors: np.ndarray) -> Any:
        p = self.build_params
        if not p["rotate_data"] and p["nbits"] > self.dim:
            raise ConfigError(
                f"index 'lsh': nbits={p['nbits']} > dim={self.dim} needs rotate_data=True "
                "(without rotation the codes are the signs of the first nbits coordinates)"
            )
        return faiss.IndexLSH(self.dim, p["nbits"], p["rotate_data"], p["train_thresholds"])

    def _check_loaded(self, index: Any) -> None:
        if not isinstance(index, faiss.IndexLSH):
            raise IndexFileError(
                f"{self.name}: payload is a faiss {type(index).__name__}, expected IndexLSH"
            )
        if int(index.nbits) != self.build_params["nbits"]:
            raise IndexFileError(f"{self.name}: payload nbits does not match the header")
