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
from ..errors import ConfigError, MissingDependencyError

RUNTIMES = ("torch", "torch-bf16", "onnx", "onnx-int8", "openvino")
#: CPU flags with native bfloat16 matrix instructions; without one torch emulates bf16
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
#: ONNX Runtime sessions made per embedder, at most: one per calling thread (and thread
#: count) up to this; further threads (a web server's pool) share the first ones.
MAX_SESSIONS = 8
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
    """:class:`MissingDependencyError` naming the extra if ``runtime``'s package is not installed;
    :class:`ConfigError` for ``torch-bf16`` on a CPU without bfloat16 instructions.

    Looks the package up without importing it, so a config fails before any set-up.
    """
    import importlib.util

    if runtime == "torch-bf16" and bf16_kernels() in ("none", "unknown"):
        raise ConfigError(
            "embedder 'minilm': runtime 'torch-bf16' needs a CPU with bfloat16 instructions "
            f"({' or '.join(BF16_FLAGS)} in /proc/cpuinfo); this one has none, and torch "
            "would emulate bf16 more slowly than it runs fp32"
        )

    for module, extra in _NEEDS.get(runtime, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules
            found = False
        if not found:
            raise MissingDependencyError(module, extra)


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``None`` where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return flags


def int8_kernels() -> str:
    """Which int8 dot-product instructions this CPU has: ``"avx512_vnni"``, ``"avx_vnni"`` or ``"none"``.

    Read from ``/proc/cpuinfo`` flags (``"unknown"`` where there is none):
    without VNNI, ONNX Runtime's int8 matmuls use slower AVX2/AVX-512 sequences.
    """
    return _first_flag(("avx512_vnni", "avx_vnni"))


def bf16_kernels() -> str:
    """Which bfloat16 matrix instructions this CPU has: ``"amx_bf16"``, ``"avx512_bf16"``,
    ``"none"`` or ``"unknown"`` (no ``/proc/cpuinfo``)."""
    return _first_flag(BF16_FLAGS)


def _first_flag(names: tuple[str, ...]) -> str:
    flags = cpu_flags()
    if flags is None:
        return "unknown"
    return next((name for name in names if name in flags), "none")


def make_forward(runtime: str, torch: Any, bert: Any, info: dict[str, Any]) -> Forward:
    """The forward pass of ``bert`` (a transformers ``BertModel``) in ``runtime``.

    ONNX runtimes export (and quantize) the graph, or reuse the cached one;
    ``info`` receives ``onnx_file`` and ``exported`` for records.
    """
    if runtime == "torch":
        return _torch_forward(torch, bert)
    if runtime == "torch-bf16":  # a copy: the fp32 model stays sentence-transformers' own
        import copy

        return _torch_forward(torch, copy.deepcopy(bert).to(torch.bfloat16))
    path, exported = _graph(torch, bert, "onnx-int8" if runtime == "onnx-int8" else "onnx")
    info.update(onnx_file=str(path), exported=exported)
    if runtime == "openvino":
        return _OpenVinoForward(path)
    return _OrtForward(path)


def _graph(torch: Any, bert: Any, runtime: str) -> tuple[Path, bool]:
    """The cached ONNX graph of ``bert``'s last hidden state (dynamic batch and sequence)."""
    # a padded batch of two: the attention mask's general path is traced
    ids = torch.tensor([[101, 2054, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).to(torch.int64)
    axes = {n: {0: "batch", 1: "sequence"} for n in (*INPUTS, "last_hidden_state")}
    spec = onnx_graphs.GraphSpec(
        kind="minilm-embedder",
        module=bert,
        sample=(ids, mask, torch.zeros_like(ids)),
        inputs=INPUTS,
        outputs=("last_hidden_state",),
        dynamic=axes,
        output="last_hidden_state",
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
        return np.asarray(out.float().numpy(), dtype=np.float32)  # bf16 states widened

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

    def offer(self, n_threads: int, made: Any) -> None:
        """Keep ``made`` for ``n_threads`` unless one is kept already."""
        with self._lock:
            self._made.setdefault(n_threads, made)


class _OrtForward:
    """ONNX Runtime: a CPU session per calling thread and thread count (a load test's worker
    threads each run their own, as its worker processes do), no spinning, sequential."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self._count = 0
        self._lock = threading.Lock()
        self._shared = _PerThreadCount(self._make)
        self._session(1)  # the set-up thread's request-path session: made at set-up

    def _make(self, n_threads: int) -> Any:
        return onnx_graphs.ort_session(self._path, n_threads, "embedder 'minilm'", INPUTS)

    @property
    def sessions(self) -> int:
        """How many sessions were made (one per calling thread and thread count)."""
        return self._count

    def _session(self, n_threads: int) -> Any:
        mine: dict[int, Any] | None = getattr(self._local, "by_count", None)
        if mine is None:
            mine = self._local.by_count = {}
        found = mine.get(n_threads)
        if found is not None:
            return found
        with self._lock:
            shared = self._count >= MAX_SESSIONS
            self._count += 0 if shared else 1
        if shared:  # a server's pool of many threads: share the set-up thread's sessions
            found = self._shared.get(n_threads)
        else:
            found = self._make(n_threads)
            self._shared.offer(n_threads, found)
        mine[n_threads] = found
        return found

    def __call__(
        self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray, n_threads: int
    ) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out: np.ndarray = self._session(n_threads).run(None, feed)[0]
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
