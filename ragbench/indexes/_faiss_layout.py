"""Walk the bytes of a serialized faiss index before faiss reads them.

faiss trusts the sizes in its own format: a vector length field claiming
3 GB makes it allocate and zero 3 GB before it notices the file is 5 MB. This
module reads the layout of the index types ragbench writes (``IndexFlat``,
``IndexHNSWFlat``, ``IndexIVFFlat``, ``IndexLSH`` and the compressed
``IndexIVFPQ``, ``IndexIVFPQFastScan``, ``IndexIVFScalarQuantizer``,
``IndexHNSWSQ``; format of faiss ``impl/index_write.cpp``) and checks,
before faiss sees a byte:

* every length field fits in the bytes that are left, and the walk ends
  exactly at the end of the payload;
* ``d`` and ``ntotal`` equal what the ragbench header says, and each array
  of per-item data holds ``ntotal`` items;
* every stored float (vectors, thresholds, rotation) is finite: an index of
  NaN vectors loads but answers nothing useful.

Any failure raises :class:`~ragbench.errors.IndexFileError`.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import IndexFileError

_HEADER = struct.Struct("<iqqq?i")  # d, ntotal, two dummies, is_trained, metric_type
_METRIC_NAMES = {0: "inner product", 1: "L2"}


class _Reader:
    """A cursor over the payload that refuses to read past its end."""

    def __init__(self, data: memoryview, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def fail(self, problem: str) -> IndexFileError:
        return IndexFileError(f"{self.what}: faiss payload {problem} (at byte {self.pos})")

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"claims {n} bytes where {len(self.data) - self.pos} are left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def one(self, fmt: str) -> Any:
        return self.unpack(fmt)[0]

    def fourcc(self) -> bytes:
        return bytes(self.take(4))

    def vector(self, itemsize: int, count_is_words: bool = False) -> memoryview:
        """A length-prefixed array (``size_t`` count of ``itemsize`` items)."""
        n = self.one("<Q")
        if count_is_words:  # faiss's "XB" vectors count 4-byte words of a byte array
            n *= 4
            itemsize = 1
        if n > len(self.data):
            raise self.fail(
                f"claims an array of {n * itemsize} bytes where {len(self.data) - self.pos} "
                "are left"
            )
        return self.take(n * itemsize)


def _finite(reader: _Reader, raw: memoryview, what: str) -> None:
    values = np.frombuffer(raw, dtype="<f4")
    # min and max propagate NaN and meet +-inf: no temporary as large as the vectors
    if values.size and not (-np.inf < float(values.min()) and float(values.max()) < np.inf):
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise IndexFileError(
            f"{reader.what}: the stored {what} hold NaN or inf (value {bad}); "
            "such an index cannot be searched: rebuild it"
        )


def _index_header(r: _Reader, dim: int, count: int) -> int:
    d, ntotal, _, _, _, metric = r.unpack("<iqqq?i")
    if metric > 1:
        r.take(4)  # metric_arg
    if d != dim or ntotal != count:
        raise r.fail(
            f"says d={d}, ntotal={ntotal}; the ragbench header says d={dim}, count={count}"
        )
    return int(metric)


def _flat(r: _Reader, dim: int, count: int) -> None:
    if r.fourcc() not in (b"IxFI", b"IxF2", b"IxFl"):
        raise r.fail("does not hold the expected IndexFlat")
    _index_header(r, dim, count)
    codes = r.vector(1, count_is_words=True)
    if len(codes) != count * dim * 4:
        raise r.fail(f"holds {len(codes)} bytes of vectors, {count} x {dim} float32 expected")
    _finite(r, codes, "vectors")


def _hnsw_graph(r: _Reader, dim: int, count: int) -> None:
    _index_header(r, dim, count)
    r.vector(8)  # assign_probas (double)
    r.vector(4)  # cum_nneighbor_per_level (int)
    if len(r.vector(4)) != 4 * count:  # levels (int per item)
        raise r.fail("holds a level list that is not one per item")
    if len(r.vector(8)) != 8 * (count + 1):  # offsets (size_t per item + 1)
        raise r.fail("holds neighbour offsets that are not one per item")
    r.vector(4)  # neighbors (int)
    r.unpack("<5i")  # entry_point, max_level, efConstruction, efSearch, upper_beam


def _hnsw(r: _Reader, dim: int, count: int) -> None:
    _hnsw_graph(r, dim, count)
    _flat(r, dim, count)


def _hnsw_sq(r: _Reader, dim: int, count: int) -> None:
    _hnsw_graph(r, dim, count)
    if r.fourcc() != b"IxSQ":
        raise r.fail("does not hold the expected IndexScalarQuantizer")
    _index_header(r, dim, count)
    code_size = _sq(r, dim)
    if len(r.vector(1)) != count * code_size:
        raise r.fail(f"holds codes that are not {count} x {code_size} bytes")


def _ivf_header(r: _Reader, dim: int, count: int) -> int:
    """The IVF header (index header, nlist, flat quantizer, direct map); returns nlist."""
    _index_header(r, dim, count)
    nlist, _ = r.unpack("<QQ")  # nlist, nprobe
    if not 1 <= nlist <= max(1, count):
        raise r.fail(f"says nlist={nlist} for {count} items")
    start = r.pos
    if r.fourcc() not in (b"IxFI", b"IxF2"):
        raise r.fail("does not hold the expected flat quantizer")
    r.pos = start
    _flat(r, dim, nlist)
    kind = r.one("<B")  # direct map type
    r.vector(8)
    if kind == 2:
        r.vector(16)
    return int(nlist)


def _ivf(r: _Reader, dim: int, count: int) -> None:
    nlist = _ivf_header(r, dim, count)
    _inverted_lists(r, count, nlist, dim * 4, floats=True)


def _pq(r: _Reader, dim: int) -> int:
    """A ProductQuantizer (d, M, nbits, centroids); returns its code size in bytes."""
    d, m, nbits = r.unpack("<QQQ")
    if d != dim or not 1 <= m <= dim or dim % m or not 1 <= nbits <= 16:
        raise r.fail(f"holds a product quantizer with d={d}, M={m}, nbits={nbits}")
    centroids = r.vector(4)
    if len(centroids) != 4 * dim * 2**nbits:
        raise r.fail(f"holds {len(centroids)} bytes of PQ centroids")
    _finite(r, centroids, "PQ centroids")
    return int((m * nbits + 7) // 8)


def _sq(r: _Reader, dim: int) -> int:
    """A ScalarQuantizer (qtype, range stat, d, code size, ranges); returns the code size."""
    r.unpack("<iif")  # qtype, rangestat, rangestat_arg
    d, code_size = r.unpack("<QQ")
    if d != dim or not 1 <= code_size <= 4 * dim:
        raise r.fail(f"holds a scalar quantizer with d={d}, code_size={code_size}")
    _finite(r, r.vector(4), "scalar quantizer ranges")
    return int(code_size)


def _ivf_pq(r: _Reader, dim: int, count: int) -> None:
    nlist = _ivf_header(r, dim, count)
    r.one("<?")  # by_residual
    code_size = r.one("<Q")
    if _pq(r, dim) != code_size:
        raise r.fail(f"says code_size={code_size}, which its product quantizer does not give")
    _inverted_lists(r, count, nlist, code_size, floats=False)


def _ivf_sq(r: _Reader, dim: int, count: int) -> None:
    nlist = _ivf_header(r, dim, count)
    code_size = _sq(r, dim)
    if r.one("<Q") != code_size:
        raise r.fail("has a code size that disagrees with its scalar quantizer")
    r.one("<?")  # by_residual
    _inverted_lists(r, count, nlist, code_size, floats=False)


def _ivf_pq_fastscan(r: _Reader, dim: int, count: int) -> None:
    nlist = _ivf_header(r, dim, count)
    r.one("<?")  # by_residual
    r.one("<Q")  # code_size
    bbs, _ = r.unpack("<iQ")  # bbs, M2
    r.unpack("<iQ")  # implem, qbs2
    _pq(r, dim)
    if r.fourcc() != b"ilbl":
        raise r.fail("does not hold block inverted lists")
    got_nlist, _, n_per_block, block_size = r.unpack("<QQQQ")
    if got_nlist != nlist or n_per_block != bbs or not 1 <= block_size <= 1 << 20:
        raise r.fail(f"block inverted lists say nlist={got_nlist}, n_per_block={n_per_block}")
    total = 0
    for _ in range(nlist):
        n = len(r.vector(8)) // 8  # ids
        total += n
        if len(r.vector(1)) != -(-n // n_per_block) * block_size:
            raise r.fail("holds a code block list that does not match its ids")
    if total != count:
        raise r.fail(f"block inverted lists hold {total} items, {count} expected")


def _inverted_lists(r: _Reader, count: int, nlist: int, code_size: int, floats: bool) -> None:
    if r.fourcc() != b"ilar":
        raise r.fail("does not hold array inverted lists")
    got_nlist, got_code_size = r.unpack("<QQ")
    if got_nlist != nlist or got_code_size != code_size:
        raise r.fail(f"inverted lists say nlist={got_nlist}, code_size={got_code_size}")
    layout = r.fourcc()
    sizes = np.frombuffer(r.vector(8), dtype="<u8")
    if layout == b"full":
        lengths = sizes
    elif layout == b"sprs" and sizes.size % 2 == 0:
        lengths = sizes[1::2]
        if sizes.size and int(sizes[0::2].max()) >= nlist:
            raise r.fail("has a sparse list number beyond nlist")
    else:
        raise r.fail(f"has an unknown inverted-list layout {layout!r}")
    if layout == b"full" and lengths.size != nlist:
        raise r.fail(f"has {lengths.size} list sizes for nlist={nlist}")
    if int(lengths.sum(dtype=np.uint64)) != count or (lengths > count).any():
        raise r.fail(f"inverted lists hold {int(lengths.sum())} items, {count} expected")
    for n in lengths.tolist():
        if n:
            codes = r.take(n * code_size)
            if floats:
                _finite(r, codes, "vectors")
            r.take(n * 8)  # ids


def _lsh(r: _Reader, dim: int, count: int) -> None:
    _index_header(r, dim, count)
    nbits, _, _ = r.unpack("<i??")
    _finite(r, r.vector(4), "thresholds")
    code_size = r.one("<i")
    if code_size != (nbits + 7) // 8:
        raise r.fail(f"says code_size={code_size} for nbits={nbits}")
    if r.fourcc() != b"rrot":
        raise r.fail("does not hold the expected random rotation")
    r.one("<?")  # have_bias
    _finite(r, r.vector(4), "rotation matrix")
    _finite(r, r.vector(4), "rotation bias")
    r.unpack("<ii?")  # d_in, d_out, is_trained
    if len(r.vector(1)) != count * code_size:
        raise r.fail(f"holds codes that are not {count} x {code_size} bytes")


_WALKERS = {
    b"IHNf": _hnsw,
    b"IwFl": _ivf,
    b"IxHe": _lsh,
    b"IwPQ": _ivf_pq,
    b"IwSq": _ivf_sq,
    b"IwPf": _ivf_pq_fastscan,
    b"IHNs": _hnsw_sq,
}


def check_faiss_payload(payload: memoryview, dim: int, count: int, what: str) -> bytes:
    """Check a serialized faiss index of ``count`` ``dim``-d items; return its fourcc.

    Raises :class:`IndexFileError` when any size disagrees with the bytes or
    with ``dim``/``count``, or a stored float is NaN/inf (see the module
    docstring). Reads each byte at most once (one ``isfinite`` pass over the
    vectors).
    """
    r = _Reader(memoryview(payload).cast("B"), what)
    fourcc = bytes(r.data[:4])
    walker = _WALKERS.get(fourcc)
    if walker is None:
        _flat(r, dim, count)
    else:
        r.take(4)
        walker(r, dim, count)
    if r.pos != len(r.data):
        raise r.fail(f"has {len(r.data) - r.pos} bytes after the index")
    return fourcc
