"""Compressed faiss backends: product, scalar, fp16 and binary codes instead of float32 rows.

Each stores a code per vector far smaller than its ``dim * 4`` float32 bytes
and ranks by the code's approximate score; production systems re-score the
top ``k_candidates`` exactly from the float32 vectors (the pipeline's rerank
stage, the sweep's ``rescore`` parameter, with the numba reranker).

==============  ========================================  ===========================
backend         faiss index                               code bytes per vector
==============  ========================================  ===========================
``ivfpq``       ``IndexIVFPQ`` (``m``, ``nbits``)           ``ceil(m * nbits / 8)``
``ivfpq-fs``    ``IndexIVFPQFastScan`` (``m``, nbits 4)     ``ceil(m / 2)``
``ivf-sq8``     ``IndexIVFScalarQuantizer`` QT_8bit         ``dim``
``hnsw-sq``     ``IndexHNSWSQ`` QT_8bit                     ``dim``
``hnsw-fp16``   ``IndexHNSWSQ`` QT_fp16                     ``2 * dim``
``binary-flat`` ``IndexBinaryFlat`` (Hamming)               ``ceil(dim / 8)``
``binary-hnsw`` ``IndexBinaryHNSW`` (Hamming)               ``ceil(dim / 8)``
==============  ========================================  ===========================

IVF lists also hold an int64 id per vector and HNSW graphs their links:
:meth:`memory_bytes` (the serialized index) counts them,
:meth:`code_bytes_per_vector` is the code alone.

Training (k-means lists, PQ codebooks, SQ ranges) runs on a seeded sample of
the corpus: ``train_size`` rows (default 50 000, all rows when the corpus is
smaller) drawn without replacement by ``numpy.random.default_rng(seed)``, the
same ``seed`` seeding faiss's k-means; ``info()`` reports ``train_rows`` and
``train_seed``. The same corpus and parameters build the same index.

The binary backends keep the sign of each coordinate (bit set when ``x > 0``;
cosine's normalisation does not change a sign), ``dim`` bits padded with zero
bits to whole bytes; they support ``ip`` and ``cosine`` and score by the
**negated Hamming distance**, like ``lsh``: a candidate generator whose
results the rerank stage re-scores.

Filtered search and live writes (see :mod:`ragbench.indexes._writable`):
every compressed backend offers the ``post`` and ``in-graph`` strategies
(``auto`` = ``in-graph``; faiss's ``IDSelectorBitmap`` in the call's
``SearchParametersIVF`` / ``SearchParametersHNSW`` / ``SearchParameters``),
never ``pre``: that is exact over the allowed rows' float32 vectors, which
these indexes do not keep. ``add`` works on all seven (codes are encoded with
the trained quantizers; the IVF lists take ``add_with_ids``). ``delete``:
``ivfpq`` and ``ivf-sq8`` mark the rows and call ``remove_ids`` (as ``ivf``),
``binary-flat`` calls ``remove_ids`` (rows after it shift down, as ``flat``);
``hnsw-sq``, ``hnsw-fp16`` and ``binary-hnsw`` raise
UnsupportedOperationError (faiss's HNSW graphs have no ``remove_ids``), and so
does ``ivfpq-fs``: faiss's fast-scan ``remove_ids`` repacks the 32-row code
blocks, and rows added after it are then missed by their own vectors.
"""

from __future__ import annotations

from typing import Any, ClassVar

import faiss
import numpy as np

from .. import progress
from ..errors import ConfigError, IndexFileError, UnsupportedOperationError
from ..threads import get_threads
from ..validate import check_k, positive_int
from ._common import F32, I64, INF, batch_is_finite, build_step, fix_padding
from ._live import IdSpace
from ._writable import LiveVectorIndex
from .faiss_indexes import FaissHnswIndex, IvfIndex

__all__ = [
    "BinaryFlatIndex",
    "BinaryHnswIndex",
    "HnswFp16Index",
    "HnswSqIndex",
    "IvfPqFastScanIndex",
    "IvfPqIndex",
    "IvfSq8Index",
    "train_sample",
]

DEFAULT_TRAIN_SIZE = 50_000
_METRIC = {
    "ip": faiss.METRIC_INNER_PRODUCT,
    "cosine": faiss.METRIC_INNER_PRODUCT,
    "l2": faiss.METRIC_L2,
}
_ndarray = np.ndarray
_vdot = getattr(np.vdot, "_implementation", np.vdot)
_UNSET: Any = object()


def train_sample(vectors: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``size`` rows of ``vectors`` (all when ``size >= n``), drawn by ``default_rng(seed)``.

    Returns a float32 C-contiguous ``(min(size, n), dim)`` array in corpus
    order (sorted row indices), the same for the same inputs everywhere.
    """
    n = vectors.shape[0]
    if size >= n:
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    return np.ascontiguousarray(vectors[rows])


def _sync_threads() -> None:
    n = get_threads()
    if faiss.omp_get_max_threads() != n:
        faiss.omp_set_num_threads(n)


def _check_train_params(owner: str, params: dict[str, Any]) -> None:
    params["train_size"] = positive_int(owner, "train_size", params["train_size"])
    params["seed"] = positive_int(owner, "seed", params["seed"], lo=0, hi=2**31 - 1)


class _Sampled:
    """Shared by the compressed backends: the sample, its facts in ``info()``, the code size.

    Also their filter strategies: ``post`` and ``in-graph`` only. ``pre`` is
    exact over the allowed rows' float32 vectors, which these indexes do not
    keep (only their codes), so it is refused (ConfigError naming the
    strategies offered); ``auto`` takes ``in-graph``.
    """

    name: ClassVar[str]
    build_params: dict[str, Any]
    _index: Any
    _train_rows: int = 0
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        raise UnsupportedOperationError(
            f"index {self.name!r}: the 'pre' filter strategy needs the float32 vectors, "
            "which a compressed index does not keep (only their codes)"
        )

    def _sample(self, vectors: np.ndarray) -> np.ndarray:
        p = self.build_params
        sample = train_sample(vectors, p["train_size"], p["seed"])
        self._train_rows = int(sample.shape[0])
        return sample

    @property
    def faiss_index(self) -> Any:
        """The built faiss object (``None`` before ``build``), for comparisons with faiss's own
        wrappers such as ``IndexRefineFlat``; searching it directly bypasses ragbench's checks."""
        return self._index

    def code_bytes_per_vector(self) -> int:
        """Bytes of one vector's code (faiss ``code_size``): no ids, links or centroids."""
        if self._index is None:
            raise ConfigError(f"index {self.name!r}: call build(data) first")
        return int(self._code_size(self._index))

    def _code_size(self, index: Any) -> int:
        return int(index.code_size)

    def _train_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"train_rows": self._train_rows}
        if "seed" in self.build_params:
            out["train_seed"] = self.build_params["seed"]
        if self._index is not None:
            out["code_bytes_per_vector"] = self.code_bytes_per_vector()
        return out


# -------------------------------------------------------------------- IVF family


class _IvfCompressed(_Sampled, IvfIndex):
    """IVF lists over a compressed code; ``nlist``/``seed``/``nprobe`` as in ``ivf``."""

    build_defaults: ClassVar[dict[str, Any]] = {
        "nlist": None,
        "seed": 1234,
        "train_size": DEFAULT_TRAIN_SIZE,
    }
    faiss_class: ClassVar[Any] = None

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super()._check_build_params(params)
        _check_train_params(f"index {self.name!r}", params)
        return params

    def _make(self, quantizer: Any, nlist: int) -> Any:
        raise NotImplementedError

    def _new_index(self, vectors: np.ndarray) -> Any:
        sample = self._sample(vectors)
        rows = sample.shape[0]
        nlist = self._lists_for(vectors.shape[0])
        if nlist > rows:
            raise ConfigError(
                f"index {self.name!r}: nlist={nlist} needs at least {nlist} training rows; "
                f"train_size gives {rows} (raise train_size or lower nlist)"
            )
        quantizer = (
            faiss.IndexFlatL2(self.dim) if self.metric == "l2" else faiss.IndexFlatIP(self.dim)
        )
        index = self._make(quantizer, nlist)
        index.cp.seed = self.build_params["seed"]
        index.cp.min_points_per_centroid = max(1, min(39, rows // nlist))
        self._quantizer = quantizer  # the IVF index borrows it
        index.train(sample)
        return index

    def extra_info(self) -> dict[str, Any]:
        return {**super().extra_info(), **self._train_info()}

    def _check_loaded(self, index: Any) -> None:
        self._expect(index, self.faiss_class, self.faiss_class.__name__)


def _resolve_m(owner: str, dim: int, m: int | None, per: int) -> int:
    """PQ sub-quantizers: ``m`` checked to divide ``dim``, or ``dim // per`` rounded to a divisor."""
    if m is None:
        m = max(1, dim // per)
        while dim % m:
            m -= 1
        return m
    if dim % m:
        raise ConfigError(f"{owner}: m={m} must divide dim={dim} (each sub-vector is dim/m wide)")
    return m


class _PqMixin(_IvfCompressed):
    nbits_fixed: ClassVar[int | None] = None

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super()._check_build_params(params)
        owner = f"index {self.name!r}"
        if params["m"] is not None:
            params["m"] = positive_int(owner, "m", params["m"], hi=self.dim)
        if "nbits" in params:
            params["nbits"] = positive_int(owner, "nbits", params["nbits"], hi=16)
        params["m"] = _resolve_m(owner, self.dim, params["m"], 8)
        return params

    def _pq_setup(self, index: Any, rows: int, nbits: int) -> None:
        if rows < 2**nbits:
            raise ConfigError(
                f"index {self.name!r}: nbits={nbits} needs at least {2**nbits} training rows "
                f"(one per codebook entry); the sample has {rows} (lower nbits or add data)"
            )
        index.pq.cp.seed = self.build_params["seed"]
        # faiss would print a warning below 39 rows per codebook entry.
        index.pq.cp.min_points_per_centroid = max(1, min(39, rows // 2**nbits))


class IvfPqIndex(_PqMixin):
    """faiss ``IndexIVFPQ``: IVF lists of product-quantized residuals.

    Build parameters: ``nlist`` (default ``None`` = automatic, as ``ivf``),
    ``m`` (sub-quantizers; must divide ``dim``; default ``None`` = ``dim // 8``
    rounded down to a divisor, e.g. 48 for 384-d), ``nbits`` (bits per
    sub-code, default 8; the sample needs ``2**nbits`` rows), ``train_size``
    (default 50 000) and ``seed`` (default 1234). Query parameter ``nprobe``
    (default 8). Code: ``ceil(m * nbits / 8)`` bytes per vector.
    """

    name: ClassVar[str] = "ivfpq"
    build_defaults: ClassVar[dict[str, Any]] = {
        **_IvfCompressed.build_defaults,
        "m": None,
        "nbits": 8,
    }
    faiss_class: ClassVar[Any] = faiss.IndexIVFPQ

    def _make(self, quantizer: Any, nlist: int) -> Any:
        p = self.build_params
        index = faiss.IndexIVFPQ(
            quantizer, self.dim, nlist, p["m"], p["nbits"], _METRIC[self.metric]
        )
        self._pq_setup(index, self._train_rows, p["nbits"])
        return index


class IvfPqFastScanIndex(_PqMixin):
    """faiss ``IndexIVFPQFastScan``: 4-bit PQ codes scanned 32 at a time with SIMD lookups.

    Parameters as ``ivfpq`` without ``nbits`` (always 4). The look-up tables
    are quantized to 8 bits, so scores are coarser than ``ivfpq``'s: re-score.
    Code: ``ceil(m / 2)`` bytes per vector (lists are padded to blocks of 32).
    ``add`` works; ``delete`` raises UnsupportedOperationError (see the module
    docstring: faiss's fast-scan ``remove_ids`` breaks later adds).
    """

    name: ClassVar[str] = "ivfpq-fs"
    delete_mode: ClassVar[str | None] = None
    no_delete_reason: ClassVar[str] = (
        "faiss's IndexIVFPQFastScan remove_ids breaks later adds (faiss 1.15.1: after "
        "interleaved add_with_ids/remove_ids, about a quarter of the rows added are no "
        "longer their own vector's nearest neighbour)"
    )
    build_defaults: ClassVar[dict[str, Any]] = {**_IvfCompressed.build_defaults, "m": None}
    faiss_class: ClassVar[Any] = faiss.IndexIVFPQFastScan

    def _make(self, quantizer: Any, nlist: int) -> Any:
        index = faiss.IndexIVFPQFastScan(
            quantizer, self.dim, nlist, self.build_params["m"], 4, _METRIC[self.metric]
        )
        self._pq_setup(index, self._train_rows, 4)
        return index


class IvfSq8Index(_IvfCompressed):
    """faiss ``IndexIVFScalarQuantizer`` with ``QT_8bit``: one byte per coordinate.

    Build parameters ``nlist``, ``train_size``, ``seed``; query parameter
    ``nprobe``, as ``ivfpq``. Residuals are quantized per dimension to 8
    bits between ranges learnt from the sample. Code: ``dim`` bytes.
    """

    name: ClassVar[str] = "ivf-sq8"
    faiss_class: ClassVar[Any] = faiss.IndexIVFScalarQuantizer

    def _make(self, quantizer: Any, nlist: int) -> Any:
        return faiss.IndexIVFScalarQuantizer(
            quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, _METRIC[self.metric], True
        )

    def _check_loaded(self, index: Any) -> None:
        super()._check_loaded(index)
        if index.sq.qtype != faiss.ScalarQuantizer.QT_8bit:
            raise IndexFileError(f"{self.name}: payload is not an 8-bit scalar quantizer")


# -------------------------------------------------------------------- HNSW family


class HnswSqIndex(_Sampled, FaissHnswIndex):
    """faiss ``IndexHNSWSQ`` with ``QT_8bit``: an HNSW graph over 8-bit scalar codes.

    Build parameters ``M`` (default 16), ``ef_construction`` (200),
    ``train_size`` (50 000) and ``seed`` (1234, for the sample: the graph
    itself is built in insertion order); query parameter ``ef`` (64). Code:
    ``dim`` bytes per vector, plus the graph's links (see ``memory_bytes``).
    """

    name: ClassVar[str] = "hnsw-sq"
    no_delete_reason: ClassVar[str] = (
        "faiss's IndexHNSWSQ has no remove_ids (its graph links cannot be undone)"
    )
    build_defaults: ClassVar[dict[str, Any]] = {
        "M": 16,
        "ef_construction": 200,
        "train_size": DEFAULT_TRAIN_SIZE,
        "seed": 1234,
    }
    qtype: ClassVar[Any] = faiss.ScalarQuantizer.QT_8bit

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super()._check_build_params(params)
        if "train_size" in params:
            _check_train_params(f"index {self.name!r}", params)
        return params

    def _new_index(self, vectors: np.ndarray) -> Any:
        p = self.build_params
        index = faiss.IndexHNSWSQ(self.dim, self.qtype, p["M"], _METRIC[self.metric])
        index.hnsw.efConstruction = p["ef_construction"]
        if not index.is_trained:
            index.train(self._sample(vectors))
        return index

    def _code_size(self, index: Any) -> int:
        storage: Any = faiss.downcast_index(index.storage)
        return int(storage.code_size)

    def extra_info(self) -> dict[str, Any]:
        return {**super().extra_info(), **self._train_info()}

    def _check_loaded(self, index: Any) -> None:
        self._expect(index, faiss.IndexHNSWSQ, "IndexHNSWSQ")
        storage = faiss.downcast_index(index.storage)
        if not isinstance(storage, faiss.IndexScalarQuantizer) or storage.sq.qtype != self.qtype:
            raise IndexFileError(f"{self.name}: payload's scalar quantizer is of another type")


class HnswFp16Index(HnswSqIndex):
    """faiss ``IndexHNSWSQ`` with ``QT_fp16``: vectors stored as float16 (no training).

    Build parameters ``M`` (16) and ``ef_construction`` (200); query
    parameter ``ef`` (64). Code: ``2 * dim`` bytes per vector. (hnswlib
    stores float32 only.)
    """

    name: ClassVar[str] = "hnsw-fp16"
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 200}
    qtype: ClassVar[Any] = faiss.ScalarQuantizer.QT_fp16


# -------------------------------------------------------------------- binary codes


class BinaryFlatIndex(_Sampled, LiveVectorIndex):
    """faiss ``IndexBinaryFlat``: exhaustive Hamming search over sign bits.

    No build or query parameters and no training. Metrics ``ip`` and
    ``cosine``; scores are negated Hamming distances (``0`` to ``-bits``).
    Code: ``ceil(dim / 8)`` bytes per vector.

    Filters: ``post`` and ``in-graph`` (an ``IDSelectorBitmap`` in
    ``SearchParameters``: the scan skips disallowed rows, so it is the exact
    Hamming top-k of the allowed rows); no ``pre`` (no float32 vectors kept).
    ``add`` appends sign codes; ``delete`` is ``remove_ids`` (the rows after
    shift down; ids kept). Writes hold searches off as in ``flat``.
    """

    name: ClassVar[str] = "binary-flat"
    library: ClassVar[str] = "faiss"
    supported_metrics: ClassVar[tuple[str, ...]] = ("ip", "cosine")
    payload_format: ClassVar[str] = "faiss.serialize_index_binary"
    faiss_class: ClassVar[Any] = faiss.IndexBinaryFlat
    delete_mode: ClassVar[str | None] = "compact"

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._index: Any = None
        self._bits = -(-self.dim // 8) * 8
        self._memory: int | None = None
        self._last_call: tuple[Any, Any] = (_UNSET, None)
        # (live count, labels_ext or None) of the published id snapshot.
        self._state: tuple[int, np.ndarray | None] = (0, None)
        self._init_live()

    def _new_index(self) -> Any:
        return faiss.IndexBinaryFlat(self._bits)

    def _params_for(self, compiled: Any, k: int) -> Any:
        return None

    def _selector_params(self, compiled: Any, k: int, sel: Any) -> Any:
        """``SearchParameters`` restricted by ``sel`` (faiss's binary indexes honour it)."""
        return faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]

    @staticmethod
    def codes(vectors: np.ndarray) -> np.ndarray:
        """Sign bits of float ``(n, dim)`` rows: uint8 ``(n, ceil(dim / 8))``, bit ``j % 8`` of byte ``j // 8``."""
        return np.packbits(vectors > 0, axis=1, bitorder="little")

    def build(self, data: Any) -> None:
        """Index the sign bits of ``data``: float32 ``(n, dim)``, finite, n >= 1."""
        vectors = self._corpus(data)

        def run() -> None:
            _sync_threads()
            index = self._new_index()
            n = vectors.shape[0]
            step = build_step(n) if isinstance(index, faiss.IndexBinaryFlat) else n
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start in range(0, n, step):
                    index.add(self.codes(vectors[start : start + step]))
                    advance(min(step, n - start))
            self._set_index(index)

        self._timed_build(run)

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._memory = None
        self._publish_built(int(index.ntotal))

    def _on_space(self, space: IdSpace) -> None:
        self._state = (space.live, space.labels_ext())
        self._memory = None

    def _compiled_for(self, ef: Any, params: dict[str, Any]) -> Any:
        if ef is _UNSET and not params:
            return self._default_compiled
        if ef is self._last_call[0] and not params:
            return self._last_call[1]
        compiled = self._parse_query({**({} if ef is _UNSET else {"ef": ef}), **params})
        if not params:
            self._last_call = (ef, compiled)
        return compiled

    def search(
        self,
        queries: Any,
        k: int,
        ef: Any = _UNSET,
        filter: Any = None,
        strategy: Any = None,
        **params: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by Hamming distance of the queries' sign bits, optionally filtered.

        Args:
            queries: float32 ``(nq, dim)`` (a 1-D vector is one query).
            k: results per query, ``1 <= k <= ntotal``.
            ef: ``binary-hnsw``'s beam width (raised to ``k``); others raise ConfigError.
            filter, strategy: the allow-list and how to apply it (``post`` or
                ``in-graph``), see :mod:`ragbench.indexes._writable`.

        Returns:
            ``ids`` int64 ``(nq, k)`` and ``scores`` float32 ``(nq, k)`` (negated
            Hamming distances), best first; ``-1`` / ``-inf`` where fewer were found.
        """
        gate = self._gate
        active = gate.active
        active.append(None)
        if gate.writing:
            active.pop()
            gate.wait_enter()
        try:
            compiled = self._compiled_for(ef, params)
            if filter is None and strategy is None:
                return self._search(queries, k, compiled)
            return self._search_filtered(queries, k, compiled, filter, strategy)
        finally:
            active.pop()

    def _search(self, queries: Any, k: Any, compiled: Any) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` without a filter, inside the gate."""
        index = self._index
        if index is None:
            raise self._not_built()
        live, labels_ext = self._state
        q = queries
        if not (
            type(q) is _ndarray
            and q.dtype is F32
            and q.shape == (1, self.dim)
            and q.flags.c_contiguous
            and 0.0 < float(_vdot(q, q)) < INF
        ):
            q = self._checked(q)
        n = q.shape[0]
        if type(k) is not int or k < 1 or k > live:
            k = check_k(k, live)
        if n == 0:
            return np.empty((0, k), I64), np.empty((0, k), F32)
        ids, scores = self._lib_search(q, k, self._params_for(compiled, k))
        if labels_ext is not None:
            ids = labels_ext[ids]
        return ids, scores

    def _lib_search(self, q: np.ndarray, k: int, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Positions and negated Hamming distances of the top ``k``, ``-1``/``-inf`` padded."""
        n = q.shape[0]
        if n > 1:
            _sync_threads()
        codes = self.codes(q)
        dist = np.empty((n, k), np.int32)
        ids = np.empty((n, k), I64)
        sw = faiss.swig_ptr
        self._index.search_c(n, sw(codes), k, sw(dist), sw(ids), params)
        scores = np.negative(dist, dtype=F32)
        if ids.item(-1) < 0 or (n > 1 and (ids[:, k - 1] < 0).any()):
            fix_padding(ids, scores)
        return ids, scores

    # -- filtered search and writes (see ragbench.indexes._writable) -----------------

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        return self._checked(queries)

    def _raw_search(
        self, q: np.ndarray, k: int, compiled: Any, allow: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if compiled is None:
            compiled = self._default_compiled
        if allow is None:
            return self._lib_search(q, k, self._params_for(compiled, k))
        bits = np.packbits(allow, bitorder="little")
        sel = faiss.IDSelectorBitmap(allow.size, faiss.swig_ptr(bits))
        out = self._lib_search(q, k, self._selector_params(compiled, k, sel))
        del bits, sel  # alive until faiss returned
        return out

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        _sync_threads()
        self._index.add(self.codes(vectors))

    def _lib_delete(self, positions: np.ndarray) -> None:
        removed = int(self._index.remove_ids(positions))
        if removed != positions.size:
            raise RuntimeError(f"faiss removed {removed} of {positions.size} rows")

    def _checked(self, q: Any) -> np.ndarray:
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

    def _code_size(self, index: Any) -> int:
        return int(index.code_size)

    def extra_info(self) -> dict[str, Any]:
        if self._index is None:
            return {"bits": self._bits}
        return {"bits": self._bits, "code_bytes_per_vector": self.code_bytes_per_vector()}

    def memory_bytes(self) -> int:
        """Bytes of the faiss index: its serialized size."""
        if self._index is None:
            raise self._not_built()
        if self._memory is None:
            self._memory = int(faiss.serialize_index_binary(self._index).nbytes)
        return self._memory

    def _payload(self) -> memoryview:
        if self._index is None:
            raise self._not_built()
        blob: Any = faiss.serialize_index_binary(self._index)
        return memoryview(blob)

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        try:
            index = faiss.deserialize_index_binary(np.frombuffer(payload, dtype=np.uint8))
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown error"
            raise IndexFileError(f"{self.name}: faiss cannot read the payload: {first}") from None
        want = self.faiss_class
        if not isinstance(index, want):
            raise IndexFileError(
                f"{self.name}: payload is a faiss {type(index).__name__}, expected {want.__name__}"
            )
        if int(index.d) != self._bits:
            raise IndexFileError(
                f"{self.name}: payload has {index.d} bits, header's dim {self.dim} needs {self._bits}"
            )
        self._set_index(index)


class BinaryHnswIndex(BinaryFlatIndex):
    """faiss ``IndexBinaryHNSW``: an HNSW graph over sign bits, Hamming distance.

    Build parameters ``M`` (default 16) and ``ef_construction`` (200); query
    parameter ``ef`` (default 64, raised to ``k``). Scores as ``binary-flat``.

    Filters: ``post`` and ``in-graph`` (the selector in ``SearchParametersHNSW``
    with the call's ``ef``). ``add`` inserts into the graph; no ``delete``
    (UnsupportedOperationError: faiss has no ``remove_ids`` for it).
    """

    name: ClassVar[str] = "binary-hnsw"
    delete_mode: ClassVar[str | None] = None
    no_delete_reason: ClassVar[str] = (
        "faiss's IndexBinaryHNSW has no remove_ids (its graph links cannot be undone)"
    )
    build_defaults: ClassVar[dict[str, Any]] = {"M": 16, "ef_construction": 200}
    query_defaults: ClassVar[dict[str, Any]] = {"ef": 64}
    faiss_class: ClassVar[Any] = faiss.IndexBinaryHNSW

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        self._sp_cache: dict[int, Any] = {}
        super().__init__(dim, metric, **build_params)

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["M"] = positive_int(owner, "M", params["M"], lo=2, hi=4096)
        params["ef_construction"] = positive_int(
            owner, "ef_construction", params["ef_construction"]
        )
        return params

    def _new_index(self) -> Any:
        index = faiss.IndexBinaryHNSW(self._bits, self.build_params["M"])
        index.hnsw.efConstruction = self.build_params["ef_construction"]
        return index

    def _compile_query(self, params: dict[str, Any]) -> Any:
        return params["ef"]

    def _params_for(self, compiled: Any, k: int) -> Any:
        ef = compiled if compiled >= k else k
        sp = self._sp_cache.get(ef)
        if sp is None:
            sp = self._sp_cache[ef] = faiss.SearchParametersHNSW(efSearch=ef)  # type: ignore[attr-defined]
        return sp

    def _selector_params(self, compiled: Any, k: int, sel: Any) -> Any:
        return faiss.SearchParametersHNSW(efSearch=max(compiled, k), sel=sel)  # type: ignore[attr-defined]
