"""A faiss scalar-quantizer index (8-bit codes) as a ragbench backend: the how-to's example."""

from __future__ import annotations

from typing import Any, ClassVar

import faiss
import numpy as np

from ragbench.errors import IndexFileError
from ragbench.indexes.base import LiveVectorIndex


class ScalarQuantizerIndex(LiveVectorIndex):
    """faiss ``IndexScalarQuantizer``: one byte per dimension, scores from the codes."""

    name: ClassVar[str] = "sq8-example"
    library: ClassVar[str] = "faiss"
    payload_format: ClassVar[str] = "faiss.IndexScalarQuantizer"  # checked on load
    filter_strategies: ClassVar[tuple[str, ...]] = ("post",)  # no float32 vectors kept: no pre
    default_strategy: ClassVar[str] = "post"
    delete_mode: ClassVar[str | None] = "compact"  # remove_ids moves the later rows down

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        super().__init__(dim, metric, **build_params)
        self._init_live()
        self._index: Any = None

    def build(self, data: Any) -> None:
        vectors = self._corpus(data)  # float32 (n, dim), finite; unit rows for cosine
        index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit, self._kind())

        def run() -> None:  # timed: the library's build, in build_seconds and the record
            index.train(vectors)
            index.add(vectors)

        self._timed_build(run)
        self._index = index
        self._publish_built(index.ntotal)

    def _kind(self) -> int:
        return faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT

    def memory_bytes(self) -> int:
        if self._index is None:
            raise self._not_built()
        return int(self._index.sa_code_size()) * int(self._index.ntotal)

    def _prepare_queries(self, queries: Any) -> np.ndarray:
        q = self._slow_queries(queries)  # float32 (nq, dim), finite
        return self._normalize_queries(q) if self._cosine and q.shape[0] else q

    def _raw_search(self, q: np.ndarray, k: int, compiled: Any, allow: Any) -> Any:
        scores, positions = self._index.search(q, k)
        scores = -scores if self.metric == "l2" else scores  # higher is better
        scores[positions < 0] = -np.inf  # faiss pads with -1 and FLT_MAX
        return positions, scores

    def _lib_add(self, vectors: np.ndarray, positions: np.ndarray) -> None:
        self._index.add(vectors)  # appended: positions are the next rows

    def _lib_delete(self, positions: np.ndarray) -> None:
        self._index.remove_ids(positions)

    def _payload(self) -> memoryview:
        blob: Any = faiss.serialize_index(self._index)  # uint8 array
        return memoryview(blob)

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        try:  # the payload's sha256 matched the header; its contents are checked here
            index = faiss.deserialize_index(np.frombuffer(payload, dtype=np.uint8))
        except RuntimeError:
            raise IndexFileError(f"{self.name}: faiss cannot read the payload") from None
        fits = isinstance(index, faiss.IndexScalarQuantizer) and index.d == self.dim
        if not fits or index.metric_type != self._kind():
            raise IndexFileError(f"{self.name}: the payload is not what the header says")
        self._index = index
        self._publish_built(index.ntotal)
