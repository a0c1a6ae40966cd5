"""hnswlib's ``save_index`` file layout, checked before hnswlib reads a payload.

Private to :mod:`ragbench.indexes.hnswlib_index` (``HnswIndex._attach``):
hnswlib trusts its file, so every size, level and neighbour id is checked
against the header first (a crafted payload must be an
:class:`~ragbench.errors.IndexFileError`, never an out-of-bounds read).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..errors import IndexFileError
from ._arrays import batch_is_finite

# hnswlib 0.8 save_index header: offsetLevel0, max_elements, cur_element_count,
# size_data_per_element, label_offset, offsetData (size_t), maxlevel (int),
# enterpoint_node (uint32), maxM, maxM0, M (size_t), mult (double), ef_construction.
_HNSW_HEADER = struct.Struct("<6QiI3QdQ")
# hnswlib marks a deleted element in the third byte of its level-0 link-list header.
_DELETE_MARK = 0x01


class _HnswHeader(NamedTuple):
    """The fields of :data:`_HNSW_HEADER`, in file order."""

    offset_level0: int
    max_elements: int
    element_count: int
    size_per_element: int
    label_offset: int
    offset_data: int
    max_level: int
    entry_point: int
    max_m: int
    max_m0: int
    m: int
    mult: float
    ef_construction: int


def check_hnswlib_payload(payload: memoryview, dim: int, count: int, m: int) -> None:
    """Walk hnswlib's file layout and reject anything it could mis-read.

    hnswlib trusts its file: a wrong element size, link count or neighbour
    id makes it read out of bounds. Every size, level and neighbour id is
    checked here against the header before hnswlib sees the bytes.
    """
    header = _check_hnswlib_header(payload, dim, count, m)
    end0 = _check_level0(payload, count, header)
    _check_upper_levels(payload, count, header, end0)


def _check_hnswlib_header(data: memoryview, dim: int, count: int, m: int) -> _HnswHeader:
    """Check the header against ``dim``, ``count`` and ``M``; return its fields."""
    if len(data) < _HNSW_HEADER.size:
        raise IndexFileError("hnsw: payload is shorter than hnswlib's header")
    header = _HnswHeader._make(_HNSW_HEADER.unpack_from(data, 0))
    expected = {
        "offsetLevel0": (header.offset_level0, 0),
        "element count": (header.element_count, count),
        "max_elements": (header.max_elements, count),
        "M": (header.m, m),
        "maxM": (header.max_m, m),
        "maxM0": (header.max_m0, 2 * m),
        "offsetData": (header.offset_data, 2 * m * 4 + 4),
        "label_offset": (header.label_offset, 2 * m * 4 + 4 + dim * 4),
        "size_data_per_element": (header.size_per_element, 2 * m * 4 + 4 + dim * 4 + 8),
    }
    for what, (got, want) in expected.items():
        if got != want:
            raise IndexFileError(
                f"hnsw: payload {what} is {got}, expected {want} for dim={dim}, M={m}, "
                f"count={count}: the payload does not match its header"
            )
    if not 0 <= header.max_level < 64 or header.entry_point >= count:
        raise IndexFileError("hnsw: payload entry point or top level is out of range")
    return header


def _check_level0(data: memoryview, count: int, header: _HnswHeader) -> int:
    """Check the level-0 block (neighbour counts, ids, labels); return where it ends."""
    per_el, label_off, max_m0 = header.size_per_element, header.label_offset, header.max_m0
    start = _HNSW_HEADER.size
    end0 = start + count * per_el
    if len(data) < end0:
        raise IndexFileError("hnsw: payload is truncated inside the level-0 block")
    level0 = np.frombuffer(data, dtype=np.uint8, count=count * per_el, offset=start)
    level0 = level0.reshape(count, per_el)
    counts = level0[:, 0:2].copy().view(np.uint16).ravel()
    deleted = int(np.count_nonzero(level0[:, 2] & _DELETE_MARK))
    if deleted:
        raise IndexFileError(
            f"hnsw: {deleted} of the {count} items are marked deleted; a ragbench index "
            "deletes nothing and hnswlib never returns deleted items: rebuild the index"
        )
    dim = (label_off - header.offset_data) // 4
    vectors = np.ndarray(
        (count, dim), "<f4", buffer=data, offset=start + header.offset_data, strides=(per_el, 4)
    )
    if not batch_is_finite(vectors):
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise IndexFileError(
            f"hnsw: stored vector {bad} holds NaN or inf; such an index cannot be searched: "
            "rebuild it"
        )
    if (counts > max_m0).any():
        raise IndexFileError("hnsw: a level-0 neighbour list is longer than maxM0")
    neighbours = level0[:, 4 : max_m0 * 4 + 4].copy().view(np.uint32)
    used = np.arange(max_m0)[None, :] < counts[:, None]
    if (neighbours[used] >= count).any():
        raise IndexFileError("hnsw: a level-0 neighbour id is out of range")
    labels = level0[:, label_off : label_off + 8].copy().view(np.uint64).ravel()
    if (labels >= count).any() or np.unique(labels).size != count:
        raise IndexFileError("hnsw: payload labels are not the row ids 0..count-1")
    return end0


def _check_upper_levels(data: memoryview, count: int, header: _HnswHeader, pos: int) -> None:
    """Check each element's upper-level link lists, which run from ``pos`` to the end."""
    maxlevel, enter, max_m = header.max_level, header.entry_point, header.max_m
    per_level = max_m * 4 + 4
    size = len(data)
    unpack_u32 = struct.Struct("<I").unpack_from
    for element in range(count):
        if pos + 4 > size:
            raise IndexFileError("hnsw: payload is truncated inside the upper levels")
        (nbytes,) = unpack_u32(data, pos)
        pos += 4
        if not nbytes:
            if element == enter and maxlevel:
                raise IndexFileError("hnsw: the entry point does not reach the top level")
            continue
        levels, rest = divmod(nbytes, per_level)
        if rest or levels > maxlevel or pos + nbytes > size:
            raise IndexFileError("hnsw: an upper-level link list has an impossible size")
        if element == enter and levels != maxlevel:
            raise IndexFileError("hnsw: the entry point does not reach the top level")
        block = np.frombuffer(data, dtype=np.uint32, count=nbytes // 4, offset=pos)
        block = block.reshape(levels, max_m + 1)
        lens = block[:, 0] & 0xFFFF
        if (lens > max_m).any():
            raise IndexFileError("hnsw: an upper-level neighbour list is longer than M")
        ids = block[:, 1:][np.arange(max_m)[None, :] < lens[:, None]]
        if (ids >= count).any():
            raise IndexFileError("hnsw: an upper-level neighbour id is out of range")
        pos += nbytes
    if pos != size:
        raise IndexFileError("hnsw: payload has bytes after the last link list")
