"""Saving and loading indexes: one file, a JSON header, then the library's own bytes.

File layout (all integers little-endian)::

    offset 0   14 bytes  b"ragbench-index"            magic
    offset 14   2 bytes  uint16 format version (1)
    offset 16   8 bytes  uint64 header length H (<= 1 MiB)
    offset 24   H bytes  UTF-8 JSON header
    offset 24+H          payload (exactly header["payload"]["bytes"] bytes)

The header holds ``magic`` ("ragbench-index"), ``format_version``,
``backend``, ``build_params``, ``dim``, ``metric``, ``count``, ``library``
(name + version that wrote the payload), ``payload_format``,
``payload`` (``bytes`` and ``sha256``) and ``data``: which data the index
was built on, ``{"fingerprint": data_fingerprint(corpus), "source": ...}``
when ``Index.save(path, data=corpus)`` was given it, else null. A pipeline
refuses an index file whose fingerprint is not that of its own corpus (and
one without a fingerprint). The payload is the library's own
serialization: ``faiss.serialize_index`` for the faiss backends,
``hnswlib.Index.save_index`` for ``hnsw``, raw MinHash hash values for
``minhash-lsh``. Nothing is pickled.

Loading checks, in this order and before any native library sees a byte:
regular file (a FIFO or device is refused before it is read), magic,
version, header length, JSON (nesting depth bounded), total file size against the declared
payload size (truncation), the payload's SHA-256, the backend being
registered, then the backend's own structural checks (dimension and count
against the header; hnswlib's and usearch's binary layouts are walked in
Python first because those libraries trust their files; qdrant-edge's
vectors are read back and compared with a hash the header holds). The
header itself is not covered by the payload's SHA-256: each backend compares
what its engine reads with the header rather than trusting either. Any
failure raises :class:`~ragbench.errors.IndexFileError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import IndexFileError, UnknownBackendError
from ..files import open_regular
from ..validate import json_loads
from .contract import PersistentIndex, declares

if TYPE_CHECKING:
    from . import Index

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "data_fingerprint",
    "load_index",
    "read_index_file",
    "read_index_header",
    "write_index_file",
]

MAGIC = b"ragbench-index"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<14sHQ")
_MAX_HEADER = 1 << 20


def write_index_file(path: Any, header: dict[str, Any], payload: bytes | memoryview) -> None:
    """Write ``header`` (completed with magic, version, payload size and hash) and ``payload``.

    The file is written next to ``path`` and renamed into place, so a crash
    never leaves a half-written index under the final name.
    """
    view = memoryview(payload).cast("B")
    full = dict(header)
    full["magic"] = MAGIC.decode()
    full["format_version"] = FORMAT_VERSION
    full["payload"] = {"bytes": view.nbytes, "sha256": hashlib.sha256(view).hexdigest()}
    blob = json.dumps(full, sort_keys=True, separators=(",", ":")).encode()
    if len(blob) > _MAX_HEADER:
        raise IndexFileError(f"index header is {len(blob)} bytes, more than the 1 MiB limit")
    target = os.fspath(path)
    # A temporary name of its own per call: two threads or processes saving to
    # one path each write their own file and the last rename wins whole.
    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(target)), prefix=f".{os.path.basename(target)}."
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(blob)))
            fh.write(blob)
            fh.write(view)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; an index file is worth sharing
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def data_fingerprint(data: Any) -> str:
    """sha256 hex of what an index is built on: float32 vectors, a list of texts, or both
    (a :class:`~ragbench.indexes.hybrid_index.Pair`: the two fingerprints hashed together).

    Vectors: the dtype, the shape and the bytes of the C-contiguous array (the
    caller's array, before any normalisation an index makes). Texts: each
    text's UTF-8 bytes with its length. 100 000 x 384 float32 (154 MB) took
    0.09 s on an idle core of the dev machine and 0.2-0.3 s with the machine
    loaded (sha256 uses the CPU's SHA instructions; blake2b took 0.15 s idle).
    """
    sha = hashlib.sha256()
    if hasattr(data, "vectors") and hasattr(data, "texts"):
        # a hybrid index's Pair: the fingerprints of its vectors and of its texts
        sha.update(b"pair\0")
        sha.update(data_fingerprint(data.vectors).encode())
        sha.update(data_fingerprint(data.texts).encode())
        return sha.hexdigest()
    if isinstance(data, Sequence) and not hasattr(data, "shape"):
        sha.update(b"texts\0")
        for text in data:
            raw = str(text).encode("utf-8", "surrogatepass")
            sha.update(len(raw).to_bytes(8, "little"))
            sha.update(raw)
        return sha.hexdigest()
    import numpy as np

    arr = np.ascontiguousarray(data)
    sha.update(f"{arr.dtype.str}{list(arr.shape)}\0".encode())
    sha.update(arr.data.cast("B") if arr.size else b"")
    return sha.hexdigest()


def _read_header(fh: Any, path: str, size: int) -> tuple[dict[str, Any], int]:
    prefix = fh.read(_PREFIX.size)
    if len(prefix) < _PREFIX.size or not prefix.startswith(MAGIC):
        raise IndexFileError(
            f"{path}: not a ragbench index file (no 'ragbench-index' magic at the start); "
            "write indexes with Index.save() and read them with rb.indexes.load()"
        )
    _, version, hlen = _PREFIX.unpack(prefix)
    if version != FORMAT_VERSION:
        raise IndexFileError(
            f"{path}: index file format version {version} is not supported "
            f"(this ragbench reads version {FORMAT_VERSION})"
        )
    if hlen > _MAX_HEADER or _PREFIX.size + hlen > size:
        raise IndexFileError(
            f"{path}: header length {hlen} is impossible: file truncated or corrupt"
        )
    blob = fh.read(hlen)
    try:
        header = json_loads(blob, f"{path}: the header", IndexFileError)
    except UnicodeDecodeError:
        raise IndexFileError(f"{path}: the JSON header is corrupt") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC.decode():
        raise IndexFileError(f"{path}: the header does not carry the 'ragbench-index' magic")
    if header.get("format_version") != FORMAT_VERSION:
        raise IndexFileError(f"{path}: header format version does not match the file prefix")
    payload = header.get("payload")
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("bytes"), int)
        or not isinstance(payload.get("sha256"), str)
    ):
        raise IndexFileError(f"{path}: the header does not describe its payload")
    for key, kind in (("backend", str), ("metric", str), ("count", int)):
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise IndexFileError(f"{path}: header field {key!r} is missing or has the wrong type")
    dim = header.get("dim")
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
        raise IndexFileError(f"{path}: header field 'dim' must be a positive integer or null")
    if header["count"] < 1:
        raise IndexFileError(f"{path}: header says the index holds {header['count']} items")
    data = header.get("data")
    if data is not None and not (
        isinstance(data, dict) and isinstance(data.get("fingerprint"), str)
    ):
        raise IndexFileError(f"{path}: header field 'data' is not a table with a fingerprint")
    offset = _PREFIX.size + hlen
    expected = offset + payload["bytes"]
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise IndexFileError(
            f"{path}: file {what}: {size} bytes on disk, the header promises {expected}"
        )
    return header, offset


def read_index_header(path: Any) -> dict[str, Any]:
    """The verified JSON header of an index file, without reading the payload."""
    name = os.fspath(path)
    try:
        with open_regular(
            name, limit_bytes=None, what="index file", error=IndexFileError, os_errors=True
        ) as fh:
            header, _ = _read_header(fh, name, os.fstat(fh.fileno()).st_size)
    except OSError as exc:
        raise IndexFileError(f"{name}: cannot read index file ({exc.strerror})") from None
    return header


def read_index_file(path: Any) -> tuple[dict[str, Any], memoryview]:
    """Header and payload of an index file, after size and SHA-256 checks."""
    name = os.fspath(path)
    try:
        with open_regular(
            name, limit_bytes=None, what="index file", error=IndexFileError, os_errors=True
        ) as fh:
            header, _ = _read_header(fh, name, os.fstat(fh.fileno()).st_size)
            want = header["payload"]["bytes"]
            buf = bytearray(want)
            got = fh.readinto(buf)
    except OSError as exc:
        raise IndexFileError(f"{name}: cannot read index file ({exc.strerror})") from None
    if got != want:
        raise IndexFileError(f"{name}: file truncated while reading the payload")
    view = memoryview(buf)
    if hashlib.sha256(view).hexdigest() != header["payload"]["sha256"]:
        raise IndexFileError(f"{name}: payload checksum mismatch: the file is corrupt")
    return header, view


def load_index(path: Any) -> Index:
    """Load an index written by ``Index.save``; see the module docstring for the checks."""
    from . import registry

    header, payload = read_index_file(path)
    backend = header["backend"]
    try:
        factory = registry.factory(backend)
    except UnknownBackendError as exc:
        raise IndexFileError(f"{os.fspath(path)}: {exc}") from None
    if not declares(factory, PersistentIndex):
        raise IndexFileError(
            f"{os.fspath(path)}: backend {backend!r} does not support loading saved indexes"
        )
    restorable: Any = factory  # a PersistentIndex class: restore is its classmethod
    try:
        return restorable.restore(header, payload)  # type: ignore[no-any-return]
    except IndexFileError as exc:
        raise IndexFileError(f"{os.fspath(path)}: {exc}") from None
