"""The index contract: one small :class:`Index` Protocol and the capabilities a backend declares.

Every backend is an :class:`Index`: ``build(data)``, ``search(queries, k,
**query_params)`` returning ``(ids int64 (nq, k), scores float32 (nq, k))``
best first and padded with ``-1`` / ``-inf``, ``memory_bytes()``,
``ntotal``, and the attributes ``name``, ``input_kind``, ``metric``,
``build_params`` and ``query_params``. That is all ``ragbench sweep`` and a
pipeline need.

Anything more is a capability, one Protocol each, which a backend has by
having its members (the built-in ones inherit them from
:mod:`ragbench.indexes.base`):

==========================  ===================================================
:class:`FilteredIndex`      ``search(..., filter=, strategy=)`` with the
                            strategies in ``filter_strategies``; ``id_bound``
:class:`WritableIndex`      ``add(data, ids=None)``; ``delete(ids)`` when
                            ``delete_mode`` is not ``None``; ``id_bound``
:class:`PersistentIndex`    ``save(path, data=, source=)`` and the classmethod
                            ``restore(header, payload)`` that ``load`` calls
:class:`SplitsSearch`       ``last_parts()``: the calling thread's last search
                            in three named, timed parts
                            (:class:`~ragbench.timing.Parts`)
:class:`DeclaresBuild`      ``build_deterministic``: whether one-thread builds
                            of the same data and seeds are the same index;
                            ``build_cacheable``: whether the build cache may
                            keep it
==========================  ===================================================

Code that needs a capability asks ``isinstance(index, FilteredIndex)`` (or
:func:`declares` for a backend's class, before any instance exists), never
``getattr`` with a default: a backend that does not declare a capability
does not have it. In particular a backend that does not declare
:class:`DeclaresBuild` has builds of unknown determinism (records say
``deterministic: null``) that are never cached, and the contract tests
(``tests/indexes/test_index_filters.py``, ``tests/indexes/test_index_writes.py``) skip, with
the capability's name as the reason, what a backend does not declare.
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ..timing import Parts

__all__ = [
    "DeclaresBuild",
    "FilteredIndex",
    "Index",
    "PersistentIndex",
    "SplitsSearch",
    "WritableIndex",
    "can_delete",
    "declares",
]


@runtime_checkable
class Index(Protocol):
    """An index over a corpus of vectors (or texts, when ``input_kind == "texts"``; or both,
    ``"both"``: a :class:`~ragbench.indexes.hybrid_index.Pair` of vectors and texts, ``hybrid``).

    ``search`` returns ``(ids int64 (nq, k), scores float32 (nq, k))``, best
    first, ``-1`` / ``-inf`` padded; scores are similarities (higher is
    better): inner product for ``ip``/``cosine``, negated squared distance for
    ``l2``. ``query_params`` names what ``search`` takes as ``**params``.
    """

    name: str
    input_kind: Literal["vectors", "texts", "both"]
    metric: str
    build_params: dict[str, Any]
    query_params: frozenset[str]

    def build(self, data: Any) -> None: ...
    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]: ...
    def memory_bytes(self) -> int: ...
    @property
    def ntotal(self) -> int: ...


@runtime_checkable
class FilteredIndex(Protocol):
    """An index that searches with an allow-list: ``search(q, k, filter=..., strategy=...)``.

    ``filter``: a bool mask ``(id_bound,)`` or int ids for the whole batch, a
    bool ``(nq, id_bound)`` mask or a list of ``nq`` of them per query;
    ``strategy``: ``"auto"`` or one of ``filter_strategies`` (``pre``,
    ``post``, ``in-graph``). Never returns an id the filter does not allow.
    """

    filter_strategies: tuple[str, ...]

    # ``id_bound`` (the length of a mask: one more than the largest id ever held) is
    # part of the contract but no member here: isinstance() on Python < 3.12 reads
    # every member, and ``id_bound`` raises NotBuiltError before ``build``.


@runtime_checkable
class WritableIndex(Protocol):
    """An index that takes rows after ``build``: ``add(data, ids=None) -> ids int64 (m,)``.

    ``delete_mode`` ``None``: no ``delete`` (it raises
    :class:`~ragbench.errors.UnsupportedOperationError`); ``"mark"`` or
    ``"compact"``: ``delete(ids)`` removes live ids, which no later search
    returns. Ids of the index: ``0 .. id_bound - 1`` (``id_bound`` as for
    :class:`FilteredIndex`).
    """

    delete_mode: str | None

    def add(self, data: Any, ids: Any = None) -> np.ndarray: ...
    def delete(self, ids: Any) -> None: ...


@runtime_checkable
class PersistentIndex(Protocol):
    """An index written to one file by ``save`` and read back by ``ragbench.indexes.load``.

    ``restore(header, payload)`` is a classmethod: the verified JSON header
    (``ragbench.indexes.persist``) and the payload bytes in, the index out,
    or :class:`~ragbench.errors.IndexFileError`.
    """

    def save(
        self, path: str | PathLike[str], *, data: Any = None, source: str | None = None
    ) -> None: ...
    def restore(self, header: dict[str, Any], payload: memoryview) -> Any: ...


@runtime_checkable
class SplitsSearch(Protocol):
    """An index that splits its search: this thread's last search as three timed parts.

    A :class:`~ragbench.timing.Parts` (names and nanoseconds, in the order
    they ran: before, inside and after the engine): ``send`` / ``server`` /
    ``decode`` for a database query (pgvector, pg-fts), ``prepare`` /
    ``query`` / ``decode`` (LanceDB), ``tokenize`` / ``score`` / ``decode``
    (a lexical engine), ``dense`` / ``lexical`` / ``fuse`` (hybrid);
    ``None`` before the first search of the thread.
    """

    def last_parts(self) -> Parts | None: ...


@runtime_checkable
class DeclaresBuild(Protocol):
    """An index that says what its builds promise (see :mod:`ragbench.indexes.builds`)."""

    @property
    def build_deterministic(self) -> bool: ...
    @property
    def build_cacheable(self) -> bool: ...


def declares(backend: object, capability: type) -> bool:
    """Whether ``backend`` (an index, or a backend class before any instance) has ``capability``.

    For a class, the members the capability names must be defined on the
    class (methods, properties, class attributes): what every instance of
    it will have.
    """
    return isinstance(backend, capability)


def can_delete(backend: object) -> bool:
    """Whether ``backend`` (an index or its class) declares :class:`WritableIndex` with a delete."""
    return declares(backend, WritableIndex) and _delete_mode(backend) is not None


def _delete_mode(backend: object) -> object:
    writable: Any = backend  # a WritableIndex instance or class: delete_mode is a class attribute
    return writable.delete_mode
