"""A model-free embedder: signed feature hashing of word n-grams.

Each lower-cased word n-gram (unigrams and bigrams by default) is hashed with
keyed BLAKE2b (stable across processes and machines, unlike ``hash()``); the
hash picks a coordinate and a sign, counts are summed and the vector is
L2-normalized. Texts sharing words get similar vectors, which is all a
benchmark of the retrieval path needs when the real model is not wanted.

A text with no word characters would hash to the zero vector, which has no
direction for cosine or inner-product search; it gets a fixed unit vector
instead (the hash of a reserved empty-text feature), the same for every empty
text and every process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._registry import check_params
from ..errors import ConfigError, InputError
from ..validate import positive_int

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+")
_EMPTY_FEATURE = "\x00<empty>"
_MEMO_LIMIT = 1 << 20  # features remembered; cleared when full so memory stays bounded


class HashingEmbedder:
    """Signed feature hashing of word n-grams into ``dim`` coordinates.

    ``embed(texts)`` returns float32 ``(len(texts), dim)``, each row of unit
    norm. ``ngram=(1, 2)`` uses unigrams and bigrams; ``seed`` keys the hash so
    different seeds give independent projections.
    """

    name = "hashing"

    def __init__(
        self,
        dim: int = 384,
        ngram: tuple[int, int] | Sequence[int] = (1, 2),
        seed: int = 0,
        lowercase: bool = True,
        **unknown: Any,
    ) -> None:
        owner = "embedder 'hashing'"
        check_params(owner, unknown, {"dim", "ngram", "seed", "lowercase"})
        dim = positive_int(owner, "dim", dim, lo=2, hi=1 << 20)
        try:
            lo, hi = (int(v) for v in ngram)
        except (TypeError, ValueError):
            raise ConfigError(f"hashing: ngram must be a pair (min, max), got {ngram!r}") from None
        if not 1 <= lo <= hi <= 5:
            raise ConfigError(f"hashing: ngram must satisfy 1 <= min <= max <= 5, got {ngram!r}")
        seed = positive_int(owner, "seed", seed, lo=0, hi=(1 << 63) - 1)
        self.dim = dim
        self.ngram = (lo, hi)
        self.seed = seed
        self.lowercase = bool(lowercase)
        self.fingerprint = (
            f"hashing:v1:blake2b:dim={dim}:ngram={lo}-{hi}:seed={seed}:lower={int(self.lowercase)}"
        )
        self._key = seed.to_bytes(8, "little")
        self._memo: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, ngram={self.ngram}, seed={self.seed})"

    def load(self) -> int:
        """Nothing to load; returns 0 ns."""
        return 0

    def _feature(self, feature: str) -> int:
        """Signed coordinate: ``index + 1`` for +1, ``-(index + 1)`` for -1."""
        code = self._memo.get(feature)
        if code is None:
            digest = hashlib.blake2b(
                feature.encode("utf-8", "surrogatepass"), digest_size=8, key=self._key
            ).digest()
            value = int.from_bytes(digest, "little")
            code = (value >> 1) % self.dim + 1
            if value & 1:
                code = -code
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[feature] = code
        return code

    def _codes(self, text: str) -> list[int]:
        words = _WORD.findall(text.lower() if self.lowercase else text)
        lo, hi = self.ngram
        codes: list[int] = []
        for n in range(lo, hi + 1):
            if n == 1:
                codes.extend(self._feature(w) for w in words)
            else:
                codes.extend(
                    self._feature(" ".join(words[i : i + n])) for i in range(len(words) - n + 1)
                )
        return codes or [self._feature(_EMPTY_FEATURE)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 ``(len(texts), dim)``, L2-normalized rows."""
        if isinstance(texts, str):
            raise InputError("embed() takes a sequence of texts, not one string; wrap it in a list")
        rows: list[int] = []
        cols: list[int] = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"texts[{i}] must be a string, got {type(text).__name__}")
            codes = self._codes(text)
            rows.extend([i] * len(codes))
            cols.extend(codes)
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), np.float32)
        code = np.asarray(cols, dtype=np.int64)
        flat = np.asarray(rows, dtype=np.int64) * self.dim + (np.abs(code) - 1)
        out = np.bincount(flat, weights=np.sign(code).astype(np.float64), minlength=n * self.dim)
        vectors = out.reshape(n, self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        zero = norms[:, 0] == 0.0
        if zero.any():
            # Features that cancel exactly (+1 and -1 on one coordinate) leave
            # nothing; fall back to the empty-text vector, as for empty text.
            fallback = np.zeros(self.dim)
            c = self._feature(_EMPTY_FEATURE)
            fallback[abs(c) - 1] = 1.0 if c > 0 else -1.0
            vectors[zero] = fallback
            norms[zero] = 1.0
        return np.ascontiguousarray(vectors / norms, dtype=np.float32)
