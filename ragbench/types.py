"""Value types that cross the retriever → LLM boundary.

One data model, several encodings: every codec turns a
:class:`RetrievalResult` into bytes and back, and ``decode(encode(r)) == r``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Hit", "RetrievalResult"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk.

    ``embedding`` is ``None`` or the chunk vector as little-endian float32
    bytes (pass a float32 numpy array and it is converted); read it back as
    an array with :meth:`vector`.
    """

    doc_id: str
    score: float
    text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    embedding: bytes | None = None

    def __post_init__(self) -> None:
        emb: Any = self.embedding
        if emb is not None and not isinstance(emb, bytes):
            import numpy as np

            arr = np.asarray(emb, dtype="<f4")
            if arr.ndim != 1:
                from .errors import DimensionError

                raise DimensionError(f"Hit.embedding must be 1-D, got shape {arr.shape}")
            object.__setattr__(self, "embedding", arr.tobytes())
        elif emb is not None and len(emb) % 4:
            from .errors import InputError

            raise InputError("Hit.embedding bytes must be float32: length not a multiple of 4")

    def vector(self) -> np.ndarray | None:
        """The embedding as a float32 array of shape ``(dim,)``, or ``None``."""
        if self.embedding is None:
            return None
        import numpy as np

        return np.frombuffer(self.embedding, dtype="<f4")


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """What the retriever hands to the LLM side: the query and its hits, best first."""

    query_id: str
    query: str
    hits: list[Hit] = field(default_factory=list)
