"""``binary-flat`` and ``binary-hnsw``: faiss's binary indexes over the sign bits of each coordinate.

Registered from :mod:`ragbench.indexes.compressed` (which re-exports both
classes); its docstring describes the compressed backends, these two
included: sign codes, negated Hamming scores, filters and writes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import faiss
import numpy as np

from .. import progress
from ..errors import IndexFileError
from ..validate import positive_int
from ._arrays import F32, I64, batch_is_finite, build_chunks, fix_padding
from ._trained_codes import SampledCodes
from ._writes_and_filters import IdSpace
from .base import LiveVectorIndex
from .faiss_indexes import sync_threads

_ndarray = np.ndarray


class BinaryFlatIndex(SampledCodes, LiveVectorIndex):
    """faiss ``IndexBinaryFlat``: exhaustive Hamming search over sign bits.

    No build or query parameters and no training. Metrics ``ip`` and
    ``cosine``; scores are negated Hamming distances (``0`` to ``-bits``).
    Code: ``ceil(dim / 8)`` bytes per vector.

    Search: :meth:`LiveVectorIndex.search` over this class's hooks, the
    reference (no fast path). Filters: ``post`` and ``in-graph`` (an ``IDSelectorBitmap`` in
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
            sync_threads()
            index = self._new_index()
            n = vectors.shape[0]
            chunked = isinstance(index, faiss.IndexBinaryFlat)
            chunks = build_chunks(n) if chunked else iter([(0, n)])
            with progress.task(f"building {self.name}", n, unit="vectors") as advance:
                for start, stop in chunks:  # Ctrl-C is answered between calls
                    index.add(self.codes(vectors[start:stop]))
                    advance(stop - start)
            self._set_index(index)

        self._timed_build(run)

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._memory = None
        self._publish_built(int(index.ntotal))

    def _on_space(self, space: IdSpace) -> None:
        self._memory = None

    def _lib_search(self, q: np.ndarray, k: int, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Positions and negated Hamming distances of the top ``k``, ``-1``/``-inf`` padded."""
        n = q.shape[0]
        if n > 1:
            sync_threads()
        codes = self.codes(q)
        dist = np.empty((n, k), np.int32)
        ids = np.empty((n, k), I64)
        sw = faiss.swig_ptr
        self._index.search_c(n, sw(codes), k, sw(dist), sw(ids), params)
        scores = np.negative(dist, dtype=F32)
        if ids.item(-1) < 0 or (n > 1 and (ids[:, k - 1] < 0).any()):
            fix_padding(ids, scores)
        return ids, scores

    # -- filtered search and writes (see ragbench.indexes.base) -----------------

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
        sync_threads()
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
