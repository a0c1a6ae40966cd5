"""The cross-encoder's ONNX graphs: exported once, quantized once, cached, loaded in ONNX Runtime.

Used by :class:`ragbench.rerankers.cross_encoder.CrossEncoderReranker` with
``runtime = "onnx"`` or ``"onnx-int8"``. A graph is exported with
``torch.onnx.export`` (TorchScript exporter, dynamic batch and sequence
axes) and cached under ``$RAGBENCH_CACHE_DIR/onnx``, keyed by
:func:`weights_key` (the configuration, every weight's bytes, torch's
version, the opset and :data:`EXPORT_VERSION`); the int8 graph
(``onnxruntime.quantization.quantize_dynamic``, ``QInt8`` weights) is cached
beside it. A cached file that ONNX cannot check is exported again; every
file is written to a temporary name and moved into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..datasets.cache import cache_dir
from ..errors import ConfigError, MissingDependencyError

__all__ = [
    "EXPORT_VERSION",
    "INPUTS",
    "ONNX_OPSET",
    "cached_graph",
    "onnxruntime",
    "ort_session",
    "weights_key",
]

ONNX_OPSET = 17
#: Bumped when the export changes, so old cache entries are not reused.
EXPORT_VERSION = 1
#: The graph's inputs, in the order the export traces them.
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def onnxruntime() -> Any:
    """The ``onnxruntime`` module, or :class:`MissingDependencyError` naming the ``onnx`` extra."""
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError("onnxruntime", "onnx") from None
    return onnxruntime


def weights_key(torch: Any, model: Any) -> str:
    """sha256 of the configuration, every weight's bytes, the runtime and the exporter."""
    digest = hashlib.sha256()
    meta = {
        "config": model.config.to_diff_dict(),
        "torch": torch.__version__,
        "opset": ONNX_OPSET,
        "export": EXPORT_VERSION,
    }
    digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def cached_graph(torch: Any, model: Any, tokenizer: Any, runtime: str) -> tuple[Path, bool]:
    """The cached ``.onnx`` for ``model`` and ``runtime`` (``"onnx"`` or ``"onnx-int8"``).

    Exported (and quantized) when missing or unreadable; returns ``(path,
    exported)``, ``exported`` false when the cached graph was used.
    """
    key = weights_key(torch, model)[:24]
    folder = cache_dir() / "onnx"
    fp32 = folder / f"cross-encoder-{key}.onnx"
    exported = False
    if not _loads(fp32):
        folder.mkdir(parents=True, exist_ok=True)
        _atomic(fp32, lambda tmp: _export(torch, model, tokenizer, tmp))
        exported = True
    if runtime == "onnx":
        return fp32, exported
    int8 = folder / f"cross-encoder-{key}-int8.onnx"
    if exported or not _loads(int8):
        _atomic(int8, lambda tmp: _quantize(fp32, tmp))
        exported = True
    return int8, exported


def ort_session(path: Path, n_threads: int, owner: str) -> Any:
    """An ONNX Runtime CPU session of ``path`` with ``n_threads`` intra-op threads, one inter-op."""
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = n_threads
    options.inter_op_num_threads = 1
    # idle intra-op threads would spin after each call and slow the stages after it
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    if not names <= set(INPUTS):
        raise ConfigError(f"{owner}: {path}: unexpected graph inputs {sorted(names)}")
    return session


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


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
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
    axes = {n: {0: "batch", 1: "sequence"} for n in INPUTS}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(
            model,
            (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
            str(path),
            input_names=list(INPUTS),
            output_names=["logits"],
            dynamic_axes={**axes, "logits": {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def _quantize(source: Path, path: Path) -> None:
    """Dynamic int8 quantization of ``source``'s weights (``QInt8``) into ``path``."""
    onnxruntime()
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
