"""Exceptions raised by ragbench.

Every error ragbench raises on purpose is a :class:`RagbenchError`. Where the
caller passed something wrong, the error is also a :class:`ValueError`, so
code that already guards against bad input keeps working::

    RagbenchError
    ├── ConfigError (ValueError)          unknown key, bad parameter value
    │   ├── UnknownBackendError           unknown backend name; lists the known ones
    │   └── UnsupportedConfigError        a configuration asks a backend for what it cannot do
    ├── UnsupportedOperationError (ValueError)  an operation this backend cannot do
    │   └── UnsupportedConfigError        (also a ConfigError, above)
    ├── InputError (ValueError)           bad arrays and arguments
    │   ├── DimensionError                wrong shape or dimension
    │   ├── NonFiniteError                NaN or inf in a vector
    │   ├── IdOutOfRangeError             a candidate id outside the corpus
    │   └── KTooLargeError                k larger than what can be returned
    ├── DecodeError (ValueError)          malformed, truncated or oversized payload
    ├── DatasetError (ValueError)         a dataset file that cannot be read
    ├── RecordError (ValueError)          a results record that does not follow its schema
    ├── IndexFileError (ValueError)       a saved index that cannot be loaded
    ├── NotBuiltError (RuntimeError)      search before build
    ├── TransportError (RuntimeError)     the far side of a transport failed
    │   └── IndexServerError              the database server behind an index failed or went away
    ├── GeneratorError (RuntimeError)     the LLM endpoint failed
    ├── WorkerFault (RuntimeError)        a load worker died or hung
    └── MissingDependencyError (ImportError)  an optional extra is not installed

An :class:`UnsupportedOperationError` is not a configuration error: the call
was well formed, the backend cannot do it (``delete`` on ``faiss-hnsw``).
Where a configuration asks for such an operation before anything runs
(``ragbench stream --index faiss-hnsw --delete-rate 10``), the error is an
:class:`UnsupportedConfigError`, which is both. On the command line every one
of them is one line and exit status 2.

Messages say what was wrong and, where there is one, how to fix it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DatasetError",
    "DecodeError",
    "DimensionError",
    "GeneratorError",
    "IdOutOfRangeError",
    "IndexFileError",
    "IndexServerError",
    "InputError",
    "KTooLargeError",
    "MissingDependencyError",
    "NonFiniteError",
    "NotBuiltError",
    "RagbenchError",
    "RecordError",
    "StartTimeoutError",
    "TransportError",
    "UnknownBackendError",
    "UnsupportedConfigError",
    "UnsupportedOperationError",
    "WorkerFault",
]


class RagbenchError(Exception):
    """Base class of every error ragbench raises on purpose."""


class ConfigError(RagbenchError, ValueError):
    """A configuration key, value or parameter name is wrong."""


class UnknownBackendError(ConfigError):
    """A backend name is not registered; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        super().__init__(f"unknown {kind} backend {name!r}; known: {', '.join(known) or '(none)'}")


class UnsupportedOperationError(RagbenchError, ValueError):
    """The backend cannot do this (e.g. ``delete`` on faiss HNSW); the message names those that can.

    Not a :class:`ConfigError`: the request was well formed, this backend lacks the operation.
    """


class UnsupportedConfigError(UnsupportedOperationError, ConfigError):
    """A configuration asks a backend for an operation it cannot do, refused before any work.

    Both an :class:`UnsupportedOperationError` and a :class:`ConfigError`.
    """


class InputError(RagbenchError, ValueError):
    """An array or argument passed to a component is not acceptable."""


class DimensionError(InputError):
    """An array has the wrong number of dimensions or the wrong width."""


class NonFiniteError(InputError):
    """A vector holds NaN or infinity."""


class IdOutOfRangeError(InputError):
    """An id is outside ``[0, n)`` (``-1`` is padding where allowed)."""


class KTooLargeError(InputError):
    """``k`` is larger than the number of items that can be returned."""


class DecodeError(RagbenchError, ValueError):
    """A payload is malformed, truncated, of the wrong schema or too large."""

    def __init__(self, codec: str, problem: str) -> None:
        self.codec = codec
        self.problem = problem
        super().__init__(f"{codec}: cannot decode payload: {problem}")


class DatasetError(RagbenchError, ValueError):
    """A dataset name or file cannot be loaded."""


class RecordError(RagbenchError, ValueError):
    """A results record that does not follow its schema (readers name the file and line)."""


class IndexFileError(RagbenchError, ValueError):
    """A saved index file is truncated, foreign or does not match."""


class NotBuiltError(RagbenchError, RuntimeError):
    """A component was used before it was built or started."""


class TransportError(RagbenchError, RuntimeError):
    """The far side of a transport failed, died or answered garbage."""


class IndexServerError(TransportError):
    """The database server behind an index (PostgreSQL for ``pgvector``) failed or went away.

    A :class:`TransportError`: a run stops on it like on a dead transport,
    keeping the records written before.
    """


class GeneratorError(RagbenchError, RuntimeError):
    """The LLM endpoint failed or answered something unreadable."""


class WorkerFault(RagbenchError, RuntimeError):
    """A load worker died or hung during a load level; the level's record says which."""


class StartTimeoutError(RagbenchError, TimeoutError):
    """Processes told to start together (``--start-together DIR:N``) did not all arrive in time."""


class MissingDependencyError(RagbenchError, ImportError):
    """An optional dependency is not installed; the message says which extra."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{package} is not installed; install it with: pip install 'ragbench[{extra}]'"
        )
