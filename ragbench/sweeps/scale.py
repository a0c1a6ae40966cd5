"""Cost as the corpus grows (:func:`scale_points`): per size and index, tuned to a recall target."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..executors import Executor, LocalExecutor, Unit
from ..results.rebuilds import merge_builds
from ..results.records import Collector, new_record
from ..validate import positive_int
from .data import SweepData
from .measure import measure
from .memory import built_with_memory
from .points import bytes_fields, exact_reranker, point_fields

__all__ = ["SCALE_RESCORE", "TUNING", "scale_points", "scale_unit", "tune"]


#: Values tried, in order, to reach a recall target in ``scale``.
TUNING = {
    "ef": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
    "nprobe": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "rescore": [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
}


#: Candidates ``scale`` re-scores for a compressed index while tuning its ef/nprobe.
SCALE_RESCORE = 100


def _tuning_axis(index: Any, k: int) -> tuple[str, list[Any]]:
    """The query parameter tuned to reach a recall target, and the values tried in order."""
    qp = set(index.query_params)
    if "ef" in qp:
        return "ef", TUNING["ef"]
    if "nprobe" in qp:
        # the effective nlist (info) when the build parameter is None (automatic)
        nlist = int(index.build_params.get("nlist") or index.info().get("nlist") or 1024)
        return "nprobe", [v for v in TUNING["nprobe"] if v <= nlist] or [nlist]
    if index.name in ("lsh", "minhash-lsh", "binary-flat"):
        return "rescore", [v for v in TUNING["rescore"] if k <= v <= index.ntotal] or [index.ntotal]
    return "", [None]


def tune(
    index: Any, data: SweepData, k: int, target: float, reranker: Any
) -> tuple[dict[str, Any], int | None, dict[str, Any], bool]:
    """Smallest query parameter reaching ``target`` recall: (params, rescore, point, reached).

    A compressed index (one with ``code_bytes_per_vector``) is measured with
    its top :data:`SCALE_RESCORE` candidates re-scored exactly.

    When no value reaches it, the last (most accurate) value tried is returned with ``reached=False``.
    """
    axis, values = _tuning_axis(index, k)
    # compressed indexes are meant to be re-scored: a fixed number of candidates
    fixed = None
    if hasattr(index, "code_bytes_per_vector"):
        fixed = max(k, min(SCALE_RESCORE, index.ntotal))
    for j, v in enumerate(values):
        params: dict[str, Any] = {} if axis in ("", "rescore") else {axis: v}
        rescore = v if axis == "rescore" else fixed
        point = measure(index, data, k, params, rescore=rescore, reranker=reranker)
        if point["recall"] >= target or j == len(values) - 1:
            return params, rescore, point, point["recall"] >= target
    raise ConfigError(f"index {index.name!r}: no tuning values")  # values is never empty


def scale_unit(
    make: Callable[[], SweepData],
    n: int,
    index_names: Sequence[str],
    *,
    k: int,
    target: float,
    build: Mapping[str, Mapping[str, Any]],
    rebuilds: int = 1,
    fast_build: bool = False,
) -> Iterator[dict[str, Any]]:
    """Make the size-``n`` data once; per index: build, tune to ``target`` recall, yield its record.

    With ``rebuilds > 1`` the query parameter is tuned on the first build and
    the same point measured on each further build (seed + i), merged by
    :func:`ragbench.results.rebuilds.merge_builds`.
    """
    data = make()
    reranker = exact_reranker(data)
    count = positive_int("scale", "rebuilds", rebuilds)
    for name in index_names:
        index, build_s, held = built_with_memory(
            name, data, build.get(name, {}), k=k, fast_build=fast_build
        )
        params, rescore, point, reached = tune(index, data, k, target, reranker)
        points = [_scale_fields(data, k, name, index, build_s, n, rescore, held) | point]
        del index
        for i in range(1, count):
            again, again_s, held = built_with_memory(
                name, data, build.get(name, {}), k=k, fast_build=fast_build, i=i
            )
            more = measure(again, data, k, params, rescore=rescore, reranker=reranker)
            points.append(_scale_fields(data, k, name, again, again_s, n, rescore, held) | more)
            del again
        merged = merge_builds(points)
        yield new_record(
            "scale",
            {
                **merged,
                "query": params,
                "rescore": rescore,
                "target_recall": target,
                "reached": reached,
            },
        )


def _scale_fields(
    data: SweepData,
    k: int,
    name: str,
    index: Any,
    build_s: float,
    n: int,
    rescore: int | None,
    held: dict[str, Any],
) -> dict[str, Any]:
    """A scale record's fields about ``index``; ``held``: its measured memory (:mod:`.memory`)."""
    return {
        **point_fields(data, k, name, index, build_s),
        **held,
        "n": n,
        **bytes_fields(index, data.vectors, rescore, held["memory_bytes"]),
    }


def scale_points(
    datasets_by_n: Iterable[tuple[int, Callable[[], SweepData]]],
    index_names: Sequence[str],
    *,
    k: int,
    target: float,
    build: Mapping[str, Mapping[str, Any]],
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    executor: Executor | None = None,
    rebuilds: int = 1,
    fast_build: bool = False,
) -> list[dict[str, Any]]:
    """Per corpus size and index: build, tune the query parameter to ``target`` recall, measure.

    Builds are deterministic unless ``fast_build``; ``rebuilds`` as in :func:`scale_unit`.

    In this process (the default executor) one unit per size makes its data
    once for every index; elsewhere (Ray) each (size, index) is its own unit
    and makes its own data by calling ``make`` where it runs, so give a
    ``make`` that is cheap to send and gives the same data everywhere, such
    as :func:`synthetic_data` bound with :func:`functools.partial` (no corpus
    crosses the network, and no size waits in the object store for its turn).
    """
    ex = executor or LocalExecutor()
    groups = [list(index_names)] if ex.in_process else [[name] for name in index_names]
    options = {"k": k, "target": target, "build": build}
    options.update(rebuilds=rebuilds, fast_build=fast_build)
    units = [
        Unit(scale_unit, (make, n, names), options) for n, make in datasets_by_n for names in groups
    ]
    emit = Collector(on_point, progress)
    ex.run(units, emit)
    return emit.records
