"""Every exception ragbench raises is a class of ``ragbench.errors``; "cannot" is not "misconfigured".

- an operation a backend lacks (``delete`` on ``faiss-hnsw``) is an
  ``UnsupportedOperationError``, which is not a ``ConfigError``; a configuration
  asking for one before any work is an ``UnsupportedConfigError``, both;
- no module of the package defines a public exception class outside
  ``ragbench.errors`` (read from the source), but for the two internal
  signals listed here, each caught inside the package.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import numpy as np
import pytest

import ragbench as rb
from ragbench import errors
from ragbench.errors import (
    ConfigError,
    RagbenchError,
    UnsupportedConfigError,
    UnsupportedOperationError,
    WorkerFault,
)

PACKAGE = Path(rb.__file__).resolve().parent

#: Exception classes defined outside ragbench.errors on purpose: internal signals that never
#: leave the package, and where each is caught.
INTERNAL_SIGNALS = {
    "NoReply": "generators/keepalive.py, caught in generators/openai.py: retry on a fresh connection",
    "BadRequest": "generators/stub_api.py, caught in generators/stub_server.py: an HTTP 4xx answer",
}
BUILTIN_EXCEPTIONS = {
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def test_unsupported_is_not_a_configuration_error() -> None:
    assert issubclass(UnsupportedOperationError, RagbenchError)
    assert issubclass(UnsupportedOperationError, ValueError)
    assert not issubclass(UnsupportedOperationError, ConfigError)
    assert issubclass(UnsupportedConfigError, UnsupportedOperationError)
    assert issubclass(UnsupportedConfigError, ConfigError)


def test_an_index_that_cannot_delete_raises_unsupported_not_config() -> None:
    rng = np.random.default_rng(0)
    index = rb.indexes.create("faiss-hnsw", dim=8, metric="ip")
    index.build(rng.standard_normal((64, 8)).astype(np.float32))
    with pytest.raises(UnsupportedOperationError, match="cannot delete") as caught:
        index.delete(np.array([0, 1]))
    assert not isinstance(caught.value, ConfigError)


def test_worker_fault_and_record_error_are_in_the_errors_tree() -> None:
    from ragbench.results.schema import RecordError as from_schema
    from ragbench.workers import WorkerFault as from_workers

    assert from_workers is WorkerFault and issubclass(WorkerFault, RagbenchError)
    assert from_schema is errors.RecordError and issubclass(from_schema, RagbenchError)
    assert issubclass(from_schema, ValueError)  # what it was before: still caught as one
    assert {"WorkerFault", "RecordError"} <= set(errors.__all__)


def _exception_classes() -> list[tuple[str, int, str]]:
    """``(module path, line, class name)`` of every class whose base is an exception class."""
    known = BUILTIN_EXCEPTIONS | set(errors.__all__)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_pb" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        local: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if bases & (known | local):
                local.add(node.name)
                found.append((str(path.relative_to(PACKAGE)), node.lineno, node.name))
    return found


def test_every_public_exception_class_is_defined_in_ragbench_errors() -> None:
    outside = [
        f"{path}:{line} {name}"
        for path, line, name in _exception_classes()
        if path != "errors.py" and not name.startswith("_") and name not in INTERNAL_SIGNALS
    ]
    assert outside == [], "define these in ragbench/errors.py (the one tree):\n" + "\n".join(
        outside
    )
    # the scan sees the classes it is meant to see
    names = {name for _, _, name in _exception_classes()}
    assert {"ConfigError", "WorkerFault", "NoReply", "BadRequest"} <= names


def test_stream_refuses_deletes_on_faiss_hnsw_as_unsupported_config(tmp_path: Path) -> None:
    """Through the command line: one line, exit 2; through the API: both error kinds."""
    import subprocess
    import sys

    from ragbench.live_writes import StreamOptions, run_stream

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((200, 8)).astype(np.float32)
    with pytest.raises(UnsupportedConfigError, match="cannot delete") as caught:
        run_stream(vectors, vectors[:5], "ip", StreamOptions(index="faiss-hnsw", delete_rate=10))
    assert isinstance(caught.value, ConfigError)  # what it was, still catchable as one
    args = ["stream", "--index", "faiss-hnsw", "--dataset", "synthetic", "--n", "500"]
    args += ["--dim", "8", "--delete-rate", "10", "--duration", "0.2"]
    res = subprocess.run(
        [sys.executable, "-m", "ragbench", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "cannot delete" in res.stderr, res.stderr
