"""Protobuf codec: ``ragbench.v1.RetrievalResult`` (protos/ragbench/v1/retrieval.proto),
or with ``shape="columnar"`` the parallel-column ``ragbench.v1.RetrievalResultColumns``.

Uses the generated code in :mod:`ragbench.codecs._pb` on whichever protobuf
backend is installed; :func:`backend` says which (``"upb"`` expected; the pure
Python backend is ~10x slower and logged loudly at codec creation).

Strictness on decode: upb rejects truncated data and invalid UTF-8 in strings;
this codec also rejects unknown fields at the top level of the payload (random
bytes often parse as nothing but unknown fields) and embeddings whose length is
not a multiple of 4. Unknown fields inside a hit are ignored (proto3
behaviour), so a newer schema may add Hit fields. Scores are doubles: NaN, +-inf and -0.0 round-trip natively.
Columnar payloads are also checked for columns that disagree (lengths, metadata
counts, embedding sizes; see :mod:`ragbench.codecs._columns`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from ..errors import DecodeError, InputError
from ..types import Hit, RetrievalResult
from ._columns import check_shape, result_from_columns, split_columns
from ._wire import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    BaseCodec,
    _new,
    _set_doc_id,
    _set_embedding,
    _set_metadata,
    _set_score,
    _set_text,
    new_result,
)

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
    extra_options = frozenset({"shape"})

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        shape: Literal["row", "columnar"] = "row",
        **options: Any,
    ) -> None:
        super().__init__(max_payload_bytes, options)
        self.shape = check_shape(self.name, shape)
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
        self._columns_message = retrieval_pb2.RetrievalResultColumns
        self._columns_from_string = retrieval_pb2.RetrievalResultColumns.FromString
        self._schema = "ragbench.v1.RetrievalResult"
        if self.shape == "columnar":
            self._schema += "Columns"
            # instance attributes: the shape is chosen once, not per call
            self.encode = self._encode_columns  # type: ignore[method-assign]
            self.decode = self._decode_columns  # type: ignore[method-assign]
        self._pb_decode_error = PbDecodeError
        self._unknown_fields = UnknownFieldSet

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        # the message the payload parses to is what a service fills and serializes
        parse = self._columns_from_string if self.shape == "columnar" else self._from_string
        message = parse(payload)
        return message.SerializeToString, (lambda: parse(payload))

    def _input_error(self, exc: Exception) -> InputError:
        return InputError(
            f"{self.name}: cannot encode RetrievalResult: {exc}; fields must be str "
            "(valid UTF-8, no lone surrogates), float (score) and bytes or None (embedding)"
        )

    def _parse(self, from_string: Any, payload: bytes | bytearray | memoryview) -> Any:
        """The parsed message; DecodeError if malformed or carrying top-level unknown fields."""
        self._check_payload(payload)
        try:
            message = from_string(payload)
        except (self._pb_decode_error, RecursionError, ValueError) as exc:
            raise DecodeError(self.name, f"not a valid {self._schema}: {exc}") from None
        # Random or foreign bytes mostly parse as a message made of unknown
        # fields: reject any at the top level (an exact check, ~0.3 us). Inside
        # hits they are ignored, as proto3 does, so a newer schema may add Hit
        # fields; checking every hit would cost ~10% of a decode.
        if len(self._unknown_fields(message)):
            numbers = sorted({field.field_number for field in self._unknown_fields(message)})
            raise DecodeError(
                self.name,
                f"unknown field number(s) {numbers[:5]} in the payload: not a {self._schema}",
            )
        return message

    def _encode_columns(self, result: RetrievalResult) -> bytes:
        """``encode`` for ``shape="columnar"``: every repeated field filled in one call."""
        try:
            (
                query_id,
                query,
                doc_ids,
                scores,
                texts,
                counts,
                keys,
                values,
                dim,
                embeddings,
                dims,
            ) = split_columns(result)
            message = self._columns_message(
                query_id=query_id,
                query=query,
                doc_ids=doc_ids,
                scores=scores,
                texts=texts,
                metadata_counts=counts,
                metadata_keys=keys,
                metadata_values=values,
            )
            # Each keyword or attribute costs a lookup in upb: set only what is used.
            if dim:
                message.dim = dim
                message.embeddings = embeddings
            elif dims:
                message.embeddings = embeddings
                message.embedding_dims.extend(dims)
            return message.SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError) as exc:
            raise self._input_error(exc) from None

    def _decode_columns(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """``decode`` for ``shape="columnar"``; DecodeError also when the columns disagree."""
        # The parsed message has the fields result_from_columns reads (as attributes);
        # its repeated containers are read in place, no copies.
        return result_from_columns(self._parse(self._columns_from_string, payload), self.name)

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to the protobuf wire format; :class:`InputError` on bad fields."""
        try:
            message = self._message(query_id=result.query_id, query=result.query)
            add = message.hits.add
            for h in result.hits:
                # One keyword call per hit builds it in place (hits.add, no copy;
                # None leaves the optional embedding unset). Map entries are set
                # one by one: ~2x cheaper than passing the dict to add() (measured).
                hit = add(doc_id=h.doc_id, score=h.score, text=h.text, embedding=h.embedding)
                metadata = h.metadata
                if metadata:
                    entries = hit.metadata
                    for key, value in metadata.items():
                        entries[key] = value
            return message.SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError) as exc:
            raise self._input_error(exc) from None

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        message = self._parse(self._from_string, payload)
        hits: list[Hit] = []
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
            entries = h.metadata
            # A comprehension over the map container reads it ~2x faster than
            # dict(map); new_hit() is inlined (the call is ~15% of the loop).
            hit: Hit = _new(Hit)
            _set_doc_id(hit, h.doc_id)
            _set_score(hit, h.score)
            _set_text(hit, h.text)
            _set_metadata(hit, {k: entries[k] for k in entries})
            _set_embedding(hit, emb)
            append(hit)
        return new_result(message.query_id, message.query, hits)
