"""The measured fast paths of the index backends, fenced off from their reference searches.

Every dense backend's answers are defined by its plainly written reference
search (:meth:`ragbench.indexes.base.LiveVectorIndex.search` over the
backend's hooks, or :meth:`ragbench.indexes._embedded_engines.EngineIndex.search`).
A fast path here answers the most common call -- one float32 ``(1, dim)``
query, no filter, the index's ``ip`` or ``l2`` metric -- with as few steps
as the library allows, and returns ``None`` whenever it cannot vouch for its
answer; the backend then runs its reference search, which answers, pads and
raises for that call. One helper per library family:

=========================  ================  ============================================
helper                     serves            backends
=========================  ================  ============================================
:func:`faiss_one_query`    index-wrapper     ``flat``, ``faiss-hnsw``, ``ivf``
:func:`hnswlib_one_query`  index-wrapper     ``hnsw``
:func:`usearch_one_query`  engine-wrapper    ``usearch`` (``f32``, ``f16``)
:func:`qdrant_one_query`   engine-wrapper    ``qdrant-edge``
=========================  ================  ============================================

(the targets: ``docs/reference/performance-targets.md``, ``#index-wrapper``
and ``#engine-wrapper``: a single query at most 1.03× / 1.05× the library's
own call). ``tests/indexes/test_fast_paths.py`` checks with Hypothesis that
each returns exactly what its reference returns -- or ``None`` -- for
random data and queries, NaN/inf components, answers with pads, strided
rows, and threads writing while others search.

Why a fast path may skip the reference's query check: a NaN or inf anywhere
in an ``ip``/``l2`` query makes every distance to it NaN or infinite; the
libraries' heaps and walks then leave a pad, a NaN or an infinite score in
the answer's best or last place (faiss's flat storage: a pad or infinity
last; hnswlib, usearch and Qdrant: a non-finite best score). Each helper
checks that place; an answer that fails the check goes to the reference,
which checks the query element by element and raises. A full, finite answer
thus proves the query finite. ``cosine`` queries need their zero-norm check
and quantized storage turns a NaN into finite codes: neither has a fast path.

Every helper enters the index's write gate itself (a search that a writer's
``add``/``delete`` must wait for) and reads the backend's fast-path state,
one tuple the backend publishes in ``_on_space`` for each id snapshot, inside
it: a write replaces the tuple while no search runs (faiss) or before the
library sees the new rows (hnswlib), so the state always covers the answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import F32, FLT_MAX, I64, INF

_ndarray = np.ndarray
_empty = np.empty
_negative = np.negative
_subtract = np.subtract
_fromiter = np.fromiter
_ONE = np.float32(1.0)

#: Returned by :func:`cached_query_params` when the call's parameters must be parsed.
NOT_CACHED: Any = object()


def cached_query_params(index: Any, params: dict[str, Any]) -> Any:
    """The compiled form of this call's query parameters, or :data:`NOT_CACHED`.

    No parameters: the defaults'. Otherwise the last parsed call's compiled
    value (``index._last_query``, one tuple, so a concurrent call never pairs
    another call's parameters with this one's value) when the parameters are
    equal to it and each is an ``int``: equal ints validate to the same value,
    while an equal float or bool (``64.0``, ``True``) may not validate at all,
    so those take the reference, which parses and raises.
    """
    if not params:
        return index._default_compiled
    last_params, compiled = index._last_query
    if params != last_params:
        return NOT_CACHED
    for value in params.values():
        if type(value) is not int:
            return NOT_CACHED
    return compiled


def fast_call_params(index: Any, queries: Any, k: Any, params: dict[str, Any]) -> Any:
    """The guard of the faiss, usearch and Qdrant fast paths before they enter the write gate.

    The call's compiled query parameters (:func:`cached_query_params`) when
    the query is a float32 array and ``k`` an ``int``, else
    :data:`NOT_CACHED`: the reference answers that call. Its shape and ``k``
    against the rows are checked on the state, inside the gate. The dtype is
    compared by identity, as in :func:`hnswlib_one_query`.
    """
    if type(queries) is not _ndarray or queries.dtype is not F32 or type(k) is not int:
        return NOT_CACHED
    return cached_query_params(index, params)


def faiss_one_query(index: Any, queries: Any, k: Any, params: dict[str, Any]) -> Any:
    """faiss: one ``(1, dim)`` ip/l2 query straight to the index's ``search_c``.

    State (``index._fast``): ``(search_c, swig_ptr, (1, dim), live, negate,
    labels_ext)``. The answer is faiss's own, scores negated for ``l2``:
    exactly the reference's :meth:`_raw_search` output, which mends only
    pads, and a last score above ``-FLT_MAX`` (faiss's pad score) and below
    infinity proves there is none and that the query is finite (module
    docstring; faiss sorts each row, pads last).
    """
    compiled = fast_call_params(index, queries, k, params)
    if compiled is NOT_CACHED:
        return None
    with index._gate:
        state = index._fast
        if state is None:
            return None
        search_c, swig_ptr, shape, live, negate, labels_ext = state
        # faiss reads the row as C memory
        if queries.shape != shape or not 0 < k <= live or not queries.flags.c_contiguous:
            return None
        scores = _empty((1, k), F32)
        ids = _empty((1, k), I64)
        search_c(
            1, swig_ptr(queries), k, swig_ptr(scores), swig_ptr(ids), index._params_for(compiled, k)
        )
        if negate:
            _negative(scores, scores)
        if not -FLT_MAX < scores.item(-1) < INF:
            return None
        return (ids if labels_ext is None else labels_ext[ids]), scores


def hnswlib_one_query(index: Any, queries: Any, k: Any, ef: Any) -> Any:
    """hnswlib: one ``(1, dim)`` ip/l2 query to ``knn_query``, scores converted by a compiled loop.

    ``ef`` is the call's beam width as the caller passed it (the default
    when none). State (``index._fast``, see ``HnswIndex._publish_fast``):
    ``(knn_query, (1, dim), k_max, to_scores, ef_now)``. Taken only when the
    call's ``max(ef, k)`` (``ef`` an ``int``) is the beam width set on
    hnswlib and ``k <= k_max`` (no more than the rows nor than that width),
    so hnswlib already has the ``max(ef, k)`` the reference would set, and
    the ``ef`` is valid (a search set it); an equal ``64.0`` or ``True`` goes to the reference,
    which refuses it. ``to_scores`` (:mod:`ragbench.indexes._hnsw_score_kernels`)
    converts the distances in place with the same float32 operation the
    reference uses and returns the best score. hnswlib raises when fewer
    than ``k`` rows are reachable (the reference pads those). Ids are mapped
    with the snapshot of the last add, read after the search: hnswlib adds
    beside searches and may return rows of an add still running.

    Serves the index-wrapper target (1.03x hnswlib's ``knn_query``): after a
    walk through the graph every object touched here is cold in cache, so
    each step is the cheapest one that is exact. The write gate is entered
    inline (as :meth:`WriteGate.__enter__` does); the dtype is compared by
    identity: numpy's float32 dtype is one object, any other (swapped byte
    order, metadata) is left to the reference, and ``==`` would run numpy's
    dtype comparison (about 1 µs here, profiled; issue 30).
    """
    if (
        type(queries) is not _ndarray
        or queries.dtype is not F32
        or type(k) is not int
        or type(ef) is not int
    ):
        return None
    gate = index._gate
    entries = gate.entries
    entries.append(None)
    if entries[0]:
        entries.pop()
        gate.wait_enter()
    try:
        state = index._fast
        if state is None:
            return None
        knn_query, shape, k_max, to_scores, ef_now = state
        # hnswlib has the reference's max(ef, k) (a k above ef is a request's usual
        # candidate depth: 100 over the default 64), and k fits the rows and that beam
        if (ef if ef > k else k) != ef_now or not 0 < k <= k_max or queries.shape != shape:
            return None
        try:
            labels, dist = knn_query(queries, k)
        except RuntimeError:
            return None
        if not -INF < to_scores(dist) < INF:
            return None
        labels_ext = index._labels_ext
    finally:
        entries.pop()
    ids = labels.view(I64)  # hnswlib's uint64 labels are positions < 2**63
    return (ids if labels_ext is None else labels_ext[ids]), dist


def usearch_one_query(index: Any, queries: Any, k: Any, params: dict[str, Any]) -> Any:
    """usearch: one C-contiguous ``(1, dim)`` ip/l2 query to the compiled ``search_many``.

    State (``index._fast``): ``(search_many, (1, dim), live, similarity,
    labels_ext)``; taken only when ``expansion_search`` already is the
    reference's ``max(ef, k)``. ``k`` rows found and a finite best score:
    no pads and a finite query (module docstring), the reference's answer.
    """
    compiled = fast_call_params(index, queries, k, params)
    if compiled is NOT_CACHED:
        return None
    with index._gate:
        state = index._fast
        if state is None:
            return None
        search_many, shape, live, similarity, labels_ext = state
        if (
            queries.shape != shape
            or not 0 < k <= live
            or not queries.flags.c_contiguous  # usearch reads the row as C memory
            or max(int(compiled), k) != index._ef
        ):
            return None
        keys, dist, counts = search_many(queries, k, False, 1)[:3]
        if counts.item(0) != k:  # pads: usearch leaves their distances unset
            return None
        if similarity:
            _subtract(_ONE, dist, dist)
        else:
            _negative(dist, dist)
        if not -INF < dist.item(0) < INF:
            return None
        ids = keys.view(I64)  # usearch's uint64 keys are positions < 2**63
        return (ids if labels_ext is None else labels_ext[ids]), dist


def qdrant_one_query(index: Any, queries: Any, k: Any, params: dict[str, Any]) -> Any:
    """Qdrant's edge shard: one ``(1, dim)`` ip/l2 query, hits straight into arrays.

    State (``index._fast``): ``(search, request, nearest, (1, dim), live,
    l2)``, only while the caller's ids are Qdrant's point ids. ``k`` hits and
    a finite best score: no pads and a finite query (module docstring); the
    ids and scores are the reference's (``l2``: Qdrant's Euclidean distance,
    squared and negated).
    """
    compiled = fast_call_params(index, queries, k, params)
    if compiled is NOT_CACHED:
        return None
    with index._gate:
        state = index._fast
        if state is None:
            return None
        search, request, nearest, shape, live, l2 = state
        if queries.shape != shape or not 0 < k <= live:
            return None
        hits = search(request(query=nearest(queries.tolist()[0]), limit=k, params=compiled))
        if len(hits) != k or not -INF < hits[0].score < INF:
            return None
        ids = _fromiter([h.id for h in hits], I64, k).reshape(1, k)
        scores = _fromiter([h.score for h in hits], F32, k).reshape(1, k)
        if l2:
            np.square(scores, out=scores)
            _negative(scores, scores)
        return ids, scores
