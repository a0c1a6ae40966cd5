"""The forward pass of the MiniLM embedder in each runtime: torch, ONNX Runtime, OpenVINO.

A runtime is made once the torch model is loaded (:func:`make_forward`) and
called as ``forward(ids, mask, types, n_threads)``: three int64 ``(n, seq)``
arrays (token ids, attention mask, token type ids) in, the last hidden state
float32 ``(n, seq, 384)`` out. ``n_threads`` is the intra-op thread count of
the call; ONNX Runtime sessions and OpenVINO compiled models fix theirs when
they are made, so one is made per count on first use and kept.

Nothing here imports onnxruntime or openvino at module level.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import onnx_graphs
from ..errors import MissingDependencyError

RUNTIMES = ("torch", "onnx", "onnx-int8", "openvino")
#: The graph's inputs, in the order the export traces them.
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: runtime -> the modules it needs, each with the ragbench extra that installs it
#: (the export to ONNX needs the ``onnx`` package in every non-torch runtime)
_NEEDS = {
    "onnx": (("onnxruntime", "onnx"), ("onnx", "onnx")),
    "onnx-int8": (("onnxruntime", "onnx"), ("onnx", "onnx")),
    "openvino": (("openvino", "openvino"), ("onnx", "openvino")),
}

Forward = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


def require(runtime: str) -> None:
    """:class:`MissingDependencyError` naming the extra if ``runtime``'s package is not installed.

    Looks the package up without importing it, so a config fails before any set-up.
    """
    import importlib.util

    for module, extra in _NEEDS.get(runtime, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules
            found = False
        if not found:
            raise MissingDependencyError(module, extra)


def int8_kernels() -> str:
    """Which int8 dot-product instructions this CPU has: ``"avx512_vnni"``, ``"avx_vnni"`` or ``"none"``.

    Read from ``/proc/cpuinfo`` flags (``"unknown"`` where there is none):
    without VNNI, ONNX Runtime's int8 matmuls use slower AVX2/AVX-512 sequences.
    """
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    for name in ("avx512_vnni", "avx_vnni"):
        if name in flags:
            return name
    return "none"


def make_forward(runtime: str, torch: Any, bert: Any, info: dict[str, Any]) -> Forward:
    """The forward pass of ``bert`` (a transformers ``BertModel``) in ``runtime``.

    ONNX runtimes export (and quantize) the graph, or reuse the cached one;
    ``info`` receives ``onnx_file`` and ``exported`` for records.
    """
    if runtime == "torch":
        return _torch_forward(torch, bert)
    path, exported = _graph(torch, bert, "onnx-int8" if runtime == "onnx-int8" else "onnx")
    info.update(onnx_file=str(path), exported=exported)
    if runtime == "openvino":
        return _OpenVinoForward(path)
    return _OrtForward(path)


def _graph(torch: Any, bert: Any, runtime: str) -> tuple[Path, bool]:
    """The cached ONNX graph of ``bert``'s last hidden state (dynamic batch and sequence)."""

    class LastHidden(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    # a padded batch of two: the attention mask's general path is traced
    ids = torch.tensor([[101, 2054, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).to(torch.int64)
    axes = {n: {0: "batch", 1: "sequence"} for n in (*INPUTS, "last_hidden_state")}
    spec = onnx_graphs.GraphSpec(
        kind="minilm-embedder",
        module=LastHidden().eval(),
        sample=(ids, mask, torch.zeros_like(ids)),
        inputs=INPUTS,
        outputs=("last_hidden_state",),
        dynamic=axes,
        # per-tensor scales cost these vectors a mean cosine of 0.95 to torch's on 200 pydocs
        # passages, per-channel ones 0.99 (docs/how-to/choosing-the-embedder.md)
        per_channel=True,
    )
    key = onnx_graphs.weights_key(torch, bert, spec.kind)
    return onnx_graphs.cached_graph(torch, spec, key, runtime)


def _torch_forward(torch: Any, bert: Any) -> Forward:
    """Eager torch under ``inference_mode``; the thread count is pinned by the caller."""

    def forward(ids: np.ndarray, mask: np.ndarray, types: np.ndarray, n_threads: int) -> np.ndarray:
        with torch.inference_mode():
            out = bert(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types),
            ).last_hidden_state
        return np.asarray(out.numpy(), dtype=np.float32)

    return forward


class _PerThreadCount:
    """One runtime object per intra-op thread count, made on first use under a lock."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        self._make = make
        self._made: dict[int, Any] = {}
        self._lock = threading.Lock()

    def get(self, n_threads: int) -> Any:
        found = self._made.get(n_threads)
        if found is not None:
            return found
        with self._lock:
            if n_threads not in self._made:
                self._made[n_threads] = self._make(n_threads)
            return self._made[n_threads]


class _OrtForward:
    """ONNX Runtime: a CPU session per thread count, no spinning, sequential execution."""

    def __init__(self, path: Path) -> None:
        self._sessions = _PerThreadCount(
            lambda n: onnx_graphs.ort_session(path, n, "embedder 'minilm'", INPUTS)
        )
        self._sessions.get(1)  # the request path's session: made at set-up

    def __call__(
        self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray, n_threads: int
    ) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out: np.ndarray = self._sessions.get(n_threads).run(None, feed)[0]
        return out


class _OpenVinoForward:
    """OpenVINO on the CPU: the ONNX graph read and compiled per thread count with the
    latency hint and fp32 inference (its CPU default can be bf16), one infer request per
    calling thread."""

    def __init__(self, path: Path) -> None:
        try:
            import openvino
        except ImportError:
            raise MissingDependencyError("openvino", "openvino") from None
        core = openvino.Core()
        model = core.read_model(str(path))

        def compile_for(n: int) -> Any:
            config = {
                "INFERENCE_NUM_THREADS": n,
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "f32",
            }
            return core.compile_model(model, "CPU", config)

        self._compiled = _PerThreadCount(compile_for)
        self._requests = threading.local()
        self._compiled.get(1)

    def _request(self, n_threads: int) -> Any:
        mine: dict[int, Any] | None = getattr(self._requests, "by_count", None)
        if mine is None:
            mine = self._requests.by_count = {}
        req = mine.get(n_threads)
        if req is None:
            req = mine[n_threads] = self._compiled.get(n_threads).create_infer_request()
        return req

    def __call__(
        self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray, n_threads: int
    ) -> np.ndarray:
        req = self._request(n_threads)
        req.infer({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        return np.asarray(req.get_output_tensor(0).data, dtype=np.float32)
