"""Text → vector embedders behind one :class:`Embedder` protocol.

``embed(texts)`` returns L2-normalized float32 ``(len(texts), dim)``.
``fingerprint`` identifies the model and settings for on-disk caches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .._registry import Registry

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Embedder", "create", "names", "register", "registry"]


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int
    fingerprint: str

    def load(self) -> int:
        """Load the model if needed; return the nanoseconds it took (0 if loaded)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


registry: Registry[Embedder] = Registry(
    "embedders",
    {
        "minilm": "ragbench.embedders.minilm:MiniLMEmbedder",
        "hashing": "ragbench.embedders.hashing:HashingEmbedder",
        "precomputed": "ragbench.embedders.precomputed:PrecomputedEmbedder",
        "model2vec": "ragbench.embedders.static:Model2VecEmbedder",
    },
)
create = registry.create
names = registry.names
register = registry.register
