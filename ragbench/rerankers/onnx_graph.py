"""The cross-encoder's ONNX graphs, through the shared mechanism of :mod:`ragbench.onnx_graphs`.

Used by :class:`ragbench.rerankers.cross_encoder.CrossEncoderReranker` with
``runtime = "onnx"`` or ``"onnx-int8"``: the sequence-classification model is
exported once (dynamic batch and sequence axes, traced on a padded two-pair
batch so the attention mask's path is the general one), quantized once,
cached under ``$RAGBENCH_CACHE_DIR/onnx`` as ``cross-encoder-<key>.onnx`` and
checked by content hash before every load (see :mod:`ragbench.onnx_graphs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import onnx_graphs
from ..onnx_graphs import EXPORT_VERSION, ONNX_OPSET, GraphSpec, onnxruntime, weights_key

__all__ = [
    "EXPORT_VERSION",
    "INPUTS",
    "ONNX_OPSET",
    "cached_graph",
    "onnxruntime",
    "ort_session",
    "weights_key",
]

#: The graph's inputs, in the order the export traces them.
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def cached_graph(torch: Any, model: Any, tokenizer: Any, runtime: str) -> tuple[Path, bool]:
    """The cached ``.onnx`` for ``model`` and ``runtime`` (``"onnx"`` or ``"onnx-int8"``).

    Exported (and quantized) when missing or not verified by its hash; returns
    ``(path, exported)``, ``exported`` false when the cached graph was used.
    """
    enc = tokenizer(
        ["a query", "q"], ["a longer passage here", "p"], padding=True, return_tensors="pt"
    )
    axes = {n: {0: "batch", 1: "sequence"} for n in INPUTS}
    spec = GraphSpec(
        kind="cross-encoder",
        module=model,
        sample=tuple(enc[n] for n in INPUTS),
        inputs=INPUTS,
        outputs=("logits",),
        dynamic={**axes, "logits": {0: "batch"}},
    )
    return onnx_graphs.cached_graph(torch, spec, weights_key(torch, model), runtime)


def ort_session(path: Path, n_threads: int, owner: str) -> Any:
    """An ONNX Runtime CPU session of ``path`` (see :func:`ragbench.onnx_graphs.ort_session`)."""
    return onnx_graphs.ort_session(path, n_threads, owner, INPUTS)
