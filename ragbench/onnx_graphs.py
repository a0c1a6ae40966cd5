"""ONNX graphs of in-process torch models: exported once, quantized once, cached, checked by hash.

One mechanism for every model ragbench runs in ONNX Runtime or OpenVINO:
the cross-encoder reranker (:mod:`ragbench.rerankers.onnx_graph`) and the
MiniLM query embedder (:mod:`ragbench.embedders.minilm`). A graph is
exported with ``torch.onnx.export`` (TorchScript exporter, dynamic batch and
sequence axes) and cached under ``$RAGBENCH_CACHE_DIR/onnx`` as
``<kind>-<key>.onnx``, keyed by :func:`weights_key` (the configuration,
every weight's bytes, torch's version, the opset and :data:`EXPORT_VERSION`);
the int8 graph (``onnxruntime.quantization.quantize_dynamic``, ``QInt8``
weights) is cached beside it as ``<kind>-<key>-int8.onnx``.

Each file's sha256 and full key are written, after the file is complete, to
``$RAGBENCH_CACHE_DIR/onnx-hashes/<file name>.json``. A cached file is used
only when that record exists, names the same key and the file's bytes hash
to it: a truncated, corrupted or foreign file (another model's graph copied
over the name) is exported again, never loaded. Every file is written to a
temporary name carrying the writer's pid and moved into place; temporaries
whose writer is gone (killed, or ended by the CLI's Ctrl-C grace) are removed
before the next export.

The export and the int8 quantization each run in a child process
(``python -m ragbench.onnx_graphs``) working in a private folder: torch's
exporter holds the GIL for up to 2 s at a time while it writes the graph, and
ONNX Runtime's quantizer for most of a second, so in this process Ctrl-C could
not be answered; the quantizer also writes ``<input>-inferred.onnx`` beside its
input (left behind when interrupted, and shared by two processes quantizing one
graph). The child ignores SIGINT, is killed when this process is interrupted or
fails, and dies with it (``PR_SET_PDEATHSIG``); its folder is removed either
way. The model reaches the exporting child as its configuration (JSON) and its
weights (safetensors), never as a pickle; the child rebuilds the transformers
class and loads the weights strictly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .datasets.cache import cache_dir
from .errors import ConfigError, MissingDependencyError, RagbenchError
from .process import child_env

__all__ = [
    "EXPORT_VERSION",
    "ONNX_OPSET",
    "GraphSpec",
    "cached_graph",
    "file_sha256",
    "onnxruntime",
    "ort_session",
    "remove_stale",
    "verified",
    "weights_key",
]

ONNX_OPSET = 17
#: Bumped when the export changes, so old cache entries are not reused
#: (2: exported in a child, a returned output field wrapped by :func:`_returning`).
EXPORT_VERSION = 2
_CHUNK = 1 << 20


def onnxruntime() -> Any:
    """The ``onnxruntime`` module, or :class:`MissingDependencyError` naming the ``onnx`` extra."""
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError("onnxruntime", "onnx") from None
    return onnxruntime


@dataclass(frozen=True)
class GraphSpec:
    """How to export one kind of model.

    ``kind`` names the cache files; ``module`` is the transformers model to
    trace (a ``PreTrainedModel``: the exporting child rebuilds it from its
    class, configuration and weights); ``sample`` the example inputs (tensors,
    in ``inputs`` order, passed by name); ``inputs``/``outputs`` the graph's
    names; ``dynamic`` each name's dynamic axes (``{name: {axis: label}}``);
    ``output`` the field of the model's output the graph returns (``None``:
    the output as the model returns it); ``per_channel`` the int8
    quantization's weight scales (one per output channel, not one per tensor).
    """

    kind: str
    module: Any
    sample: tuple[Any, ...]
    inputs: Sequence[str]
    outputs: Sequence[str]
    dynamic: dict[str, dict[int, str]]
    #: the output field the graph returns (``"last_hidden_state"``), or the whole output
    output: str | None = None
    #: int8 weights scaled per output channel rather than per tensor
    per_channel: bool = False


def weights_key(torch: Any, model: Any, kind: str = "") -> str:
    """sha256 hex of the configuration, every weight's bytes, the runtime and the exporter.

    ``kind`` is hashed too when given (two exports of one model differ by it).
    """
    digest = hashlib.sha256()
    meta = {
        "config": model.config.to_diff_dict(),
        "torch": torch.__version__,
        "opset": ONNX_OPSET,
        "export": EXPORT_VERSION,
    }
    if kind:
        meta["kind"] = kind
    digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def cached_graph(torch: Any, spec: GraphSpec, key: str, runtime: str) -> tuple[Path, bool]:
    """The cached ``.onnx`` of ``spec`` for ``runtime`` (``"onnx"`` fp32 or ``"onnx-int8"``).

    ``key`` is the model's :func:`weights_key`. Exported (and quantized) when
    missing or not the file its hash record names; returns ``(path,
    exported)``, ``exported`` false when the cached graph was used.
    """
    folder = cache_dir() / "onnx"
    fp32 = folder / f"{spec.kind}-{key[:24]}.onnx"
    exported = False
    if not verified(fp32, key):
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale(folder)
        _write(fp32, key, lambda tmp: _export(torch, spec, tmp))
        exported = True
    if runtime == "onnx":
        return fp32, exported
    int8 = folder / f"{spec.kind}-{key[:24]}-int8.onnx"
    int8_key = f"{key}:int8" + (":per-channel" if spec.per_channel else "")
    if exported or not verified(int8, int8_key):
        remove_stale(folder)
        _write(int8, int8_key, lambda tmp: _quantize(fp32, tmp, spec.per_channel))
        exported = True
    return int8, exported


def file_sha256(path: Path) -> str:
    """sha256 hex of the file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _record_path(path: Path) -> Path:
    return path.parent.parent / "onnx-hashes" / f"{path.name}.json"


def verified(path: Path, key: str) -> bool:
    """Whether ``path`` is the graph exported for ``key``: its hash record names ``key`` and
    the file's sha256 (a missing, truncated, changed or foreign file is not)."""
    if not path.is_file():
        return False
    try:
        record = json.loads(_record_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("key") != key:
        return False
    return record.get("sha256") == file_sha256(path)


def _write(path: Path, key: str, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` beside ``path``, moved into place, then its hash record written."""
    record = _record_path(path)
    record.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()  # no record names a file while it is replaced
    _atomic(path, write, ".tmp.onnx")
    text = json.dumps({"key": key, "sha256": file_sha256(path), "file": path.name})
    _atomic(record, lambda tmp: _write_text(tmp, text), ".tmp.json")


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def ort_session(path: Path, n_threads: int, owner: str, inputs: Sequence[str]) -> Any:
    """An ONNX Runtime CPU session of ``path``: ``n_threads`` intra-op threads, sequential.

    Intra- and inter-op threads do not spin when idle (they would take the
    core the next stage needs); a graph asking for inputs outside ``inputs``
    is a :class:`ConfigError`.
    """
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = n_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    if not names <= set(inputs):
        raise ConfigError(f"{owner}: {path}: unexpected graph inputs {sorted(names)}")
    return session


#: A temporary's name: ``<stem>.pid<writer's pid>.<random><suffix>``, suffix ``.tmp.*``.
_TEMP = re.compile(r"\.pid(\d+)\.[^/]*\.tmp\.[a-z]+$")


def _temp_prefix(stem: str) -> str:
    return f"{stem}.pid{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale(folder: Path) -> list[str]:
    """Remove the temporaries in ``folder`` and its hash records' folder whose writer is gone.

    A process killed (or ended by the CLI's Ctrl-C grace) while exporting
    leaves its ``*.pid<N>.*.tmp.*`` file or quantization folder, up to the
    graph's size; one whose writer still runs (another process exporting now)
    is kept. Returns the names removed.
    """
    removed = []
    for where in (folder, folder.parent / "onnx-hashes"):
        with contextlib.suppress(OSError):
            for entry in os.scandir(where):
                m = _TEMP.search(entry.name)
                if m is None or _alive(int(m.group(1))):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def _atomic(path: Path, write: Callable[[Path], None], suffix: str) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then move it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path.stem), suffix=suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _export(torch: Any, spec: GraphSpec, path: Path) -> None:
    """``torch.onnx.export`` (TorchScript exporter) of ``spec`` into ``path``, in a child.

    The child gets the model's class and configuration (JSON), its weights and
    the sample inputs (safetensors) in its private folder (see :func:`_in_child`).
    """
    from safetensors.torch import save_file, save_model  # installed with transformers

    model = spec.module
    cls = type(model)
    if not cls.__module__.startswith("transformers.") or not hasattr(model, "config"):
        raise TypeError(f"GraphSpec.module: a transformers model, not {cls.__qualname__}")

    def inputs(work: Path) -> list[str]:
        save_model(model, str(work / "model.safetensors"))
        sample = {str(i): t.detach().contiguous() for i, t in enumerate(spec.sample)}
        save_file(sample, str(work / "sample.safetensors"))
        described = {
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "config": model.config.to_dict(),
            "attention": getattr(model.config, "_attn_implementation", None),
            "output": spec.output,
            "inputs": list(spec.inputs),
            "outputs": list(spec.outputs),
            "dynamic": {
                n: {str(a): label for a, label in d.items()} for n, d in spec.dynamic.items()
            },
            "threads": int(torch.get_num_threads()),
        }
        _write_text(work / "spec.json", json.dumps(described, default=str))
        return [str(work)]

    _in_child("export", f"the {spec.kind} graph", path, inputs)


def _quantize(source: Path, path: Path, per_channel: bool) -> None:
    """Dynamic int8 quantization of ``source``'s weights (``QInt8``) into ``path``, in a child.

    The child's input is a hard link of ``source`` in its private folder, so
    the quantizer's ``-inferred.onnx`` lands there (see :func:`_in_child`).
    """
    onnxruntime()  # a missing package is named here, not in the child

    def inputs(work: Path) -> list[str]:
        src = work / "fp32.onnx"
        try:
            os.link(source, src)
        except OSError:  # a file system without hard links
            shutil.copyfile(source, src)
        return [str(src), "1" if per_channel else "0"]

    _in_child("quantize", source.name, path, inputs)


#: What each child verb does, for messages.
_VERBS = {"export": "export", "quantize": "int8 quantization"}


def _in_child(verb: str, what: str, path: Path, inputs: Callable[[Path], list[str]]) -> None:
    """Run ``verb`` of ``what`` in a child process writing ``path``: its graph is moved into place.

    A private folder beside ``path`` (named after this process, so a dead
    writer's is removed by :func:`remove_stale`) gets the child's inputs
    (``inputs(folder)`` returns its arguments) and its output; the folder is
    removed either way. The child ignores SIGINT and is killed when this
    process is interrupted, fails or dies (``PR_SET_PDEATHSIG``).
    """
    work = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temp_prefix(verb), suffix=".tmp.d"))
    try:
        out = work / "out.onnx"
        args = inputs(work)
        _run_child(verb, what, [str(os.getpid()), str(out), *args])
        os.replace(out, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_child(verb: str, what: str, args: list[str]) -> None:
    """``python -m ragbench.onnx_graphs VERB ARGS``; killed if waiting for it is interrupted."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragbench.onnx_graphs", verb, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),  # this ragbench first, wherever it came from
    )
    try:
        _, err = proc.communicate()
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or anything else: the child goes too
        proc.kill()
        proc.wait()
        raise
    if proc.returncode == 0:
        return
    if proc.returncode < 0:
        why = f"its process {proc.pid} was killed by signal {-proc.returncode}"
    else:
        lines = err.decode("utf-8", "replace").strip().splitlines() or ["(no message)"]
        why = f"exit {proc.returncode}: {lines[-1]}"
    raise RagbenchError(f"ONNX {_VERBS[verb]} of {what} failed ({why}); nothing was cached")


def _export_here(work: Path, dest: Path) -> None:
    """The exporting child's work: the model rebuilt from ``work``'s files, exported to ``dest``."""
    import importlib

    import torch
    from safetensors.torch import load_file, load_model

    spec = json.loads((work / "spec.json").read_text(encoding="utf-8"))
    module_name, _, name = spec["class"].partition(":")
    if not module_name.startswith("transformers."):  # only a transformers class is rebuilt
        raise SystemExit(f"not a transformers model: {spec['class']}")
    cls = getattr(importlib.import_module(module_name), name)
    config = cls.config_class.from_dict(spec["config"])
    if spec["attention"]:
        config._attn_implementation = spec["attention"]
    torch.set_num_threads(max(1, int(spec["threads"])))
    model = cls(config)
    load_model(model, str(work / "model.safetensors"), strict=True)
    model.eval()
    sample = load_file(str(work / "sample.safetensors"))
    inputs = list(spec["inputs"])
    dynamic = {n: {int(a): label for a, label in d.items()} for n, d in spec["dynamic"].items()}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(
            _returning(torch, model, inputs, spec["output"]),
            tuple(sample[str(i)] for i in range(len(sample))),
            str(dest),
            input_names=inputs,
            output_names=list(spec["outputs"]),
            dynamic_axes=dynamic,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def _returning(torch: Any, model: Any, inputs: list[str], field: str | None) -> Any:
    """``model`` called with its inputs by name, returning its output's ``field`` (or all of it)."""

    class Traced(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            out = self.model(**dict(zip(inputs, tensors, strict=True)))
            return out if field is None else getattr(out, field)

    return Traced().eval()


def _quantize_here(source: Path, path: Path, per_channel: bool) -> None:
    """The child's work: ``quantize_dynamic`` with ``QInt8`` weights, its log hint silenced."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # quantize_dynamic logs a hint through the root logger (basicConfig would print it)
    logging.getLogger().addHandler(logging.NullHandler())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            str(source), str(path), weight_type=QuantType.QInt8, per_channel=per_channel
        )


def _child_main(argv: list[str]) -> None:
    """Entry of the child: ``export PARENT_PID DEST FOLDER`` or
    ``quantize PARENT_PID DEST SOURCE PER_CHANNEL(0|1)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it kills this child
    verb, parent, dest, *rest = argv
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG
        if os.getppid() != int(parent):  # the parent died before the call above
            os._exit(1)
    if verb == "export":
        _export_here(Path(rest[0]), Path(dest))
    else:
        _quantize_here(Path(rest[0]), Path(dest), rest[1] == "1")


if __name__ == "__main__":
    _child_main(sys.argv[1:])
