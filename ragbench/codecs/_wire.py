"""A :class:`RetrievalResult` on the wire, as every codec shares it: the typed wire structs,
the proto3 JSON mapping, building the result back fast, payload limits and the base codec.

The proto3 JSON mapping written by the JSON codecs (documented in
``protos/ragbench/v1/retrieval.proto``)::

    {"query_id": str, "query": str,
     "hits": [{"doc_id": str, "score": number | "NaN" | "Infinity" | "-Infinity",
               "text": str, "metadata": {str: str}, "embedding": base64 str | null}]}

Output uses the original proto field names (what ``MessageToJson(...,
preserving_proto_field_name=True)`` writes) and always writes every field, with
``"embedding": null`` for "no embedding". Input follows the proto3 JSON rules:
lowerCamelCase (``queryId``, ``docId``) or original names, ``null`` or an omitted
field means the default, doubles as numbers or strings (including the three
special strings), bytes as standard or URL-safe base64 with or without padding.
Unknown fields are rejected, as proto3 JSON parsers do by default.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgspec

from .._registry import check_params
from ..errors import DecodeError, InputError
from ..types import Hit, RetrievalResult
from ..validate import positive_int

DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024

# Hit and RetrievalResult are frozen, slotted dataclasses: their generated
# __init__ sets each field through object.__setattr__ and Hit runs
# __post_init__, ~1 us per hit. Decoders have validated every field already,
# so they fill the slots directly (~3x cheaper).
_new = object.__new__


def _slot_setter(cls: type, name: str) -> Callable[[object, object], None]:
    setter: Callable[[object, object], None] = cls.__dict__[name].__set__
    return setter


_set_doc_id = _slot_setter(Hit, "doc_id")
_set_score = _slot_setter(Hit, "score")
_set_text = _slot_setter(Hit, "text")
_set_metadata = _slot_setter(Hit, "metadata")
_set_embedding = _slot_setter(Hit, "embedding")


#: A :class:`Hit` from already validated fields (no ``__post_init__``).
new_hit = Hit.unchecked
#: A :class:`RetrievalResult` from already validated fields.
new_result = RetrievalResult.unchecked


class BaseCodec:
    """Common state of every codec: ``name``, ``content_type`` and the payload limit."""

    name: str = ""
    content_type: str = ""
    #: Options accepted by ``__init__`` besides ``max_payload_bytes``.
    extra_options: frozenset[str] = frozenset()

    def __init__(self, max_payload_bytes: int, options: dict[str, Any]) -> None:
        check_params(f"codec {self.name!r}", options, self.extra_options | {"max_payload_bytes"})
        self.max_payload_bytes = positive_int(
            f"codec {self.name!r}", "max_payload_bytes", max_payload_bytes
        )

    def _check_payload(self, payload: object) -> int:
        """The payload size in bytes; DecodeError if it is not bytes-like or too large."""
        cls = type(payload)
        if cls is bytes or cls is bytearray:
            size = len(payload)  # type: ignore[arg-type]
        elif cls is memoryview:
            size = payload.nbytes  # type: ignore[attr-defined]
        else:
            raise DecodeError(
                self.name,
                f"payload must be bytes, bytearray or memoryview, got {cls.__name__}",
            )
        if size > self.max_payload_bytes:
            raise DecodeError(
                self.name,
                f"payload of {size} bytes exceeds max_payload_bytes={self.max_payload_bytes}; "
                "raise the limit with codecs.create(..., max_payload_bytes=N) if it is expected",
            )
        return size

    def library_round_trip(self, result: RetrievalResult) -> Callable[[], object]:
        """A call running the library's own encode and decode of ``result``'s payload, on the
        native objects the library takes and gives (a dict tree, typed structs, a protobuf
        message) built beforehand: what the codec costs without ragbench's result objects,
        checks and error wrapping. ``compare``'s reading sets its ratios beside the stages'
        (a run record's ``info.codec_library_ns``, from
        :func:`ragbench.pipeline.samples.library_round_trip_ns`); ``bench/test_bench_codecs.py``
        times the same two calls as its ``floor``."""
        codec: Any = self  # every subclass has encode(); BaseCodec itself declares none
        encode, decode = self._library_calls(result, codec.encode(result))

        def round_trip() -> object:
            encode()
            return decode()

        return round_trip

    def _library_calls(
        self, result: RetrievalResult, payload: bytes
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        """The library's encode and decode calls of :meth:`library_round_trip`."""
        raise NotImplementedError(f"codec {self.name!r} does not name its library calls")


def struct_calls(
    encode: Callable[[Any], bytes], decode: Callable[[bytes], Any], payload: bytes
) -> tuple[Callable[[], object], Callable[[], object]]:
    """``_library_calls`` of a msgspec codec: its typed decoder's structs are what its encoder
    writes natively, so the encode call writes the structs ``payload`` decodes to."""
    structs = decode(payload)
    return (lambda: encode(structs)), (lambda: decode(payload))

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} name={self.name!r} max_payload_bytes={self.max_payload_bytes}>"
        )


# --- typed wire structs: the fast, strict decoding path -------------------------------


class WireHit(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A hit as it appears on the wire (original proto field names)."""

    doc_id: str = ""
    score: float = 0.0
    text: str = ""
    metadata: dict[str, str] = {}
    embedding: bytes | None = None


class WireResult(msgspec.Struct, forbid_unknown_fields=True):
    """A result as it appears on the wire (original proto field names)."""

    query_id: str = ""
    query: str = ""
    hits: list[WireHit] = []


def result_from_wire(wire: WireResult, codec: str, finite: bool = False) -> RetrievalResult:
    """Turn decoded wire structs into ragbench objects, checking embedding lengths.

    With ``finite``, a non-finite score is an error: JSON numbers cannot be NaN
    or infinite (the proto3 JSON strings for those take the general reader),
    so one here is a literal that overflowed, like ``1e400``.
    """
    hits: list[Hit] = []
    append = hits.append
    for h in wire.hits:
        if finite and h.score - h.score != 0.0:
            raise DecodeError(codec, f"score {h.score} is out of the double range")
        emb = h.embedding
        if emb is not None and len(emb) & 3:
            raise DecodeError(codec, _EMB_PROBLEM.format(len(emb)))
        # new_hit() inlined: the call itself is ~15% of the conversion.
        hit: Hit = _new(Hit)
        _set_doc_id(hit, h.doc_id)
        _set_score(hit, h.score)
        _set_text(hit, h.text)
        _set_metadata(hit, h.metadata)
        _set_embedding(hit, emb)
        append(hit)
    return new_result(wire.query_id, wire.query, hits)


_EMB_PROBLEM = "embedding of {} bytes is not float32 (length must be a multiple of 4)"

# --- encoding helpers -------------------------------------------------------------------

_get_score = attrgetter("score")


def scores_all_finite(hits: list[Hit]) -> bool:
    """True when every score is finite (the fast JSON path); False means "check one by one".

    The sum of finite floats is finite unless it overflows, in which case the
    caller takes the exact (slower) path, which is always correct.
    """
    try:
        total = sum(map(_get_score, hits), 0.0)
    except TypeError:
        raise InputError(
            "every Hit.score must be a float; got "
            + ", ".join(sorted({type(h.score).__name__ for h in hits}))
        ) from None
    return bool(total - total == 0.0)


_SPECIAL_OUT = {math.inf: "Infinity", -math.inf: "-Infinity"}


def json_score(score: float) -> float | str:
    """A score as the proto3 JSON mapping writes it: a number or a special string."""
    if score - score == 0.0:
        return score
    return "NaN" if score != score else _SPECIAL_OUT[score]


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def json_tree(result: RetrievalResult, exact_scores: bool) -> dict[str, Any]:
    """``result`` as plain JSON types in the proto3 JSON mapping (original field names).

    With ``exact_scores`` every score goes through :func:`json_score` (NaN and
    infinities become strings); otherwise scores are written as they are.
    """
    if exact_scores:
        return {
            "query_id": result.query_id,
            "query": result.query,
            "hits": [
                {
                    "doc_id": h.doc_id,
                    "score": json_score(h.score),
                    "text": h.text,
                    "metadata": h.metadata,
                    "embedding": None if h.embedding is None else _b64(h.embedding),
                }
                for h in result.hits
            ],
        }
    return {
        "query_id": result.query_id,
        "query": result.query,
        "hits": [
            {
                "doc_id": h.doc_id,
                "score": h.score,
                "text": h.text,
                "metadata": h.metadata,
                "embedding": None if h.embedding is None else _b64(h.embedding),
            }
            for h in result.hits
        ],
    }


# --- the general proto3 JSON reader: the fallback after the typed fast path -------------

_RESULT_NAMES = {"query_id": "query_id", "queryId": "query_id", "query": "query", "hits": "hits"}
_HIT_NAMES = {
    "doc_id": "doc_id",
    "docId": "doc_id",
    "score": "score",
    "text": "text",
    "metadata": "metadata",
    "embedding": "embedding",
}
_SPECIAL_IN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# A JSON number written as a string, which proto3 JSON allows for doubles.
_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_BASE64_RE = re.compile(r"[A-Za-z0-9+/_-]*={0,2}\Z")


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
    }.get(type(value), type(value).__name__)


def _fields(obj: object, names: dict[str, str], what: str, codec: str) -> dict[str, Any]:
    if type(obj) is not dict:
        raise DecodeError(codec, f"{what} must be a JSON object, got {_type_name(obj)}")
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for key, value in obj.items():
        field = names.get(key)
        if field is None:
            raise DecodeError(
                codec,
                f"unknown field {key!r} in {what}; expected {', '.join(sorted(set(names)))}",
            )
        if field in seen:
            raise DecodeError(codec, f"field {field!r} appears twice in {what}")
        seen.add(field)
        if value is not None:  # proto3 JSON: null means the default value
            out[field] = value
    return out


def _string(value: object, what: str, codec: str) -> str:
    if type(value) is not str:
        raise DecodeError(codec, f"{what} must be a string, got {_type_name(value)}")
    return value


def _double(value: object, what: str, codec: str) -> float:
    number: float
    if type(value) is float:
        number = value
    elif type(value) is int:
        try:
            number = float(value)
        except OverflowError:
            raise DecodeError(codec, f"{what} is out of the double range") from None
    elif isinstance(value, str) and type(value) is str:
        special = _SPECIAL_IN.get(value)
        if special is not None:
            return special
        if not _NUMBER_RE.match(value):
            raise DecodeError(
                codec,
                f"{what} must be a number or one of 'NaN', 'Infinity', '-Infinity', "
                f"got the string {value!r:.40}",
            )
        number = float(value)
    else:
        raise DecodeError(codec, f"{what} must be a number, got {_type_name(value)}")
    if number - number != 0.0:
        # A literal overflowing to inf: proto3 JSON wants the strings for those.
        raise DecodeError(
            codec, f"{what} is out of the double range; write 'Infinity'/'-Infinity'/'NaN'"
        )
    return number


def _bytes(value: object, what: str, codec: str) -> bytes:
    text = _string(value, what, codec)
    if not _BASE64_RE.match(text):
        raise DecodeError(codec, f"{what} is not base64")
    # proto3 JSON accepts standard or URL-safe base64, with or without padding.
    text = text.rstrip("=").replace("-", "+").replace("_", "/")
    if len(text) % 4 == 1:
        raise DecodeError(codec, f"{what} is not base64 (bad length)")
    try:
        return binascii.a2b_base64(text + "=" * (-len(text) % 4), strict_mode=True)
    except binascii.Error as exc:
        raise DecodeError(codec, f"{what} is not base64: {exc}") from None


def _hit_from_json(obj: object, index: int, codec: str) -> Hit:
    where = f"hits[{index}]"
    fields = _fields(obj, _HIT_NAMES, where, codec)
    doc_id = _string(fields.get("doc_id", ""), f"{where}.doc_id", codec)
    score = _double(fields.get("score", 0.0), f"{where}.score", codec)
    text = _string(fields.get("text", ""), f"{where}.text", codec)
    raw_meta = fields.get("metadata", {})
    if type(raw_meta) is not dict:
        raise DecodeError(codec, f"{where}.metadata must be an object, got {_type_name(raw_meta)}")
    metadata: dict[str, str] = {}
    for key, value in raw_meta.items():
        metadata[_string(key, f"{where}.metadata key", codec)] = _string(
            value, f"{where}.metadata[{key!r:.40}]", codec
        )
    embedding = None
    if "embedding" in fields:
        embedding = _bytes(fields["embedding"], f"{where}.embedding", codec)
        if len(embedding) & 3:
            raise DecodeError(codec, f"{where}: " + _EMB_PROBLEM.format(len(embedding)))
    return new_hit(doc_id, score, text, metadata, embedding)


def result_from_json_obj(obj: object, codec: str) -> RetrievalResult:
    """Validate a parsed proto3 JSON value and build the result, or raise DecodeError.

    Accepts everything the proto3 JSON mapping allows for this message (see the
    module docstring); slower than the typed path, used when that one refuses.
    """
    fields = _fields(obj, _RESULT_NAMES, "the payload", codec)
    query_id = _string(fields.get("query_id", ""), "query_id", codec)
    query = _string(fields.get("query", ""), "query", codec)
    raw_hits = fields.get("hits", [])
    if type(raw_hits) is not list:
        raise DecodeError(codec, f"hits must be an array, got {_type_name(raw_hits)}")
    hits = [_hit_from_json(h, i, codec) for i, h in enumerate(raw_hits)]
    return new_result(query_id, query, hits)
