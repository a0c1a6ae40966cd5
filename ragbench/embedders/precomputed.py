"""Vectors that ship with a dataset, looked up by the exact text they belong to.

Datasets such as ann-benchmarks files or ``synthetic`` come with their query
vectors; the pipeline wraps them in a :class:`PrecomputedEmbedder` built from
``ds.queries.texts`` and ``ds.query_vectors_precomputed`` so the embed stage
has the same shape as with a model. Vectors are returned as shipped: they are
L2-normalized only if the dataset's are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..errors import DimensionError, InputError
from ..validate import as_matrix

__all__ = ["PrecomputedEmbedder"]


class PrecomputedEmbedder:
    """Look up ``vectors[i]`` for ``texts[i]``.

    ``texts`` and ``vectors`` (float32 ``(n, d)``, finite) must have the same
    length. When a text occurs twice the first row wins. ``embed`` of a text
    that was not given raises :class:`~ragbench.errors.InputError`.
    """

    name = "precomputed"

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        if isinstance(texts, str):
            raise InputError("texts must be a sequence of strings, not one string")
        matrix = as_matrix(vectors, name="precomputed vectors")
        if np.ndim(vectors) != 2:
            raise DimensionError(
                f"precomputed vectors: expected shape (n, d), got {np.shape(vectors)}"
            )
        if len(texts) != matrix.shape[0]:
            raise InputError(
                f"precomputed: {len(texts)} texts but {matrix.shape[0]} vectors; they must pair up"
            )
        rows: dict[str, int] = {}
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(
                    f"precomputed: texts[{i}] must be a string, got {type(text).__name__}"
                )
            rows.setdefault(text, i)
        self._rows = rows
        self.vectors = matrix
        self.dim = int(matrix.shape[1])
        self._fingerprint: str | None = None

    def __repr__(self) -> str:
        return f"PrecomputedEmbedder(n={self.vectors.shape[0]}, dim={self.dim})"

    @property
    def fingerprint(self) -> str:
        """``precomputed:`` + sha256 of the texts and vectors (computed once)."""
        if self._fingerprint is None:
            sha = hashlib.sha256()
            for text, row in self._rows.items():
                data = text.encode("utf-8", "surrogatepass")
                sha.update(len(data).to_bytes(8, "little") + data + row.to_bytes(8, "little"))
            sha.update(self.vectors.data.cast("B"))
            self._fingerprint = f"precomputed:{sha.hexdigest()}"
        return self._fingerprint

    def load(self) -> int:
        """Nothing to load; returns 0 ns."""
        return 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The shipped vectors of ``texts``: float32 ``(len(texts), dim)``, a new array."""
        if isinstance(texts, str):
            raise InputError("embed() takes a sequence of texts, not one string; wrap it in a list")
        try:
            rows = [self._rows[text] for text in texts]
        except (KeyError, TypeError):
            bad = next(t for t in texts if not isinstance(t, str) or t not in self._rows)
            shown = repr(bad) if len(repr(bad)) <= 80 else repr(bad)[:77] + "..."
            raise InputError(
                f"precomputed: no vector for text {shown}; this embedder only knows the "
                f"{len(self._rows)} texts it was built from"
            ) from None
        if not rows:
            return np.zeros((0, self.dim), np.float32)
        return self.vectors[rows]
