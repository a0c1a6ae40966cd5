"""What the compressed backends share: the seeded training sample, code sizes, ``post``/``in-graph``.

Used by :mod:`ragbench.indexes.compressed` (IVF and HNSW over codes) and
:mod:`ragbench.indexes._binary_codes` (sign bits); see the former's
docstring for the behaviour.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, UnsupportedOperationError
from ..validate import positive_int
from ._writes_and_filters import IdSpace

DEFAULT_TRAIN_SIZE = 50_000


def train_sample(vectors: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``size`` rows of ``vectors`` (all when ``size >= n``), drawn by ``default_rng(seed)``.

    Returns a float32 C-contiguous ``(min(size, n), dim)`` array in corpus
    order (sorted row indices), the same for the same inputs everywhere.
    """
    n = vectors.shape[0]
    if size >= n:
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    return np.ascontiguousarray(vectors[rows])


def check_train_params(owner: str, params: dict[str, Any]) -> None:
    params["train_size"] = positive_int(owner, "train_size", params["train_size"])
    params["seed"] = positive_int(owner, "seed", params["seed"], lo=0, hi=2**31 - 1)


class SampledCodes:
    """Shared by the compressed backends: the sample, its facts in ``info()``, the code size.

    Also their filter strategies: ``post`` and ``in-graph`` only. ``pre`` is
    exact over the allowed rows' float32 vectors, which these indexes do not
    keep (only their codes), so it is refused (ConfigError naming the
    strategies offered); ``auto`` takes ``in-graph``.
    """

    name: ClassVar[str]
    build_params: dict[str, Any]
    _index: Any
    _train_rows: int = 0
    filter_strategies: ClassVar[tuple[str, ...]] = ("post", "in-graph")
    default_strategy: ClassVar[str] = "in-graph"

    def _read_vectors(self, space: IdSpace) -> np.ndarray:
        raise UnsupportedOperationError(
            f"index {self.name!r}: the 'pre' filter strategy needs the float32 vectors, "
            "which a compressed index does not keep (only their codes)"
        )

    def _sample(self, vectors: np.ndarray) -> np.ndarray:
        p = self.build_params
        sample = train_sample(vectors, p["train_size"], p["seed"])
        self._train_rows = int(sample.shape[0])
        return sample

    @property
    def faiss_index(self) -> Any:
        """The built faiss object (``None`` before ``build``), for comparisons with faiss's own
        wrappers such as ``IndexRefineFlat``; searching it directly bypasses ragbench's checks."""
        return self._index

    def code_bytes_per_vector(self) -> int:
        """Bytes of one vector's code (faiss ``code_size``): no ids, links or centroids."""
        if self._index is None:
            raise ConfigError(f"index {self.name!r}: call build(data) first")
        return int(self._code_size(self._index))

    def _code_size(self, index: Any) -> int:
        return int(index.code_size)

    def _train_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"train_rows": self._train_rows}
        if "seed" in self.build_params:
            out["train_seed"] = self.build_params["seed"]
        if self._index is not None:
            out["code_bytes_per_vector"] = self.code_bytes_per_vector()
        return out
