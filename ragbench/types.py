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

    @classmethod
    def unchecked(
        cls, doc_id: str, score: float, text: str, metadata: dict[str, str], embedding: bytes | None
    ) -> Hit:
        """A hit from fields its caller has already checked (``embedding`` float32 bytes or
        ``None``): the slots filled directly, without the frozen ``__init__``'s per-field
        ``object.__setattr__`` and without ``__post_init__``, about half the cost. The codecs'
        decoders and the pipeline's serialize stage build their hits so; tests hold both to
        the hits the plain constructor makes."""
        hit = _new(cls)
        _set_doc_id(hit, doc_id)
        _set_score(hit, score)
        _set_text(hit, text)
        _set_metadata(hit, metadata)
        _set_embedding(hit, embedding)
        return hit

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

    @classmethod
    def unchecked(cls, query_id: str, query: str, hits: list[Hit]) -> RetrievalResult:
        """A result from fields its caller has already checked (see :meth:`Hit.unchecked`)."""
        result = _new(cls)
        _set_query_id(result, query_id)
        _set_query(result, query)
        _set_hits(result, hits)
        return result


# Hit and RetrievalResult are frozen, slotted dataclasses: their generated __init__ sets each
# field through object.__setattr__ (and Hit runs __post_init__), ~1 us per hit; the unchecked
# constructors fill the slots through their descriptors instead.
_new = object.__new__
_set_doc_id = Hit.__dict__["doc_id"].__set__
_set_score = Hit.__dict__["score"].__set__
_set_text = Hit.__dict__["text"].__set__
_set_metadata = Hit.__dict__["metadata"].__set__
_set_embedding = Hit.__dict__["embedding"].__set__
_set_query_id = RetrievalResult.__dict__["query_id"].__set__
_set_query = RetrievalResult.__dict__["query"].__set__
_set_hits = RetrievalResult.__dict__["hits"].__set__
