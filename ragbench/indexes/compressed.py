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

Filtered search and live writes (see :mod:`ragbench.indexes.base`):
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

from ..errors import ConfigError, IndexFileError
from ..validate import positive_int
from ._binary_codes import BinaryFlatIndex, BinaryHnswIndex
from ._trained_codes import DEFAULT_TRAIN_SIZE, SampledCodes, check_train_params, train_sample
from .faiss_indexes import FAISS_METRIC, FaissHnswIndex, IvfIndex

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


# -------------------------------------------------------------------- IVF family


class _IvfCompressed(SampledCodes, IvfIndex):
    """IVF lists over a compressed code; ``nlist``/``seed``/``nprobe`` as in ``ivf``."""

    # The query is compared with codes: a NaN need not reach the scores.
    finite_answer_proves_query: ClassVar[bool] = False

    build_defaults: ClassVar[dict[str, Any]] = {
        "nlist": None,
        "seed": 1234,
        "train_size": DEFAULT_TRAIN_SIZE,
    }
    faiss_class: ClassVar[Any] = None

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super()._check_build_params(params)
        check_train_params(f"index {self.name!r}", params)
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
            quantizer, self.dim, nlist, p["m"], p["nbits"], FAISS_METRIC[self.metric]
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
            quantizer, self.dim, nlist, self.build_params["m"], 4, FAISS_METRIC[self.metric]
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
            quantizer,
            self.dim,
            nlist,
            faiss.ScalarQuantizer.QT_8bit,
            FAISS_METRIC[self.metric],
            True,
        )

    def _check_loaded(self, index: Any) -> None:
        super()._check_loaded(index)
        if index.sq.qtype != faiss.ScalarQuantizer.QT_8bit:
            raise IndexFileError(f"{self.name}: payload is not an 8-bit scalar quantizer")


# -------------------------------------------------------------------- HNSW family


class HnswSqIndex(SampledCodes, FaissHnswIndex):
    """faiss ``IndexHNSWSQ`` with ``QT_8bit``: an HNSW graph over 8-bit scalar codes.

    Build parameters ``M`` (default 16), ``ef_construction`` (200),
    ``train_size`` (50 000) and ``seed`` (1234, for the sample: the graph
    itself is built in insertion order); query parameter ``ef`` (64). Code:
    ``dim`` bytes per vector, plus the graph's links (see ``memory_bytes``).
    """

    # The query is compared with codes: a NaN need not reach the scores.
    finite_answer_proves_query: ClassVar[bool] = False

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
            check_train_params(f"index {self.name!r}", params)
        return params

    def _new_index(self, vectors: np.ndarray) -> Any:
        p = self.build_params
        index = faiss.IndexHNSWSQ(self.dim, self.qtype, p["M"], FAISS_METRIC[self.metric])
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
