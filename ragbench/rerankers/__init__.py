"""Exact re-scoring of retrieval candidates behind one :class:`Reranker` protocol.

``rerank(query (d,), candidate_ids int64 (n,), vectors float32 (N, d), k)``
returns the k best candidates, sorted best first, ties broken by smaller id,
as ``(ids int64 (k,), scores float32 (k,))`` padded with ``-1``.

``cross-encoder`` reads texts instead (``input_kind = "texts"``):
``rerank_texts(query str, candidate_ids, texts, k)``; see
:mod:`ragbench.rerankers.cross_encoder` and :mod:`ragbench.rerankers.texts`.

There is no ``"none"`` reranker: a pipeline's ``rerank = "none"`` means no
rerank stage at all (the retriever's own top k and scores are kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._registry import Registry

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CAVEAT_PREFIX", "TEXT_RERANKERS", "Reranker", "create", "names", "register", "registry"]

#: Built-in rerankers that score texts (``rerank_texts``), not vectors.
TEXT_RERANKERS = frozenset({"cross-encoder"})

#: How the caveat of a reranker whose scores mean nothing (random weights) starts.
CAVEAT_PREFIX = "RANDOM WEIGHTS (rerank="


@runtime_checkable
class Reranker(Protocol):
    name: str
    metric: str

    def rerank(
        self, query: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def rerank_batch(
        self, queries: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def warmup(self, dim: int) -> int:
        """Compile/prepare; return the nanoseconds it took (0 if nothing to do)."""
        ...


registry: Registry[Reranker] = Registry(
    "rerankers",
    {
        "numba": "ragbench.rerankers.numba_reranker:NumbaReranker",
        "cross-encoder": "ragbench.rerankers.cross_encoder:CrossEncoderReranker",
        "numpy": "ragbench.rerankers.numpy_reranker:NumpyReranker",
        "python": "ragbench.rerankers.python_reranker:PythonReranker",
    },
)
create = registry.create
names = registry.names
register = registry.register
