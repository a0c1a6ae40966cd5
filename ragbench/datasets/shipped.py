"""Vectors shipped with a bundled dataset, so a fresh clone need not embed its corpus.

A bundled dataset folder may hold, per embedder, ``vectors-<embedder>.json``
(the sidecar) beside one ``.npy`` file per part (``corpus``, ``queries``).
The sidecar records the embedder's fingerprint, the content hashes of the
texts that were embedded, and for each part its file, dtype, shape and the
sha256 of the array's bytes (C order)::

    {"version": 1, "embedder": "minilm:...", "corpus_hash": "...", "queries_hash": "...",
     "parts": {"corpus": {"file": "vectors-minilm-corpus.npy", "dtype": "float16",
                          "shape": [3274, 384], "sha256": "..."}, "queries": {...}}}

The vectors are used only when the fingerprint of the embedder in use and the
content hashes of the dataset's texts equal the sidecar's (otherwise the
dataset embeds as usual); a part whose bytes do not match its checksum is
never used: :meth:`ShippedVectors.load` raises :class:`DatasetError`. float16
parts are widened to float32 and their rows re-normalized to unit length.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..files import SIDECAR_LIMIT, open_regular
from ..metrics import unit_rows
from ..validate import json_loads, load_npy

__all__ = [
    "PARTS",
    "ShippedVectors",
    "array_sha256",
    "find_shipped",
    "sidecar_path",
    "write_shipped",
]

PARTS = ("corpus", "queries")
_VERSION = 1


def sidecar_path(folder: Path, embedder: str) -> Path:
    """Where the sidecar of ``embedder``'s vectors lives in a dataset folder."""
    return folder / f"vectors-{embedder}.json"


def array_sha256(arr: np.ndarray) -> str:
    """sha256 hex of an array's bytes in C order (dtype and shape are checked separately)."""
    return hashlib.sha256(np.ascontiguousarray(arr).data.cast("B")).hexdigest()


@dataclass(frozen=True, slots=True)
class ShippedVectors:
    """One sidecar: who made the vectors, of which texts, and where each part is."""

    sidecar: Path
    embedder: str
    corpus_hash: str
    queries_hash: str
    parts: dict[str, dict[str, Any]]

    def matches(self, fingerprint: str, corpus_hash: str, queries_hash: str) -> bool:
        """True when these vectors are what ``fingerprint`` makes of these very texts."""
        return (self.embedder, self.corpus_hash, self.queries_hash) == (
            fingerprint,
            corpus_hash,
            queries_hash,
        )

    def path(self, which: str) -> Path:
        """The ``.npy`` file of part ``which``."""
        return self.sidecar.parent / str(self.parts[which]["file"])

    def load(self, which: str) -> np.ndarray:
        """Part ``which`` as float32 ``(n, d)`` unit rows, after checking dtype, shape and sha256."""
        meta = self.parts[which]
        path = self.path(which)
        try:
            # header checked against the file size first: a crafted shape allocates nothing
            arr = load_npy(path, "shipped vectors", DatasetError)
        except DatasetError as exc:
            raise DatasetError(f"{exc}; restore the file or run with --re-embed") from None
        except OSError as exc:
            raise DatasetError(
                f"shipped vectors {path}: unreadable ({type(exc).__name__}: {exc}); "
                "restore the file or run with --re-embed"
            ) from None
        if str(arr.dtype) != meta.get("dtype") or list(arr.shape) != meta.get("shape"):
            raise DatasetError(
                f"shipped vectors {path}: array is {arr.dtype}{list(arr.shape)}, "
                f"{self.sidecar.name} says {meta.get('dtype')}{meta.get('shape')}"
            )
        if array_sha256(arr) != meta.get("sha256"):
            raise DatasetError(
                f"shipped vectors {path}: sha256 of the array does not match {self.sidecar.name}; "
                "the file is damaged or was changed: restore it, or run with --re-embed"
            )
        return unit_rows(np.asarray(arr, dtype=np.float32))


class _Unreadable(Exception):
    """A sidecar whose text is not JSON, or nested too deep (the message says which)."""


def find_shipped(folder: Path | None, embedder: str) -> ShippedVectors | None:
    """The sidecar of ``embedder``'s vectors in ``folder``, or None when there is none.

    A sidecar that exists but cannot be read raises :class:`DatasetError`.
    """
    if folder is None:
        return None
    side = sidecar_path(folder, embedder)
    if not side.exists():
        return None
    try:
        with open_regular(
            side,
            limit_bytes=SIDECAR_LIMIT,
            what="shipped vectors sidecar",
            error=DatasetError,
            os_errors=True,
        ) as fh:
            meta = json_loads(fh.read(), "its text", _Unreadable)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        parts = _checked_parts(meta.get("parts"))
        if meta.get("version") != _VERSION:
            raise ValueError(f"version {meta.get('version')!r}, this ragbench reads {_VERSION}")
        return ShippedVectors(
            side, str(meta["embedder"]), str(meta["corpus_hash"]), str(meta["queries_hash"]), parts
        )
    except DatasetError:  # a FIFO or device
        raise
    except _Unreadable as exc:
        raise DatasetError(f"shipped vectors sidecar {side}: unreadable ({exc})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(
            f"shipped vectors sidecar {side}: unreadable ({type(exc).__name__}: {exc})"
        ) from None


def _checked_parts(parts: Any) -> dict[str, dict[str, Any]]:
    """A sidecar's ``parts``, or ValueError saying what it must be (read before any part is used)."""
    want = (
        "parts must be an object with exactly corpus and queries, each an object with file "
        "(a file name in the folder), dtype, shape (a list of ints) and sha256 (strings)"
    )
    if not isinstance(parts, dict) or set(parts) != set(PARTS):
        got = sorted(parts) if isinstance(parts, dict) else type(parts).__name__
        raise ValueError(f"{want}; got {got}")
    for which, meta in parts.items():
        ok = (
            isinstance(meta, dict)
            and isinstance(meta.get("file"), str)
            and meta["file"] not in ("", ".", "..")
            and Path(meta["file"]).name == meta["file"]
            and isinstance(meta.get("dtype"), str)
            and isinstance(meta.get("sha256"), str)
            and isinstance(meta.get("shape"), list)
            and all(isinstance(n, int) and not isinstance(n, bool) for n in meta["shape"])
        )
        if not ok:
            raise ValueError(f"{want}; {which} is {json.dumps(meta)[:80]}")
    return parts


def write_shipped(
    folder: Path,
    embedder: str,
    fingerprint: str,
    hashes: tuple[str, str],
    arrays: dict[str, np.ndarray],
    dtype: str = "float16",
) -> Path:
    """Write ``arrays`` (``corpus`` and ``queries``) as ``dtype`` with their sidecar; return it."""
    parts: dict[str, dict[str, Any]] = {}
    for which in PARTS:
        arr = np.ascontiguousarray(arrays[which], dtype=dtype)
        name = f"vectors-{embedder}-{which}.npy"
        np.save(folder / name, arr, allow_pickle=False)
        parts[which] = {
            "file": name,
            "dtype": str(arr.dtype),
            "shape": list(arr.shape),
            "sha256": array_sha256(arr),
        }
    meta = {
        "version": _VERSION,
        "embedder": fingerprint,
        "corpus_hash": hashes[0],
        "queries_hash": hashes[1],
        "parts": parts,
    }
    side = sidecar_path(folder, embedder)
    side.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return side
