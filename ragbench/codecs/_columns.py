"""The columnar payload shape: ``ragbench.v1.RetrievalResultColumns`` for every codec.

A :class:`RetrievalResult` split into parallel columns (see
``protos/ragbench/v1/retrieval.proto``)::

    {"query_id": str, "query": str,
     "doc_ids": [str], "scores": [number | "NaN" | "Infinity" | "-Infinity"], "texts": [str],
     "metadata_counts": [int], "metadata_keys": [str], "metadata_values": [str],
     "dim": int, "embeddings": base64 str, "embedding_dims": [int]}

Hit ``i`` is ``doc_ids[i], scores[i], texts[i]``; its metadata the next
``metadata_counts[i]`` key/value pairs (``metadata_counts`` empty: no hit has
any). Embeddings: when every hit has one of the same length ``dim`` > 0,
``embeddings`` is their concatenation (``len(hits) * dim`` float32) and
``embedding_dims`` is empty; otherwise, if any hit has one,
``embedding_dims[i]`` is hit ``i``'s dimension (``-1``: none), ``embeddings``
the present ones back to back and ``dim`` 0. ``dim`` 0, ``embeddings`` empty and
``embedding_dims`` empty: no hit has one.

:func:`split_columns` makes the columns for encoders; :func:`result_from_columns`
checks a decoded set of columns (lengths agree, counts add up, embeddings cut
exactly) and builds the result, raising :class:`DecodeError` otherwise; the JSON
codecs write :func:`columns_json_tree` and read it back with the typed
:class:`WireColumns` or, when that refuses, :func:`columns_from_json_obj`
(proto3 JSON input rules, as for the row shape).
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from itertools import islice, repeat
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from ..errors import ConfigError, DecodeError
from ..types import Hit, RetrievalResult
from . import SHAPES
from ._wire import (
    _bytes,
    _double,
    _fields,
    _new,
    _set_doc_id,
    _set_embedding,
    _set_metadata,
    _set_score,
    _set_text,
    _string,
    _type_name,
    json_score,
    new_result,
)

_UINT32 = 1 << 32
_INT32 = 1 << 31


class Columns(NamedTuple):
    """A result as parallel columns, in the field order of ``RetrievalResultColumns``."""

    query_id: str
    query: str
    doc_ids: list[str]
    scores: list[float]
    texts: list[str]
    metadata_counts: list[int]
    metadata_keys: list[str]
    metadata_values: list[str]
    dim: int
    embeddings: bytes
    embedding_dims: list[int]


class WireColumns(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The columnar message as it appears on the wire (original proto field names)."""

    query_id: str = ""
    query: str = ""
    doc_ids: list[str] = []
    scores: list[float] = []
    texts: list[str] = []
    metadata_counts: list[int] = []
    metadata_keys: list[str] = []
    metadata_values: list[str] = []
    dim: int = 0
    embeddings: bytes = b""
    embedding_dims: list[int] = []


_get_doc_id = attrgetter("doc_id")
_get_score = attrgetter("score")
_get_text = attrgetter("text")
_get_metadata = attrgetter("metadata")
_get_embedding = attrgetter("embedding")


def _embedding_columns(embs: list[bytes | None]) -> tuple[int, bytes, list[int]]:
    """(dim, embeddings, embedding_dims) for the hits' embeddings."""
    n = len(embs)
    if not n or (embs[0] is None and embs.count(None) == n):
        return 0, b"", []
    if embs[0] is not None and None not in embs:
        size = len(embs[0])
        joined = b"".join(embs)  # type: ignore[arg-type]
        # no size above the first and the right total: every size is the first
        if size and len(joined) == n * size and max(map(len, embs)) == size:  # type: ignore[arg-type]
            return size >> 2, joined, []
    dims = [-1 if e is None else len(e) >> 2 for e in embs]
    return 0, b"".join([e for e in embs if e is not None]), dims


def split_columns(result: RetrievalResult) -> Columns:
    """``result`` as parallel columns (the hits' values, not copies of them).

    Raises ``TypeError``/``AttributeError`` for objects that are not hits
    (the codecs turn those into :class:`~ragbench.errors.InputError`).
    """
    hits = result.hits
    counts: list[int] = []
    keys: list[str] = []
    values: list[str] = []
    count, add_keys, add_values = counts.append, keys.extend, values.extend
    for metadata in map(_get_metadata, hits):
        add_keys(metadata)
        add_values(metadata.values())
        count(len(metadata))
    if not keys:  # no hit has metadata: the column stays empty
        counts = []
    dim, embeddings, dims = _embedding_columns(list(map(_get_embedding, hits)))
    # tuple.__new__: a NamedTuple's own __new__ is a Python function (~0.3 us more)
    return _new_tuple(
        Columns,
        (
            result.query_id,
            result.query,
            list(map(_get_doc_id, hits)),
            list(map(_get_score, hits)),
            list(map(_get_text, hits)),
            counts,
            keys,
            values,
            dim,
            embeddings,
            dims,
        ),
    )


_new_tuple = tuple.__new__


# --- decoding: checks, then the hits ------------------------------------------------------


def _metadata_column(
    n: int, counts: Sequence[int], keys: Sequence[str], values: Sequence[str], codec: str
) -> list[dict[str, str]]:
    """Each hit's metadata dict (``counts`` non-empty); DecodeError when counts do not fit."""
    counts = list(counts)  # read once: min, max and sum below each iterate it
    if len(counts) != n:
        raise DecodeError(codec, f"metadata_counts has {len(counts)} entries for {n} hits")
    if min(counts) < 0 or max(counts) >= _UINT32:
        raise DecodeError(codec, "metadata_counts must be uint32 (0 <= count < 2**32)")
    total = sum(counts)
    if total != len(keys) or total != len(values):
        raise DecodeError(
            codec,
            f"metadata_counts add up to {total} but there are {len(keys)} metadata_keys "
            f"and {len(values)} metadata_values",
        )
    # One iterator of pairs, each hit taking its count: ~2x cheaper than slicing per hit.
    pairs = zip(keys, values, strict=False)
    return [dict(islice(pairs, count)) for count in counts]


def _embedding_column(
    n: int, dim: int, embeddings: bytes, dims: Sequence[int], codec: str
) -> list[bytes | None] | None:
    """Each hit's embedding, or None when no hit has one; DecodeError when they do not fit."""
    if dims:
        return _ragged_embeddings(n, dim, embeddings, dims, codec)
    if not dim:
        if embeddings:
            raise DecodeError(
                codec, f"{len(embeddings)} bytes of embeddings but dim=0 and no embedding_dims"
            )
        return None
    if not 0 < dim < _UINT32:
        raise DecodeError(codec, f"dim must be uint32, got {dim}")
    step = 4 * dim
    if len(embeddings) != n * step:
        raise DecodeError(
            codec,
            f"embeddings hold {len(embeddings)} bytes, expected {n} hits x dim {dim} x 4 "
            f"= {n * step}",
        )
    return [embeddings[i : i + step] for i in range(0, n * step, step)]


def _ragged_embeddings(
    n: int, dim: int, embeddings: bytes, dims: Sequence[int], codec: str
) -> list[bytes | None]:
    if len(dims) != n:
        raise DecodeError(codec, f"embedding_dims has {len(dims)} entries for {n} hits")
    if dim:
        raise DecodeError(codec, f"dim={dim} and embedding_dims both given; dim must be 0")
    if min(dims) < -1 or max(dims) >= _INT32:
        raise DecodeError(codec, "embedding_dims must be -1 (no embedding) or a dimension >= 0")
    total = 4 * sum(d for d in dims if d > 0)
    if total != len(embeddings):
        raise DecodeError(
            codec,
            f"embeddings hold {len(embeddings)} bytes, embedding_dims account for {total}",
        )
    out: list[bytes | None] = []
    pos = 0
    for d in dims:
        if d < 0:
            out.append(None)
        else:
            out.append(embeddings[pos : pos + 4 * d])
            pos += 4 * d
    return out


def _check_scores_finite(scores: Sequence[float], codec: str) -> None:
    # JSON numbers cannot be NaN or infinite (proto3 JSON writes those as strings,
    # which the general reader takes): one here is a literal that overflowed.
    total = sum(scores, 0.0)
    if total - total != 0.0:
        for score in scores:
            if score - score != 0.0:
                raise DecodeError(codec, f"score {score} is out of the double range")


def result_from_columns(columns: Any, codec: str, finite: bool = False) -> RetrievalResult:
    """Check decoded columns and build the :class:`RetrievalResult`; :class:`DecodeError` if
    the columns disagree (lengths, metadata counts, embedding sizes).

    ``columns`` is anything with the fields of ``RetrievalResultColumns`` as
    attributes: :class:`Columns`, :class:`WireColumns` or the parsed protobuf
    message itself (repeated fields as lists or protobuf containers). With
    ``finite``, a non-finite score is an error (see :func:`_check_scores_finite`).
    """
    # Lists or protobuf containers alike: len() to check, then one pass in the loop below.
    doc_ids, scores, texts = columns.doc_ids, columns.scores, columns.texts
    n = len(doc_ids)
    if len(scores) != n or len(texts) != n:
        raise DecodeError(
            codec,
            f"columns of different lengths: doc_ids {n}, scores {len(scores)}, texts {len(texts)}",
        )
    if finite:
        _check_scores_finite(scores, codec)
    keys, values, counts = columns.metadata_keys, columns.metadata_values, columns.metadata_counts
    if counts:
        metadatas = _metadata_column(n, counts, keys, values, codec)
    elif keys or values:
        raise DecodeError(codec, f"{len(keys)} metadata keys but no metadata_counts (expected {n})")
    else:
        metadatas = [{} for _ in range(n)]  # each hit owns its dict
    dim, dims = columns.dim, columns.embedding_dims
    embeddings = columns.embeddings
    embs = _embedding_column(n, dim, embeddings, dims, codec) if dim or dims or embeddings else None
    hits: list[Hit] = []
    append = hits.append
    for doc_id, score, text, metadata, embedding in zip(
        doc_ids, scores, texts, metadatas, embs or repeat(None, n), strict=False
    ):
        # new_hit() inlined: the call itself is ~15% of the conversion.
        hit: Hit = _new(Hit)
        _set_doc_id(hit, doc_id)
        _set_score(hit, score)
        _set_text(hit, text)
        _set_metadata(hit, metadata)
        _set_embedding(hit, embedding)
        append(hit)
    return new_result(columns.query_id, columns.query, hits)


# --- proto3 JSON -----------------------------------------------------------------------------


def columns_json_tree(columns: Columns, exact_scores: bool) -> dict[str, Any]:
    """The columns as plain JSON types in the proto3 JSON mapping (original field names).

    With ``exact_scores`` NaN and infinities are written as the proto3 strings.
    """
    tree = columns._asdict()
    if exact_scores:
        tree["scores"] = [json_score(s) for s in columns.scores]
    tree["embeddings"] = binascii.b2a_base64(columns.embeddings, newline=False).decode("ascii")
    return tree


_COLUMN_NAMES = {
    "query_id": "query_id",
    "queryId": "query_id",
    "query": "query",
    "doc_ids": "doc_ids",
    "docIds": "doc_ids",
    "scores": "scores",
    "texts": "texts",
    "metadata_counts": "metadata_counts",
    "metadataCounts": "metadata_counts",
    "metadata_keys": "metadata_keys",
    "metadataKeys": "metadata_keys",
    "metadata_values": "metadata_values",
    "metadataValues": "metadata_values",
    "dim": "dim",
    "embeddings": "embeddings",
    "embedding_dims": "embedding_dims",
    "embeddingDims": "embedding_dims",
}


def _integer(value: object, what: str, codec: str) -> int:
    # proto3 JSON: an integer field is a JSON number without a fraction, or that number as a string.
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is str and value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    raise DecodeError(codec, f"{what} must be an integer, got {_type_name(value)} {value!r:.40}")


def _array(value: object, what: str, codec: str) -> list[Any]:
    if type(value) is not list:
        raise DecodeError(codec, f"{what} must be an array, got {_type_name(value)}")
    return value


def columns_from_json_obj(obj: object, codec: str) -> RetrievalResult:
    """Validate a parsed proto3 JSON value of the columnar message and build the result.

    Accepts what the proto3 JSON mapping allows (lowerCamelCase or original
    names, ``null`` or omitted fields as defaults, doubles and integers as
    strings, URL-safe or unpadded base64); :class:`DecodeError` for anything else.
    """
    f = _fields(obj, _COLUMN_NAMES, "the payload", codec)
    strings = {
        name: [
            _string(v, f"{name}[{i}]", codec)
            for i, v in enumerate(_array(f.get(name, []), name, codec))
        ]
        for name in ("doc_ids", "texts", "metadata_keys", "metadata_values")
    }
    scores = [
        _double(v, f"scores[{i}]", codec)
        for i, v in enumerate(_array(f.get("scores", []), "scores", codec))
    ]
    counts = [
        _integer(v, f"metadata_counts[{i}]", codec)
        for i, v in enumerate(_array(f.get("metadata_counts", []), "metadata_counts", codec))
    ]
    dims = [
        _integer(v, f"embedding_dims[{i}]", codec)
        for i, v in enumerate(_array(f.get("embedding_dims", []), "embedding_dims", codec))
    ]
    embeddings = _bytes(f["embeddings"], "embeddings", codec) if "embeddings" in f else b""
    columns = Columns(
        _string(f.get("query_id", ""), "query_id", codec),
        _string(f.get("query", ""), "query", codec),
        strings["doc_ids"],
        scores,
        strings["texts"],
        counts,
        strings["metadata_keys"],
        strings["metadata_values"],
        _integer(f.get("dim", 0), "dim", codec),
        embeddings,
        dims,
    )
    return result_from_columns(columns, codec)


def check_shape(codec: str, shape: object) -> str:
    """``shape`` if it names a payload shape, else :class:`ConfigError` listing them."""
    if shape not in SHAPES:
        raise ConfigError(
            f"codec {codec!r}: unknown shape {shape!r}; valid shapes: {', '.join(SHAPES)} "
            "([serialize] shape, --payload-shape)"
        )
    return str(shape)
