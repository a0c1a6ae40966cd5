"""Vector and text indexes behind one :class:`Index` protocol.

``create(name, dim=..., metric=..., **build_params)`` builds an empty index,
vector and text indexes alike (a text index such as ``minhash-lsh`` accepts
and ignores ``dim``, and records a vector ``metric`` as the one its
candidates are re-scored with); ``build(data)`` adds the corpus (vectors, or
texts when ``input_kind == "texts"``); ``search(queries, k, **query_params)``
returns ``(ids int64 (nq, k), scores float32 (nq, k))`` padded with ``-1``.
Scores are similarities (higher is better) for ``ip``/``cosine`` and
negated squared distances for ``l2``, so every backend sorts the same way.

The contract is :mod:`ragbench.indexes.contract`: the :class:`Index`
Protocol and the capabilities a backend declares (:class:`FilteredIndex`:
``search(queries, k, filter=mask_or_ids, strategy=...)``;
:class:`WritableIndex`: ``add(data, ids=None)`` and, where the library can
remove rows, ``delete(ids)``; :class:`PersistentIndex`; :class:`SplitsSearch`;
:class:`DeclaresBuild`). The built-in backends get them from the base classes
of :mod:`ragbench.indexes.base`. A backend is one registry line below (or an
entry point in the group ``ragbench.indexes``); every list of backends that
can do something is derived from the classes (:func:`deleting_backends`,
:func:`writable_backends`, :func:`filtering_backends`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._registry import BUILTIN_INDEXES, Registry
from .contract import (
    DeclaresBuild,
    FilteredIndex,
    Index,
    PersistentIndex,
    SplitsSearch,
    WritableIndex,
    can_delete,
    declares,
)

if TYPE_CHECKING:
    from os import PathLike

__all__ = [
    "PROBE_DIM",
    "DeclaresBuild",
    "FilteredIndex",
    "Index",
    "PersistentIndex",
    "SplitsSearch",
    "WritableIndex",
    "build_timed",
    "can_delete",
    "create",
    "data_fingerprint",
    "declares",
    "deleting_backends",
    "filtering_backends",
    "load",
    "names",
    "register",
    "registry",
    "with_dsn",
    "writable_backends",
]


#: Every built-in backend: one line each in :data:`ragbench._registry.BUILTIN_INDEXES`.
registry: Registry[Index] = Registry("indexes", BUILTIN_INDEXES)
create = registry.create

#: A vector width for checking an index's parameter names and values before
#: the data (and so its real width) is known: ``create(name, dim=PROBE_DIM, ...)``.
PROBE_DIM = 64
names = registry.names
register = registry.register


def with_dsn(name: str, build: dict[str, Any], dsn: str | None) -> dict[str, Any]:
    """``build`` plus ``dsn`` (``[retrieve] dsn``) for a backend that takes one (``pgvector``).

    Backends without a ``dsn`` build parameter get ``build`` unchanged, so one
    config can compare ``hnsw`` with ``pgvector`` on an existing server; a
    ``dsn`` in ``build`` itself wins.
    """
    if dsn is None or "dsn" in build:
        return build
    defaults = getattr(registry.factory(name), "build_defaults", {})
    return {**build, "dsn": dsn} if "dsn" in defaults else build


def build_timed(index: Index, data: Any) -> tuple[int, int]:
    """``index.build(data)``; returns ``(build_ns, compile_ns)``.

    ``compile_ns`` is what ``build`` spent loading or compiling kernels of
    ragbench's own (the index's ``compile_ns``: hnsw's score conversion,
    once per process), reported apart so build times stay the library's.
    """
    t0 = time.perf_counter_ns()
    index.build(data)
    wall = time.perf_counter_ns() - t0
    compile_ns = min(wall, int(getattr(index, "compile_ns", 0)))
    return wall - compile_ns, compile_ns


def load(path: str | PathLike[str]) -> Index:
    """Load an index written by ``Index.save`` (library format + JSON header)."""
    from .persist import load_index

    return load_index(path)


def data_fingerprint(data: Any) -> str:
    """sha256 hex of an index's corpus (vectors or texts), as ``save(path, data=...)`` records it."""
    from .persist import data_fingerprint as fingerprint

    return fingerprint(data)


def _classes() -> list[tuple[str, Any]]:
    """Every registered backend's factory (built-ins and plugins), skipping those whose
    optional library is not installed (they cannot do anything here)."""
    out = []
    for name in registry.names():
        try:
            out.append((name, registry.factory(name)))
        except ImportError:
            continue
    return out


def deleting_backends() -> list[str]:
    """Names of the registered backends whose class declares ``delete`` (imports them all)."""
    return [name for name, cls in _classes() if can_delete(cls)]


def writable_backends() -> list[str]:
    """Names of the registered backends whose class declares :class:`WritableIndex`."""
    return [name for name, cls in _classes() if declares(cls, WritableIndex)]


def filtering_backends() -> list[str]:
    """Names of the registered backends whose class declares :class:`FilteredIndex`."""
    return [name for name, cls in _classes() if declares(cls, FilteredIndex)]
