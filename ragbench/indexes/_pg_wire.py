"""pgvector's binary formats, encoded and decoded with numpy (no per-element Python).

- a ``vector`` value: int16 dimension, int16 zero, ``dim`` float4, big-endian;
- an ``int8[]`` array: int32 ndim = 1, int32 has-nulls = 0, int32 element
  oid (20), int32 length, int32 lower bound (1), then per element int32
  length (8) and the int64;
- a binary ``COPY`` stream of ``(id int8, embedding vector)`` rows: the
  ``PGCOPY`` signature, int32 flags, int32 extension length, per row int16
  field count (2), int32 length + int64 id, int32 length + the vector
  value, and an int16 ``-1`` trailer. Every row has the same size, so a
  stream is one numpy structured array.
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import IndexServerError

__all__ = ["copy_rows", "id_array", "read_copy_rows", "vector_value"]

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = _SIGNATURE + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_INT8_OID = 20


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
