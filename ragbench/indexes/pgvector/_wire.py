"""pgvector's binary formats, encoded and decoded with numpy (no per-element Python).

- a ``vector`` value: int16 dimension, int16 zero, ``dim`` float4, big-endian;
- an ``int8[]`` array: int32 ndim = 1, int32 has-nulls = 0, int32 element
  oid (20), int32 length, int32 lower bound (1), then per element int32
  length (8) and the int64;
- a binary ``COPY`` stream of ``(id int8, embedding vector)`` rows: the
  ``PGCOPY`` signature, int32 flags, int32 extension length, per row int16
  field count (2), int32 length + int64 id, int32 length + the vector
  value, and an int16 ``-1`` trailer. Every row has the same size, so a
  stream is one numpy structured array;
- with attribute columns (int8, float8 or text after the vector; a float
  NaN is sent as NULL) the rows differ in size: the stream is built in
  chunks of rows, each by scattering the fixed part and every field into
  one byte buffer with numpy (:func:`copy_chunks`);
- ``float8[]`` and ``text[]`` arrays, as ``int8[]`` (text elements: int32
  length and the UTF-8 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping

import numpy as np

from ...errors import IndexServerError

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = _SIGNATURE + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_INT8_OID = 20
_FLOAT8_OID = 701
_TEXT_OID = 25
#: column dtype kind -> the oid of an array of its PostgreSQL type (int8[], float8[], text[])
ARRAY_OIDS = {"i": 1016, "f": 1022, "U": 1009}
_CHUNK_ROWS = 8192


def _row_dtype(dim: int) -> np.dtype:
    return np.dtype(
        [
            ("nfields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("vec", ">f4", (dim,)),
        ]
    )


def vector_value(q: np.ndarray) -> bytes:
    """One query float32 ``(dim,)`` as a binary ``vector`` parameter."""
    return struct.pack(">hh", q.shape[0], 0) + q.astype(">f4").tobytes()


def id_array(ids: np.ndarray) -> bytes:
    """int64 ``(m,)`` as a binary ``int8[]`` parameter."""
    body = np.empty(ids.shape[0], dtype=[("len", ">i4"), ("v", ">i8")])
    body["len"] = 8
    body["v"] = ids
    return struct.pack(">iiiii", 1, 0, _INT8_OID, ids.shape[0], 1) + body.tobytes()


def float_array(values: np.ndarray) -> bytes:
    """float64 ``(m,)`` as a binary ``float8[]`` parameter."""
    body = np.empty(values.shape[0], dtype=[("len", ">i4"), ("v", ">f8")])
    body["len"] = 8
    body["v"] = values
    return struct.pack(">iiiii", 1, 0, _FLOAT8_OID, values.shape[0], 1) + body.tobytes()


def text_array(values: np.ndarray) -> bytes:
    """str ``(m,)`` as a binary ``text[]`` parameter."""
    parts = [struct.pack(">iiiii", 1, 0, _TEXT_OID, values.shape[0], 1)]
    for v in values.tolist():
        raw = v.encode("utf-8")
        parts.append(struct.pack(">i", len(raw)) + raw)
    return b"".join(parts)


def copy_rows(ids: np.ndarray, vectors: np.ndarray) -> bytes:
    """A complete binary ``COPY ... (id, embedding)`` stream of these rows."""
    n, dim = vectors.shape
    rows = np.empty(n, dtype=_row_dtype(dim))
    rows["nfields"] = 2
    rows["id_len"] = 8
    rows["id"] = ids
    rows["vec_len"] = 4 + 4 * dim
    rows["dim"] = dim
    rows["unused"] = 0
    rows["vec"] = vectors
    return _HEADER + rows.tobytes() + _TRAILER


def read_copy_rows(stream: bytes, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids int64 (n,), vectors float32 (n, dim))`` of a binary ``COPY ... TO`` stream."""
    if not stream.startswith(_SIGNATURE) or len(stream) < len(_HEADER) + 2:
        raise IndexServerError("pgvector: the server's COPY stream has no PGCOPY header")
    ext = struct.unpack_from(">i", stream, len(_SIGNATURE) + 4)[0]
    body = memoryview(stream)[len(_HEADER) + ext : -2]
    dtype = _row_dtype(dim)
    if len(body) % dtype.itemsize:
        raise IndexServerError("pgvector: the server's COPY rows are not (int8, vector(dim))")
    rows = np.frombuffer(body, dtype=dtype)
    return rows["id"].astype(np.int64), rows["vec"].astype(np.float32)


def _field(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ``(c,)`` field lengths, -1 for NULL; uint8 payloads concatenated in row order)."""
    if column.dtype.kind == "U":
        enc = np.char.encode(column, "utf-8")
        lens = np.char.str_len(enc).astype(np.int64)
        width = enc.dtype.itemsize
        raw = np.frombuffer(enc.tobytes(), dtype=np.uint8).reshape(column.shape[0], width)
        return lens, raw[np.arange(width) < lens[:, None]]
    if column.dtype.kind == "f":
        null = np.isnan(column)
        lens = np.where(null, -1, 8).astype(np.int64)
        return lens, column[~null].astype(">f8").view(np.uint8)
    return np.full(column.shape[0], 8, np.int64), column.astype(">i8").view(np.uint8)


def _scatter(out: np.ndarray, at: np.ndarray, lens: np.ndarray, data: np.ndarray) -> None:
    """Write ``data`` (row ``r``'s ``lens[r]`` bytes in turn) at offsets ``at`` of ``out``."""
    total = int(lens.sum())
    if total:
        first = np.cumsum(lens) - lens
        out[np.repeat(at - first, lens) + np.arange(total)] = data


def copy_chunks(
    ids: np.ndarray, vectors: np.ndarray, attrs: Mapping[str, np.ndarray]
) -> Iterator[bytes]:
    """A binary ``COPY ... (id, embedding, *attrs)`` stream of these rows, in pieces.

    ``attrs``: name -> int64, float64 or str ``(n,)`` column, in the
    ``COPY`` column order.
    """
    n, dim = vectors.shape
    yield _HEADER
    head_t = _row_dtype(dim)
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(n, start + _CHUNK_ROWS)
        c = stop - start
        head = np.empty(c, dtype=head_t)
        head["nfields"] = 2 + len(attrs)
        head["id_len"] = 8
        head["id"] = ids[start:stop]
        head["vec_len"] = 4 + 4 * dim
        head["dim"] = dim
        head["unused"] = 0
        head["vec"] = vectors[start:stop]
        fields = [_field(col[start:stop]) for col in attrs.values()]
        row_len = head_t.itemsize + sum(4 + np.maximum(lens, 0) for lens, _ in fields)
        at = np.cumsum(row_len) - row_len
        out = np.empty(int(np.sum(row_len)), dtype=np.uint8)
        fixed = np.full(c, head_t.itemsize, np.int64)
        _scatter(out, at, fixed, head.view(np.uint8))
        at = at + head_t.itemsize
        for lens, data in fields:
            _scatter(out, at, np.full(c, 4, np.int64), lens.astype(">i4").view(np.uint8))
            at = at + 4
            payload = np.maximum(lens, 0)
            _scatter(out, at, payload, data)
            at = at + payload
        yield out.tobytes()
    yield _TRAILER
