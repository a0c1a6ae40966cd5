"""Protobuf codec: ``ragbench.v1.RetrievalResult`` (protos/ragbench/v1/retrieval.proto).

Uses the generated code in :mod:`ragbench.codecs._pb` on whichever protobuf
backend is installed; :func:`backend` says which (``"upb"`` expected; the pure
Python backend is ~10x slower and logged loudly at codec creation).

The message is columnar (parallel repeated fields, one entry per hit): the
codec fills each with one C call and reads each with one slice, then builds
the hits with the conversion every codec shares
(:func:`ragbench.codecs._common.result_from_columns`).

Strictness on decode: upb rejects truncated data and invalid UTF-8 in strings;
this codec also rejects unknown fields (random bytes often parse as nothing
but unknown fields; field 3, the old row-shaped ``hits``, is one) and columns
that break the schema's consistency rules (lengths, metadata counts,
embedding dims vs bytes). Scores are doubles: NaN, +-inf and -0.0 round-trip
natively.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import DecodeError, InputError
from ..types import RetrievalResult
from ._common import DEFAULT_MAX_PAYLOAD_BYTES, BaseCodec, result_from_columns, to_columns

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
        from google.protobuf.unknown_fields import UnknownFieldSet

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
        self._unknown_fields = UnknownFieldSet

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to the protobuf wire format; :class:`InputError` on bad fields."""
        try:
            ids, scores, texts, counts, keys, values, dims, blob = to_columns(result.hits)
            # One constructor call: upb fills every repeated field from its
            # list in C. Empty columns are left out (nothing to copy).
            if counts:
                if dims:
                    message = self._message(
                        query_id=result.query_id,
                        query=result.query,
                        doc_ids=ids,
                        scores=scores,
                        texts=texts,
                        metadata_counts=counts,
                        metadata_keys=keys,
                        metadata_values=values,
                        embedding_dims=dims,
                        embeddings=blob,
                    )
                else:
                    message = self._message(
                        query_id=result.query_id,
                        query=result.query,
                        doc_ids=ids,
                        scores=scores,
                        texts=texts,
                        metadata_counts=counts,
                        metadata_keys=keys,
                        metadata_values=values,
                    )
            else:
                message = self._message(
                    query_id=result.query_id,
                    query=result.query,
                    doc_ids=ids,
                    scores=scores,
                    texts=texts,
                    embedding_dims=dims,
                    embeddings=blob,
                )
            return message.SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(
                f"{self.name}: cannot encode RetrievalResult: {exc}; fields must be str "
                "(valid UTF-8, no lone surrogates), float (score) and bytes or None (embedding)"
            ) from None

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        self._check_payload(payload)
        try:
            message = self._from_string(payload)
        except (self._pb_decode_error, RecursionError, ValueError) as exc:
            raise DecodeError(
                self.name, f"not a valid ragbench.v1.RetrievalResult: {exc}"
            ) from None
        # Random or foreign bytes mostly parse as a message made of unknown
        # fields: reject any (an exact check, ~0.3 us; the message has no
        # sub-messages, so the top level is all there is).
        if len(self._unknown_fields(message)):
            numbers = sorted({field.field_number for field in self._unknown_fields(message)})
            raise DecodeError(
                self.name,
                f"unknown field number(s) {numbers[:5]} in the payload: "
                "not a ragbench.v1.RetrievalResult",
            )
        # A full slice copies a repeated field into a list in one C call
        # (~2x cheaper than list(container)).
        return result_from_columns(
            self.name,
            message.query_id,
            message.query,
            message.doc_ids[:],
            message.scores[:],
            message.texts[:],
            message.metadata_counts[:],
            message.metadata_keys[:],
            message.metadata_values[:],
            message.embedding_dims[:],
            message.embeddings,
        )
