"""Protobuf codec: ``ragbench.v1.RetrievalResult`` (protos/ragbench/v1/retrieval.proto).

Uses the generated code in :mod:`ragbench.codecs._pb` on whichever protobuf
backend is installed; :func:`backend` says which (``"upb"`` expected; the pure
Python backend is ~10x slower and logged loudly at codec creation).

Strictness on decode: upb rejects truncated data and invalid UTF-8 in strings;
this codec also rejects unknown fields on the result and on each hit (random
bytes often parse as nothing but unknown fields) and embeddings whose length is
not a multiple of 4. Scores are doubles: NaN, +-inf and -0.0 round-trip natively.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import DecodeError, InputError
from ..types import RetrievalResult
from ._common import DEFAULT_MAX_PAYLOAD_BYTES, BaseCodec, new_hit, new_result

__all__ = ["ProtobufCodec", "backend"]

logger = logging.getLogger(__name__)


def backend() -> str:
    """The protobuf implementation in use: ``"upb"``, ``"cpp"`` or ``"python"``."""
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


class ProtobufCodec(BaseCodec):
    """``encode(RetrievalResult) -> bytes``; ``decode(bytes | bytearray | memoryview)
    -> RetrievalResult``; :class:`DecodeError` on bad payloads."""

    name = "protobuf"
    content_type = "application/x-protobuf"

    def __init__(
        self, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, **options: Any
    ) -> None:
        super().__init__(max_payload_bytes, options)
        from google.protobuf.message import DecodeError as PbDecodeError

        from ._pb import retrieval_pb2

        self.backend = backend()
        if self.backend == "python":
            logging.warning(
                "ragbench protobuf codec: protobuf is running its pure-Python backend "
                "(api_implementation.Type() == 'python'), roughly 10x slower than upb; "
                "timings will not represent a production service. Unset "
                "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION or reinstall protobuf."
            )
        self._message = retrieval_pb2.RetrievalResult
        self._from_string = retrieval_pb2.RetrievalResult.FromString
        self._pb_decode_error = PbDecodeError

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to the protobuf wire format; :class:`InputError` on bad fields."""
        try:
            message = self._message(query_id=result.query_id, query=result.query)
            add = message.hits.add
            for h in result.hits:
                # One keyword call per hit builds it in place (no copy); the
                # map is skipped when empty, None leaves the optional unset.
                if h.metadata:
                    add(
                        doc_id=h.doc_id,
                        score=h.score,
                        text=h.text,
                        metadata=h.metadata,
                        embedding=h.embedding,
                    )
                else:
                    add(doc_id=h.doc_id, score=h.score, text=h.text, embedding=h.embedding)
            return message.SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError) as exc:
            raise InputError(
                f"{self.name}: cannot encode RetrievalResult: {exc}; fields must be str "
                "(valid UTF-8, no lone surrogates), float (score) and bytes or None (embedding)"
            ) from None

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        size = self._check_payload(payload)
        try:
            message = self._from_string(payload)
        except (self._pb_decode_error, RecursionError, ValueError) as exc:
            raise DecodeError(
                self.name, f"not a valid ragbench.v1.RetrievalResult: {exc}"
            ) from None
        # Canonical payloads with no unknown fields re-serialize to exactly their
        # own size after unknown fields are dropped; only when that differs do we
        # pay for the exact per-message check (non-canonical but valid encodings,
        # e.g. repeated or reordered fields, are still accepted).
        message.DiscardUnknownFields()
        if message.ByteSize() != size:
            self._reject_unknown_fields(payload)
        hits = []
        append = hits.append
        for h in message.hits:
            if h.HasField("embedding"):
                emb = h.embedding
                if len(emb) & 3:
                    raise DecodeError(
                        self.name,
                        f"embedding of {len(emb)} bytes is not float32 "
                        "(length must be a multiple of 4)",
                    )
            else:
                emb = None
            metadata = h.metadata
            append(
                new_hit(h.doc_id, h.score, h.text, dict(metadata.items()) if metadata else {}, emb)
            )
        return new_result(message.query_id, message.query, hits)

    def _reject_unknown_fields(self, payload: bytes | bytearray | memoryview) -> None:
        from google.protobuf.unknown_fields import UnknownFieldSet

        message = self._from_string(payload)
        for where, part in [
            ("the result", message),
            *((f"hits[{i}]", hit) for i, hit in enumerate(message.hits)),
        ]:
            unknown = UnknownFieldSet(part)
            if len(unknown):
                numbers = sorted({field.field_number for field in unknown})
                raise DecodeError(
                    self.name,
                    f"unknown field number(s) {numbers[:5]} in {where}: "
                    "not a ragbench.v1.RetrievalResult (or a newer schema)",
                )
