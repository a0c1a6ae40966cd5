"""Pieces shared by the codecs: option checks, payload limits, the columnar data model
(:func:`to_columns` / :func:`result_from_columns`), the typed wire struct and the proto3
JSON mapping of ``ragbench.v1.RetrievalResult``.

Every codec writes the same columnar document (see ``protos/ragbench/v1/retrieval.proto``
for the rules): per-hit fields travel as parallel arrays, which the libraries fill and
read in one C call each instead of one object per hit. The proto3 JSON mapping written
by the JSON codecs::

    {"query_id": str, "query": str,
     "doc_ids": [str], "scores": [number | "NaN" | "Infinity" | "-Infinity"],
     "texts": [str],
     "metadata_counts": [int], "metadata_keys": [str], "metadata_values": [str],
     "embedding_dims": [int], "embeddings": base64 str}

Output uses the original proto field names (what ``MessageToJson(...,
preserving_proto_field_name=True)`` writes) and always writes every field (empty
arrays and ``""`` when no hit has metadata or an embedding). Input follows the proto3
JSON rules: lowerCamelCase (``queryId``, ``docIds``, ``metadataCounts``...) or original
names, ``null`` or an omitted field means the default, doubles and integers as numbers
or strings (doubles also as the three special strings), bytes as standard or URL-safe
base64 with or without padding. Unknown fields are rejected, as proto3 JSON parsers do
by default.
"""

from __future__ import annotations

import binascii
import math
import re
from collections import deque
from collections.abc import Callable, Sequence
from itertools import chain, islice, repeat
from operator import attrgetter
from typing import Annotated, Any

import msgspec

from .._registry import check_params
from ..errors import ConfigError, DecodeError, InputError
from ..types import Hit, RetrievalResult

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "BaseCodec",
    "Columns",
    "WireResult",
    "json_doc",
    "new_hit",
    "new_result",
    "result_from_columns",
    "result_from_json_obj",
    "result_from_wire",
    "scores_all_finite",
    "to_columns",
]

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
_set_query_id = _slot_setter(RetrievalResult, "query_id")
_set_query = _slot_setter(RetrievalResult, "query")
_set_hits = _slot_setter(RetrievalResult, "hits")


def new_hit(
    doc_id: str, score: float, text: str, metadata: dict[str, str], embedding: bytes | None
) -> Hit:
    """A :class:`Hit` from already validated fields (no ``__post_init__``)."""
    hit: Hit = _new(Hit)
    _set_doc_id(hit, doc_id)
    _set_score(hit, score)
    _set_text(hit, text)
    _set_metadata(hit, metadata)
    _set_embedding(hit, embedding)
    return hit


def new_result(query_id: str, query: str, hits: list[Hit]) -> RetrievalResult:
    """A :class:`RetrievalResult` from already validated fields."""
    result: RetrievalResult = _new(RetrievalResult)
    _set_query_id(result, query_id)
    _set_query(result, query)
    _set_hits(result, hits)
    return result


class BaseCodec:
    """Common state of every codec: ``name``, ``content_type`` and the payload limit."""

    name: str = ""
    content_type: str = ""
    #: Options accepted by ``__init__`` besides ``max_payload_bytes``.
    extra_options: frozenset[str] = frozenset()

    def __init__(self, max_payload_bytes: int, options: dict[str, Any]) -> None:
        check_params(f"codec {self.name!r}", options, self.extra_options | {"max_payload_bytes"})
        if (
            isinstance(max_payload_bytes, bool)
            or not isinstance(max_payload_bytes, int)
            or max_payload_bytes <= 0
        ):
            raise ConfigError(
                f"codec {self.name!r}: max_payload_bytes must be a positive int, "
                f"got {max_payload_bytes!r}"
            )
        self.max_payload_bytes = max_payload_bytes

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

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} name={self.name!r} max_payload_bytes={self.max_payload_bytes}>"
        )


# --- ragbench objects <-> columns: one vectorised conversion shared by every codec -------

#: ``(doc_ids, scores, texts, metadata_counts, metadata_keys, metadata_values,
#: embedding_dims, embeddings)``, the per-hit fields of the schema as parallel
#: arrays (lists or tuples).
Columns = tuple[
    Sequence[str],
    Sequence[float],
    Sequence[str],
    Sequence[int],
    Sequence[str],
    Sequence[str],
    Sequence[int],
    bytes,
]

_get_fields = attrgetter("doc_id", "score", "text", "metadata", "embedding")
_dict_values = dict.values
# Runs a map() to exhaustion in C: a Python for loop per column costs ~3x more.
_consume = deque(maxlen=0).extend


def to_columns(hits: Sequence[Hit]) -> Columns:
    """The hits as parallel arrays (see :data:`Columns`), best first.

    Every per-hit loop runs in C: one ``attrgetter`` pass reads the five
    fields of each hit and ``zip(*rows)`` transposes them (~2.5x cheaper than
    one ``map`` per field). Metadata and embedding arrays are empty when no hit
    has any. Raises :class:`InputError`
    for an embedding whose length is not a multiple of 4 (not float32) or that
    is not bytes; other wrong field types are left to the serializer, which
    raises ``TypeError`` (codecs turn it into :class:`InputError`).
    """
    if not hits:
        return [], [], [], [], [], [], [], b""
    ids, scores, texts, metas, embs = zip(*map(_get_fields, hits), strict=True)
    counts: Sequence[int]
    keys: Sequence[str]
    values: Sequence[str]
    if any(metas):
        counts = list(map(len, metas))
        keys = list(chain.from_iterable(metas))
        values = list(chain.from_iterable(map(_dict_values, metas)))
    else:
        counts, keys, values = [], [], []
    dims: Sequence[int]
    if embs.count(None) == len(embs):
        dims, blob = [], b""
    else:
        present = [e for e in embs if e is not None]
        if any(type(e) is not bytes for e in present):
            raise InputError(
                "Hit.embedding must be bytes (little-endian float32) or None, got "
                + ", ".join(sorted({type(e).__name__ for e in present if type(e) is not bytes}))
            )
        # -4 marks None: -4 >> 2 == -1 is the schema's "no embedding".
        sizes = [-4 if e is None else len(e) for e in embs]
        if any(size & 3 for size in sizes):
            raise InputError(
                "Hit.embedding bytes must be float32 (length a multiple of 4), got lengths "
                + ", ".join(str(size) for size in sizes if size & 3)
            )
        dims = [size >> 2 for size in sizes]
        blob = b"".join(present)
    return ids, scores, texts, counts, keys, values, dims, blob


def _metadata_dicts(
    n: int, counts: Sequence[int], keys: Sequence[str], values: Sequence[str], codec: str
) -> list[dict[str, str]]:
    if not counts:
        if keys or values:
            raise DecodeError(
                codec,
                f"{len(keys)} metadata keys and {len(values)} values but no metadata_counts",
            )
        return [{} for _ in repeat(None, n)]
    if len(counts) != n:
        raise DecodeError(codec, f"metadata_counts has {len(counts)} entries for {n} hits")
    total = sum(counts)
    if len(keys) != total or len(values) != total:
        raise DecodeError(
            codec,
            f"metadata_counts add up to {total} but there are {len(keys)} keys "
            f"and {len(values)} values",
        )
    first = counts[0]
    if first and counts.count(first) == n:
        # The same number of entries per hit (the usual case): group the
        # (key, value) pairs with zip(*[it] * k), one C loop for all hits.
        # Lengths are checked above; strict zips would cost ~10% here.
        pairs = iter(zip(keys, values, strict=False))
        return list(map(dict, zip(*[pairs] * first, strict=False)))
    return list(map(dict, map(islice, repeat(zip(keys, values, strict=False)), counts)))


def _embeddings(n: int, dims: Sequence[int], blob: bytes, codec: str) -> Sequence[bytes | None]:
    if not dims:
        if blob:
            raise DecodeError(codec, f"{len(blob)} bytes of embeddings but no embedding_dims")
        return repeat(None, n)  # type: ignore[return-value]
    if len(dims) != n:
        raise DecodeError(codec, f"embedding_dims has {len(dims)} entries for {n} hits")
    first = dims[0]
    if first >= 0 and dims.count(first) == n:
        size = 4 * first
        if len(blob) != size * n:
            raise DecodeError(
                codec,
                f"embeddings hold {len(blob)} bytes, {n} x {first} float32 need {size * n}",
            )
        if not size:
            return [b""] * n
        return [blob[i : i + size] for i in range(0, size * n, size)]
    out: list[bytes | None] = []
    append = out.append
    pos = 0
    for dim in dims:
        if dim < 0:
            if dim != -1:
                raise DecodeError(codec, f"embedding_dims has {dim}; use -1 for no embedding")
            append(None)
        else:
            end = pos + 4 * dim
            append(blob[pos:end])
            pos = end
    if pos != len(blob):
        raise DecodeError(
            codec,
            f"embeddings hold {len(blob)} bytes but embedding_dims add up to {pos} bytes",
        )
    return out


def result_from_columns(
    codec: str,
    query_id: str,
    query: str,
    doc_ids: Sequence[str],
    scores: Sequence[float],
    texts: Sequence[str],
    metadata_counts: Sequence[int],
    metadata_keys: Sequence[str],
    metadata_values: Sequence[str],
    embedding_dims: Sequence[int],
    embeddings: bytes,
) -> RetrievalResult:
    """Check the columns' consistency rules and build the result, or raise DecodeError.

    Field values must already have their types (str, float, int >= 0 for
    counts, int for dims, bytes). Nothing partial is ever returned.
    """
    n = len(doc_ids)
    if len(scores) != n or len(texts) != n:
        raise DecodeError(
            codec,
            f"{n} doc_ids, {len(scores)} scores and {len(texts)} texts: "
            "every hit needs one of each",
        )
    metas = _metadata_dicts(n, metadata_counts, metadata_keys, metadata_values, codec)
    embs = _embeddings(n, embedding_dims, embeddings, codec)
    # Filling the slots column by column, each in one C loop, is ~2x faster
    # than a Python loop building one Hit at a time.
    hits: list[Hit] = list(map(_new, repeat(Hit, n)))
    _consume(map(_set_doc_id, hits, doc_ids))
    _consume(map(_set_score, hits, scores))
    _consume(map(_set_text, hits, texts))
    _consume(map(_set_metadata, hits, metas))
    _consume(map(_set_embedding, hits, embs))
    return new_result(query_id, query, hits)


# --- the typed wire struct: the fast, strict decoding path ------------------------------

_Count = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
_Dim = Annotated[int, msgspec.Meta(ge=-1, le=0x7FFFFFFF)]


class WireResult(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The columnar document as it appears on the wire (original proto field names)."""

    query_id: str = ""
    query: str = ""
    doc_ids: list[str] = []
    scores: list[float] = []
    texts: list[str] = []
    metadata_counts: list[_Count] = []
    metadata_keys: list[str] = []
    metadata_values: list[str] = []
    embedding_dims: list[_Dim] = []
    embeddings: bytes = b""


def result_from_wire(wire: WireResult, codec: str, finite: bool = False) -> RetrievalResult:
    """Turn a decoded wire struct into ragbench objects (see :func:`result_from_columns`).

    With ``finite``, a non-finite score is an error: JSON numbers cannot be NaN
    or infinite (the proto3 JSON strings for those take the general reader),
    so one here is a literal that overflowed, like ``1e400``.
    """
    scores = wire.scores
    if finite and not scores_all_finite(scores):
        # The sum also overflows for large finite scores: look one by one.
        for score in scores:
            if score - score != 0.0:
                raise DecodeError(codec, f"score {score} is out of the double range")
    return result_from_columns(
        codec,
        wire.query_id,
        wire.query,
        wire.doc_ids,
        scores,
        wire.texts,
        wire.metadata_counts,
        wire.metadata_keys,
        wire.metadata_values,
        wire.embedding_dims,
        wire.embeddings,
    )


# --- encoding helpers -------------------------------------------------------------------


def scores_all_finite(scores: Sequence[float]) -> bool:
    """True when every score is finite (the fast JSON path); False means "check one by one".

    The sum of finite floats is finite unless it overflows, in which case the
    caller takes the exact (slower) path, which is always correct.
    """
    try:
        total = sum(scores, 0.0)
    except TypeError:
        raise InputError(
            "every Hit.score must be a float; got "
            + ", ".join(sorted({type(s).__name__ for s in scores}))
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


def json_doc(query_id: str, query: str, columns: Columns, base64: bool = True) -> dict[str, Any]:
    """The proto3 JSON mapping of a result as plain JSON types (original field names).

    Non-finite scores become the proto3 strings ("NaN", "Infinity",
    "-Infinity"). With ``base64`` the embeddings blob is a base64 string,
    otherwise it stays bytes (for serializers that base64-encode bytes themselves).
    """
    ids, scores, texts, counts, keys, values, dims, blob = columns
    if not scores_all_finite(scores):
        scores = [json_score(s) for s in scores]  # type: ignore[misc]
    return {
        "query_id": query_id,
        "query": query,
        "doc_ids": ids,
        "scores": scores,
        "texts": texts,
        "metadata_counts": counts,
        "metadata_keys": keys,
        "metadata_values": values,
        "embedding_dims": dims,
        "embeddings": _b64(blob) if base64 else blob,
    }


# --- the general proto3 JSON reader: the fallback after the typed fast path -------------

_FIELDS = [
    "query_id",
    "query",
    "doc_ids",
    "scores",
    "texts",
    "metadata_counts",
    "metadata_keys",
    "metadata_values",
    "embedding_dims",
    "embeddings",
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_RESULT_NAMES = {name: name for name in _FIELDS} | {_camel(name): name for name in _FIELDS}
_SPECIAL_IN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# A JSON number written as a string, which proto3 JSON allows for doubles.
_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_INTEGER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
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


def _integer(value: object, what: str, codec: str, low: int, high: int) -> int:
    number: int
    if type(value) is int:
        number = value
    elif (type(value) is float and value.is_integer()) or (
        type(value) is str and _INTEGER_RE.match(value)
    ):
        number = int(value)  # type: ignore[arg-type]
    else:
        raise DecodeError(
            codec, f"{what} must be an integer, got {_type_name(value)} {value!r:.40}"
        )
    if not low <= number <= high:
        raise DecodeError(codec, f"{what} = {number} is outside [{low}, {high}]")
    return number


def _array(fields: dict[str, Any], name: str, codec: str) -> list[Any]:
    value = fields.get(name, [])
    if type(value) is not list:
        raise DecodeError(codec, f"{name} must be an array, got {_type_name(value)}")
    return value


def result_from_json_obj(obj: object, codec: str) -> RetrievalResult:
    """Validate a parsed proto3 JSON value and build the result, or raise DecodeError.

    Accepts everything the proto3 JSON mapping allows for this message (see the
    module docstring); slower than the typed path, used when that one refuses.
    """
    fields = _fields(obj, _RESULT_NAMES, "the payload", codec)

    def strings(name: str) -> list[str]:
        return [
            _string(v, f"{name}[{i}]", codec) for i, v in enumerate(_array(fields, name, codec))
        ]

    def integers(name: str, low: int, high: int) -> list[int]:
        return [
            _integer(v, f"{name}[{i}]", codec, low, high)
            for i, v in enumerate(_array(fields, name, codec))
        ]

    return result_from_columns(
        codec,
        _string(fields.get("query_id", ""), "query_id", codec),
        _string(fields.get("query", ""), "query", codec),
        strings("doc_ids"),
        [_double(v, f"scores[{i}]", codec) for i, v in enumerate(_array(fields, "scores", codec))],
        strings("texts"),
        integers("metadata_counts", 0, 0xFFFFFFFF),
        strings("metadata_keys"),
        strings("metadata_values"),
        # -1 is "no embedding"; anything lower is rejected with a clear message there.
        integers("embedding_dims", -0x80000000, 0x7FFFFFFF),
        _bytes(fields.get("embeddings", ""), "embeddings", codec),
    )
