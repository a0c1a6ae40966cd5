"""Synthetic vectors shared by the bench files: one draw per (n, dim, n_queries, seed) per session.

``bench/test_bench_vectordb.py``, ``test_bench_pgvector.py`` and
``test_bench_compressed.py`` measure on the same clustered, normalized
vectors; :func:`clustered` is cached, so a session draws each set once and
every file gets the same arrays: no test writes into them (that would
change the next file's data; they are not flagged read-only, which would make
numba compile another specialization of the reranker for them).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4)
def clustered(n: int, dim: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Normalized vectors around 1 000 Gaussian centres; queries from the same mixture.

    ``(vectors float32 (n, dim), queries float32 (n_queries, dim))``; do not write into them.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        out = centres[rng.integers(0, len(centres), m)]
        out += 0.35 * rng.standard_normal((m, dim)).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    return draw(n), draw(n_queries)
