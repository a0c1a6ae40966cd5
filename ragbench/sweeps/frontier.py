"""Recall–latency frontiers (:func:`sweep_points`): every (index, build, query parameters) point."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .. import indexes
from ..executors import Executor, LocalExecutor, Unit
from ..pipeline.capabilities import FilteredSearch
from ..results.rebuilds import merge_builds
from ..results.records import Collector, cliff_key, filter_cliffs, new_record
from ..validate import positive_int
from .data import SweepData, grid_of, index_param_names
from .grid import KNOBS, knob_of, next_value
from .measure import measure
from .memory import built_with_memory
from .points import bytes_fields, effective_query, exact_reranker, point_fields

__all__ = ["count_points", "engines_round_robin", "sweep_points", "sweep_unit"]


def _grid_axes(
    name: str,
    dim: int,
    metric: str,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
) -> tuple[list[tuple[str, list[Any]]], list[tuple[str, list[Any]]]]:
    """The (parameter, values) axes of ``name``'s build and query grids: the parameters it
    takes, a key scoped to it (``lancedb.ef``) in place of the unscoped one (:func:`grid_of`)."""
    build_names, query_names = index_param_names(name, dim, metric)
    b_axes = [(p, list(v)) for p, v in grid_of(name, build_names, build_grid).items()]
    q_axes = [(p, list(v)) for p, v in grid_of(name, query_names, query_grid).items()]
    return b_axes, q_axes


def _combos(axes: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    names = [p for p, _ in axes]
    return [
        dict(zip(names, values, strict=True)) for values in itertools.product(*[v for _, v in axes])
    ]


def sweep_unit(
    data: SweepData,
    name: str,
    build: Mapping[str, Any],
    queries: Sequence[Mapping[str, Any]],
    *,
    k: int,
    repeat: int = 1,
    strategies: Sequence[str] = ("auto",),
    recall_target: float = 0.9,
    recall_targets: Sequence[float] | None = None,
    rebuilds: int = 1,
    fast_build: bool = False,
    refine: bool = False,
) -> Iterator[dict[str, Any]]:
    """Build index ``name`` with ``build``, then yield one sweep record per query-parameter point.

    ``refine``: each of ``queries`` is a line along the index's recall knob,
    whose values are chosen as the points are measured (the default grid,
    :mod:`ragbench.sweeps.grid`: dense near ``recall_targets``); with
    ``rebuilds > 1`` the other builds measure the values the first one chose.

    With filter cases in ``data``, each query-parameter point is followed by
    its filtered points (each of ``strategies`` the index has, at each
    selectivity), yielded once the line is complete, with ``filter_cliff``.
    Builds are deterministic unless ``fast_build``; with ``rebuilds > 1`` the
    index is built that many times (seed, seed + 1, ...) and each point's
    records of every build are merged (:func:`ragbench.results.rebuilds.merge_builds`),
    yielded once the last build is measured.
    """
    opts: dict[str, Any] = {"k": k, "repeat": repeat, "strategies": strategies}
    opts["fast_build"] = fast_build
    targets = {"recall_target": recall_target, "recall_targets": list(recall_targets or [])}
    if not recall_targets:
        del targets["recall_targets"]
    aim = list(recall_targets or [recall_target]) if refine else None
    n = positive_int("sweep", "rebuilds", rebuilds)
    if n == 1:
        for point, line in _build_points(data, name, build, queries, i=0, refine=aim, **opts):
            yield from _with_cliffs(point, line, targets)
        return
    first = list(_build_points(data, name, build, queries, i=0, refine=aim, **opts))
    chosen = [_asked(p) for p, _ in first]  # the values the first build's refinement chose
    per_build = [first] + [
        list(_build_points(data, name, build, chosen, i=i, **opts)) for i in range(1, n)
    ]
    for same in zip(*per_build, strict=True):
        point = merge_builds([p for p, _ in same])
        line = [merge_builds(list(group)) for group in zip(*[ln for _, ln in same], strict=True)]
        yield from _with_cliffs(point, line, targets)


def _with_cliffs(
    point: dict[str, Any], line: list[dict[str, Any]], targets: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    # the targets go in every record: the reading's "cheapest point reaching it" and its
    # iso-recall lines read them there
    yield new_record("sweep", {**point, **targets})
    cliffs = filter_cliffs(line, target=targets["recall_target"])
    for p in line:
        cliff = cliffs[cliff_key(p)]
        yield new_record("sweep", {**p, "filter_cliff": cliff, **targets})


def _build_points(
    data: SweepData,
    name: str,
    build: Mapping[str, Any],
    queries: Sequence[Mapping[str, Any]],
    *,
    k: int,
    repeat: int,
    strategies: Sequence[str],
    fast_build: bool,
    i: int,
    refine: Sequence[float] | None = None,
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Build ``i`` of the unit; per query point its fields and its filtered line (no cliffs yet).

    ``refine``: the recall targets a default grid is dense near (:func:`_refined`); ``None``:
    ``queries`` as given.
    """
    index, build_s, held = built_with_memory(name, data, build, k=k, fast_build=fast_build, i=i)
    fields = {**point_fields(data, k, name, index, build_s), **held}
    usable = _usable_strategies(index, strategies) if data.filter_cases else []
    reranker = None

    def measured(point_params: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        nonlocal reranker
        params = dict(point_params)
        rescore = params.pop("rescore", None)
        if rescore is not None and reranker is None:
            reranker = exact_reranker(data)
        opts = {"rescore": rescore, "reranker": reranker, "repeat": repeat}
        sizes = bytes_fields(index, data.vectors, rescore, held["memory_bytes"])
        head = {**fields, **sizes, "build_given": dict(build), "query": params}
        ran = effective_query(name, index, params, min(rescore or k, int(index.ntotal)))
        head.update(rescore=rescore, effective_query=ran)
        point = {**head, **measure(index, data, k, params, **opts)}
        line = [
            head | measure(index, data, k, params, case=case, strategy=strategy, **opts)
            for strategy in usable
            for case in data.filter_cases
        ]
        return point, line

    for point_params in queries:
        if refine is None:
            yield measured(point_params)
        else:
            yield from _refined(index, point_params, k, refine, measured)


def _refined(
    index: Any,
    base: Mapping[str, Any],
    k: int,
    targets: Sequence[float],
    measured: Callable[[Mapping[str, Any]], tuple[dict[str, Any], list[dict[str, Any]]]],
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """``base`` along the index's recall knob, each value chosen after the last was measured.

    :func:`ragbench.sweeps.grid.next_value` picks the values from the recalls
    so far; an index without a knob, or whose knob ``--param`` names, measures ``base``
    once. Each record of the line says ``grid: "refined"`` and ``grid_knob``.
    """
    candidates = min(int(base.get("rescore") or k), int(index.ntotal))
    knob = knob_of(index, base, candidates)
    if knob is None or knob.name in base:  # no knob on this build, or --param gave its values
        yield measured(base)
        return
    recalls: dict[int, float] = {}
    while (value := next_value(recalls, knob, targets)) is not None:
        point, line = measured({**base, knob.name: value})
        recalls[value] = float(point["recall"])
        how = {"grid": "refined", "grid_knob": knob.name}
        yield point | how, [p | how for p in line]


def _asked(point: Mapping[str, Any]) -> dict[str, Any]:
    """The query parameters a point was asked for (its ``query`` and ``rescore``)."""
    asked = dict(point["query"])
    if point.get("rescore") is not None:
        asked["rescore"] = point["rescore"]
    return asked


def _usable_strategies(index: Any, wanted: Sequence[str]) -> list[str]:
    """The strategies of ``wanted`` that ``index`` has (``auto`` when it has any)."""
    has = tuple(index.filter_strategies) if isinstance(index, FilteredSearch) else ()
    return [s for s in wanted if s in has or (s == "auto" and has)]


def sweep_points(
    data: SweepData,
    index_names: Sequence[str],
    *,
    k: int,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    repeat: int = 1,
    executor: Executor | None = None,
    strategies: Sequence[str] = ("auto",),
    recall_target: float = 0.9,
    recall_targets: Sequence[float] | None = None,
    rebuilds: int = 1,
    fast_build: bool = False,
) -> list[dict[str, Any]]:
    """Measure every (index, build params, query params) point; ``on_point`` gets each record at once.

    Builds are deterministic unless ``fast_build``; ``rebuilds``: builds per
    (index, build params), merged per point (see :func:`sweep_unit`).

    ``build_grid`` / ``query_grid``: parameter → values. An unscoped name (``ef``)
    applies to every index that takes it; ``INDEX.NAME`` (``lancedb.ef``) to that index
    alone, in place of the unscoped values (:func:`~ragbench.sweeps.data.grid_of`;
    :func:`~ragbench.sweeps.data.check_grid` refuses a name no index it names takes).
    So engines with different knobs get their own values in one sweep, interleaved.

    One unit of work per (index, build params) (:func:`sweep_unit`), run by
    ``executor``: in this process (the default), engines interleaved point by
    point (:func:`engines_round_robin`); on Ray, one task per unit; the data is shared
    with the units once (:meth:`~ragbench.executors.Executor.share`: on Ray,
    one copy in the object store, since embedding and exact search are done once here).
    """
    dim = int(data.vectors.shape[1])
    ex = executor or LocalExecutor()
    shared = ex.share(data)
    units = []
    for name in index_names:
        b_axes, q_axes = _grid_axes(name, dim, data.metric, build_grid, query_grid)
        queries = _combos(q_axes)
        refine = _refines(name, dim, data.metric, dict(q_axes))
        for build in _combos(b_axes):
            opts = {"k": k, "repeat": repeat, "strategies": list(strategies)}
            opts.update(recall_target=recall_target, recall_targets=recall_targets)
            opts.update(rebuilds=rebuilds, fast_build=fast_build, refine=refine)
            units.append(Unit(sweep_unit, (shared, name, build, queries), opts))
    emit = Collector(on_point, progress)
    if ex.in_process:
        engines_round_robin(units, emit)
    else:  # one task per unit, run side by side on the cluster's nodes
        ex.run(units, emit)
    return emit.records


def _refines(name: str, dim: int, metric: str, own_grid: Mapping[str, Any]) -> bool:
    """Whether ``name`` may take the default grid: it has a recall knob its own query grid
    (``own_grid``, the axes :func:`_grid_axes` gave it) does not name.

    Which knob a build has is known once it is built (LanceDB's ``ef`` or ``nprobes``:
    :func:`ragbench.sweeps.grid.knob_of`); a knob ``--param`` names is measured as given.
    """
    _, query_names = index_param_names(name, dim, metric)
    return bool(query_names.intersection(KNOBS).difference(own_grid))


#: Points a refined line is counted as in the progress total (its values are chosen as it runs).
REFINED_ESTIMATE = 8


def engines_round_robin(units: Sequence[Unit], on_record: Callable[[dict[str, Any]], None]) -> None:
    """Run sweep ``units`` in this process, engines interleaved round by round.

    Round ``i`` takes the next record of each engine (index name) in turn, in
    the order the units name them: each engine's ``i``-th query-parameter point
    is measured seconds after the other engines' ``i``-th, under the same load,
    never minutes apart. One engine's units (its build parameters) still run
    one after the other, so one build per engine is alive at a time. A unit's
    records are measured when first asked for (:func:`sweep_unit` is a
    generator), so a record already measured with its point (a filtered line)
    costs its round nothing.
    """
    by_engine: dict[str, list[Unit]] = {}
    for unit in units:
        by_engine.setdefault(str(unit.args[1]), []).append(unit)
    streams = [
        itertools.chain.from_iterable(u.fn(*u.args, **u.kwargs) for u in group)
        for group in by_engine.values()
    ]
    while streams:
        for stream in list(streams):
            record = next(stream, None)
            if record is None:
                streams.remove(stream)
            else:
                on_record(record)


def count_points(
    index_names: Sequence[str],
    dim: int,
    metric: str,
    build_grid: Mapping[str, Sequence[Any]],
    query_grid: Mapping[str, Sequence[Any]],
    *,
    selectivities: int = 0,
    strategies: Sequence[str] = ("auto",),
) -> int:
    """How many points :func:`sweep_points` will measure (``selectivities``: filter cases).

    A line of the default grid (:mod:`ragbench.sweeps.grid`) counts as
    :data:`REFINED_ESTIMATE` points: an estimate, its values are chosen as it runs.
    """
    total = 0
    for name in index_names:
        b_axes, q_axes = _grid_axes(name, dim, metric, build_grid, query_grid)
        probe = indexes.create(name, dim=dim, metric=metric) if selectivities else None
        per = 1 + selectivities * len(_usable_strategies(probe, strategies) if probe else [])
        line = REFINED_ESTIMATE if _refines(name, dim, metric, dict(q_axes)) else 1
        lines = math.prod(len(v) for _, v in b_axes) * math.prod(len(v) for _, v in q_axes)
        total += lines * line * per
    return total
