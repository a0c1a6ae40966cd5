"""MessagePack codec (via ``msgspec.msgpack``).

The document is a map with the proto field names (like the JSON codecs),
embeddings as msgpack ``bin`` and scores as float64, so NaN, +-inf and -0.0
round-trip natively (``NaN != NaN``: compare such results with ``math.isnan``).
Decoding is strict: typed structs, unknown fields rejected. With
``shape="columnar"`` the map holds the fields of ``ragbench.v1.RetrievalResultColumns``
(parallel arrays, embeddings one ``bin``; see :mod:`ragbench.codecs._columns`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ..errors import DecodeError, InputError
from ..types import RetrievalResult
from ._columns import WireColumns, check_shape, result_from_columns, split_columns
from ._wire import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    BaseCodec,
    WireResult,
    result_from_wire,
    struct_calls,
)

__all__ = ["MsgpackCodec"]


class MsgpackCodec(BaseCodec):
    """``encode(RetrievalResult) -> bytes``; ``decode(bytes | bytearray | memoryview)
    -> RetrievalResult``; :class:`DecodeError` on bad payloads."""

    name = "msgpack"
    content_type = "application/msgpack"
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
        self._columnar = self.shape == "columnar"
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            WireColumns if self._columnar else WireResult
        )
        self._from_wire: Callable[..., RetrievalResult] = (
            result_from_columns if self._columnar else result_from_wire
        )

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result``; :class:`InputError` on unserializable field values."""
        try:
            if self._columnar:
                return self._encoder.encode(WireColumns(*split_columns(result)))
            # msgspec walks the slotted dataclasses itself: no intermediate tree.
            return self._encoder.encode(result)
        except (TypeError, ValueError, AttributeError) as exc:
            raise InputError(
                f"{self.name}: cannot encode RetrievalResult: {exc}; fields must be str, "
                "float (score) and bytes or None (embedding)"
            ) from None

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        return struct_calls(self._encoder.encode, self._decoder.decode, payload)

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        self._check_payload(payload)
        try:
            wire = self._decoder.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError included
            raise DecodeError(self.name, str(exc)) from None
        return self._from_wire(wire, self.name)
