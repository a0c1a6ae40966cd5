"""Every exception ragbench raises is a class of ``ragbench.errors``; "cannot" is not "misconfigured".

- an operation a backend lacks (``delete`` on ``faiss-hnsw``) is an
  ``UnsupportedOperationError``, which is not a ``ConfigError``; a configuration
  asking for one before any work is an ``UnsupportedConfigError``, both;
- no module of the package defines a public exception class outside
  ``ragbench.errors`` (read from the source), but for the two internal
  signals listed here, each caught inside the package.
"""

from __future__ import annotations

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


def test_worker_fault_is_in_the_errors_tree() -> None:
    from ragbench.workers import WorkerFault as from_workers

    assert from_workers is WorkerFault and issubclass(WorkerFault, RagbenchError)
    assert "WorkerFault" in errors.__all__


def test_stream_refuses_deletes_on_faiss_hnsw_as_unsupported_config(tmp_path: Path) -> None:
    """Through the command line: one line, exit 2; through the API: both error kinds."""
    import subprocess
    import sys

    from ragbench.streaming import StreamOptions, run_stream

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
