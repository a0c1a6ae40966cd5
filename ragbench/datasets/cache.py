"""On-disk array cache: ``.npy`` files with a JSON sidecar that is checked on every load.

Each entry is ``<dir>/<key>.npy`` plus ``<dir>/<key>.json`` holding the shape,
dtype, byte size and sha256 of the ``.npy`` file. Both are written to a
temporary file first and moved into place with :func:`os.replace`, the array
before the sidecar, so a crash leaves either the old entry or an entry whose
sidecar does not match (and is rebuilt). A file whose size, hash, shape or
dtype disagrees with its sidecar is never returned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..files import SIDECAR_LIMIT, open_regular
from ..validate import json_loads, load_npy

__all__ = ["CacheEvent", "ArrayCache", "cache_dir"]

log = logging.getLogger("ragbench.cache")

_SIDECAR_VERSION = 1
_READ_BLOCK = 1 << 22


def cache_dir() -> Path:
    """The cache root: ``$RAGBENCH_CACHE_DIR`` or ``~/.cache/ragbench``."""
    env = os.environ.get("RAGBENCH_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ragbench"


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """What one cached computation did.

    ``what`` names the array (``"corpus_vectors[minilm]"``), ``hit`` is true when
    a verified file was read, ``path`` is the ``.npy`` file, ``seconds`` the
    wall time of the load or of the computation and write, and ``note`` says
    why an existing entry was rebuilt (empty otherwise). ``shipped`` is true
    when the array came from a file shipped with the dataset (``path``), not
    from the cache.
    """

    what: str
    hit: bool
    path: str
    seconds: float
    note: str = ""
    shipped: bool = False


class _HashingWriter:
    """File wrapper that hashes every byte written through it."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview) -> int:
        self.sha.update(data)
        self.size += len(data)
        return int(self._fh.write(data))

    def flush(self) -> None:
        self._fh.flush()


class _Untrusted(Exception):
    """An entry that exists but cannot be used (the message is the reason)."""


def _sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open_regular(
        path, limit_bytes=None, what="cache entry", error=_Untrusted, os_errors=True
    ) as fh:
        while block := fh.read(_READ_BLOCK):
            sha.update(block)
    return sha.hexdigest()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ArrayCache:
    """Verified ``.npy`` entries under one directory (created on first write)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root if root is not None else cache_dir()) / "arrays"

    def paths(self, key: str) -> tuple[Path, Path]:
        """The ``.npy`` file and its JSON sidecar for ``key``."""
        return self.root / f"{key}.npy", self.root / f"{key}.json"

    def load(
        self,
        key: str,
        *,
        rows: int | None = None,
        check: Callable[[np.ndarray], str] | None = None,
    ) -> tuple[np.ndarray | None, str]:
        """Return ``(array, "")`` for a verified entry, else ``(None, reason)``.

        ``reason`` is empty when there simply is no entry, and says what was
        wrong when an entry exists but cannot be trusted: a sidecar that
        disagrees with the file, a ``.npy`` header whose shape does not fit
        the file's size (checked before anything is allocated), a FIFO or
        other non-regular file, (``rows`` given) another number of rows
        than the caller's corpus or query set has, or (``check`` given) an
        array for which ``check(array)`` returns a reason (e.g. neighbour ids
        outside the corpus).
        """
        npy, side = self.paths(key)
        if not npy.exists() and not side.exists():
            return None, ""
        try:
            with open_regular(
                side, limit_bytes=SIDECAR_LIMIT, what="sidecar", error=_Untrusted, os_errors=True
            ) as fh:
                meta = json_loads(fh.read(), "sidecar", _Untrusted)
            if not isinstance(meta, dict) or meta.get("version") != _SIDECAR_VERSION:
                return None, "sidecar has an unknown format"
            size = npy.stat().st_size
            if size != meta.get("bytes"):
                return None, f"file is {size} bytes, sidecar says {meta.get('bytes')}"
            if _sha256_file(npy) != meta.get("sha256"):
                return None, "sha256 of the file does not match its sidecar"
            arr = load_npy(npy, "cache entry", _Untrusted)
        except FileNotFoundError as exc:
            return None, f"missing {Path(exc.filename or '').name or 'file'}"
        except _Untrusted as exc:
            return None, str(exc)
        except (OSError, ValueError) as exc:
            return None, f"unreadable ({type(exc).__name__}: {exc})"
        if list(arr.shape) != meta.get("shape") or str(arr.dtype) != meta.get("dtype"):
            return None, (
                f"array is {arr.dtype}{list(arr.shape)}, sidecar says "
                f"{meta.get('dtype')}{meta.get('shape')}"
            )
        if rows is not None and (arr.ndim == 0 or arr.shape[0] != rows):
            return None, f"holds {arr.shape[0] if arr.ndim else 0} rows, expected {rows}"
        problem = check(arr) if check is not None else ""
        if problem:
            return None, problem
        return arr, ""

    def save(self, key: str, arr: np.ndarray, info: dict[str, Any] | None = None) -> Path:
        """Write ``arr`` and its sidecar atomically; return the ``.npy`` path."""
        npy, side = self.paths(key)
        self.root.mkdir(parents=True, exist_ok=True)
        arr = np.ascontiguousarray(arr)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{key}.", suffix=".npy.tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                writer = _HashingWriter(fh)
                # A wrapper is not a real file, so np.save streams through write().
                np.save(writer, arr, allow_pickle=False)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a cache is worth sharing
            os.replace(tmp, npy)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        meta = {
            "version": _SIDECAR_VERSION,
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "bytes": writer.size,
            "sha256": writer.sha.hexdigest(),
            "info": info or {},
        }
        _atomic_write_bytes(side, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
        return npy

    def get_or_compute(
        self,
        key: str,
        what: str,
        compute: Callable[[], np.ndarray],
        events: list[CacheEvent],
        info: dict[str, Any] | None = None,
        *,
        force: bool = False,
        rows: int | None = None,
        check: Callable[[np.ndarray], str] | None = None,
    ) -> np.ndarray:
        """Load ``key`` if it verifies, else ``compute()`` and store it; log a :class:`CacheEvent`.

        ``force=True`` computes (and stores) without reading an existing entry;
        ``rows`` and ``check``: what a stored array must satisfy (see :meth:`load`).
        """
        t0 = time.perf_counter_ns()
        arr, reason = (None, "") if force else self.load(key, rows=rows, check=check)
        npy, _ = self.paths(key)
        if arr is not None:
            events.append(CacheEvent(what, True, str(npy), (time.perf_counter_ns() - t0) / 1e9))
            return arr
        note = "recomputed on request" if force else ""
        if reason:
            note = f"rebuilt: {reason}"
            log.warning(
                "cache entry %s for %s is not trusted (%s); rebuilding it", npy, what, reason
            )
        arr = compute()
        try:
            self.save(key, arr, info)
        except OSError as exc:
            # A read-only or full cache must not stop the benchmark; it only costs time.
            log.warning("could not write cache entry %s: %s", npy, exc)
            note = (note + "; " if note else "") + f"not saved: {exc}"
        events.append(CacheEvent(what, False, str(npy), (time.perf_counter_ns() - t0) / 1e9, note))
        return arr
