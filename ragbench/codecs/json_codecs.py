"""JSON codecs: the proto3 JSON mapping of ``ragbench.v1.RetrievalResult``.

Three parsers/serializers, one document shape (see :mod:`ragbench.codecs._wire`
for the mapping): ``json`` (the standard library), ``orjson`` and
``msgspec-json``. What they write, ``google.protobuf.json_format.Parse``
accepts; what ``json_format.MessageToJson`` writes (lowerCamelCase or original
names), they accept.

Decoding is two-stage: a typed, strict fast path (msgspec structs matching the
exact shape the codecs write), and, only when that refuses the document, the
general proto3 JSON reader, which handles camelCase names, ``null``, omitted
fields, doubles written as strings and URL-safe base64, and raises
:class:`~ragbench.errors.DecodeError` for anything else.

With ``shape="columnar"`` every JSON codec writes and reads the proto3 JSON
mapping of ``ragbench.v1.RetrievalResultColumns`` instead (parallel arrays,
embeddings one base64 string; see :mod:`ragbench.codecs._columns`), through
the same two-stage decoding.

Scores: NaN and +-infinity round-trip as the proto3 JSON strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (``NaN != NaN``, so compare such results
field by field with ``math.isnan``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import msgspec
import orjson

from ..errors import DecodeError, InputError
from ..types import RetrievalResult
from ._columns import (
    WireColumns,
    check_shape,
    columns_from_json_obj,
    columns_json_tree,
    result_from_columns,
    split_columns,
)
from ._wire import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    BaseCodec,
    WireResult,
    json_tree,
    result_from_json_obj,
    result_from_wire,
    scores_all_finite,
    struct_calls,
)

__all__ = ["MsgspecJsonCodec", "OrjsonCodec", "StdlibJsonCodec"]

_convert = msgspec.convert
_ValidationError = msgspec.ValidationError


def _reject_constant(name: str) -> Any:
    # The stdlib parser accepts the non-JSON tokens NaN/Infinity; proto3 JSON
    # spells them as strings, so the bare tokens are malformed input.
    raise ValueError(f"bare {name} is not JSON; proto3 JSON writes it as the string {name!r}")


def _has_lone_surrogate(obj: object) -> bool:
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) is str:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _tree(result: RetrievalResult) -> dict[str, Any]:
    return json_tree(result, not scores_all_finite(result.hits))


def _columns_tree(result: RetrievalResult) -> dict[str, Any]:
    exact = not scores_all_finite(result.hits)
    return columns_json_tree(split_columns(result), exact)


class _JsonCodec(BaseCodec):
    content_type = "application/json"
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
        columnar = self.shape == "columnar"
        #: The plain-JSON tree of a result in this codec's shape.
        self._json_tree = _columns_tree if columnar else _tree
        self._wire_type: type = WireColumns if columnar else WireResult
        self._from_wire: Callable[..., RetrievalResult] = (
            result_from_columns if columnar else result_from_wire
        )
        self._from_json_obj: Callable[[object, str], RetrievalResult] = (
            columns_from_json_obj if columnar else result_from_json_obj
        )

    def _input_error(self, exc: Exception) -> InputError:
        return InputError(
            f"{self.name}: cannot encode RetrievalResult: {exc}; fields must be str "
            "(doc_id, text, query_id, query, metadata keys and values, no lone surrogates), "
            "float (score) and bytes or None (embedding)"
        )

    def _from_parsed(self, obj: object) -> RetrievalResult:
        try:
            wire: Any = _convert(obj, self._wire_type)
        except _ValidationError:
            return self._from_json_obj(obj, self.name)
        return self._from_wire(wire, self.name, True)


class StdlibJsonCodec(_JsonCodec):
    """The standard library ``json`` module, compact separators, UTF-8 output.

    ``encode(RetrievalResult) -> bytes``; ``decode(bytes | bytearray | memoryview)
    -> RetrievalResult``.
    """

    name = "json"

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        shape: Literal["row", "columnar"] = "row",
        **options: Any,
    ) -> None:
        super().__init__(max_payload_bytes=max_payload_bytes, shape=shape, **options)
        self._encoder = json.JSONEncoder(
            ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
        )
        self._decoder = json.JSONDecoder(parse_constant=_reject_constant)

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to UTF-8 JSON bytes; :class:`InputError` on wrong field types."""
        try:
            return self._encoder.encode(self._json_tree(result)).encode("utf-8")
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            if isinstance(exc, InputError):
                raise
            raise self._input_error(exc) from None

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        tree, encoder, decoder = self._json_tree(result), self._encoder, self._decoder
        return (lambda: encoder.encode(tree).encode("utf-8")), (
            lambda: decoder.decode(str(payload, "utf-8"))
        )

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        self._check_payload(payload)
        try:
            text = str(payload, "utf-8")
            obj = self._decoder.decode(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            raise DecodeError(self.name, f"not valid JSON: {exc}") from None
        # The stdlib parser turns an unpaired "\ud800" escape into a lone
        # surrogate (orjson and msgspec refuse it); proto3 strings must be valid
        # UTF-8. Only documents containing a \u escape need the walk.
        if "\\u" in text and _has_lone_surrogate(obj):
            raise DecodeError(self.name, "string with an unpaired \\u surrogate escape")
        return self._from_parsed(obj)


class OrjsonCodec(_JsonCodec):
    """``orjson`` for parsing and serializing; validation shared with the other JSON codecs.

    ``encode(RetrievalResult) -> bytes``; ``decode(bytes | bytearray | memoryview)
    -> RetrievalResult``.
    """

    name = "orjson"

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        shape: Literal["row", "columnar"] = "row",
        **options: Any,
    ) -> None:
        super().__init__(max_payload_bytes=max_payload_bytes, shape=shape, **options)
        self._dumps = orjson.dumps
        self._loads = orjson.loads

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to UTF-8 JSON bytes; :class:`InputError` on wrong field types."""
        try:
            # orjson writes a dict tree ~4x faster than it walks slotted dataclasses.
            return self._dumps(self._json_tree(result))
        except (TypeError, ValueError, AttributeError) as exc:  # JSONEncodeError is a TypeError
            if isinstance(exc, InputError):
                raise
            raise self._input_error(exc) from None

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        tree, dumps, loads = self._json_tree(result), self._dumps, self._loads
        return (lambda: dumps(tree)), (lambda: loads(payload))

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        self._check_payload(payload)
        try:
            obj = self._loads(payload)
        except (orjson.JSONDecodeError, RecursionError) as exc:
            raise DecodeError(self.name, f"not valid JSON: {exc}") from None
        return self._from_parsed(obj)


class MsgspecJsonCodec(_JsonCodec):
    """``msgspec.json``: encodes ragbench's dataclasses natively, decodes into typed structs.

    ``encode(RetrievalResult) -> bytes``; ``decode(bytes | bytearray | memoryview)
    -> RetrievalResult``.
    """

    name = "msgspec-json"

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        shape: Literal["row", "columnar"] = "row",
        **options: Any,
    ) -> None:
        super().__init__(max_payload_bytes=max_payload_bytes, shape=shape, **options)
        self._encoder = msgspec.json.Encoder()
        self._typed: msgspec.json.Decoder[Any] = msgspec.json.Decoder(self._wire_type)
        self._untyped = msgspec.json.Decoder()
        self._columnar = self.shape == "columnar"

    def encode(self, result: RetrievalResult) -> bytes:
        """Serialize ``result`` to UTF-8 JSON bytes; :class:`InputError` on wrong field types."""
        try:
            if self._columnar:
                columns = split_columns(result)
                if scores_all_finite(result.hits):
                    # a typed struct in field order: msgspec writes it in one C call
                    return self._encoder.encode(WireColumns(*columns))
                return self._encoder.encode(columns_json_tree(columns, True))
            if scores_all_finite(result.hits):
                # msgspec walks the dataclasses itself, writing the same field
                # names and order as json_tree (bytes as base64, None as null).
                return self._encoder.encode(result)
            return self._encoder.encode(json_tree(result, True))
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, InputError):
                raise
            raise self._input_error(exc) from None

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        return struct_calls(self._encoder.encode, self._typed.decode, payload)

    def decode(self, payload: bytes | bytearray | memoryview) -> RetrievalResult:
        """Parse a payload; :class:`DecodeError` if malformed, of another schema or too large."""
        self._check_payload(payload)
        try:
            return self._from_wire(self._typed.decode(payload), self.name, True)
        except msgspec.ValidationError:
            pass  # valid JSON, not the exact typed shape: try the general reader
        except (msgspec.DecodeError, RecursionError) as exc:
            raise DecodeError(self.name, f"not valid JSON: {exc}") from None
        try:
            obj = self._untyped.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise DecodeError(self.name, f"not valid JSON: {exc}") from None
        return self._from_json_obj(obj, self.name)
