"""Several pipelines measured side by side, request by request (``ragbench compare``).

The design of the rounds -- which configuration goes when, on which query --
lives in :mod:`ragbench.orders`; this module runs a schedule on set-up
pipelines and records the design in each one's ``info["order"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import orders
from ..datasets import Dataset
from ..errors import GeneratorError, TransportError

__all__ = ["Interleavable", "interleave"]


class Interleavable(Protocol):
    """What :func:`interleave` needs of a pipeline (:class:`ragbench.pipeline.Pipeline` has it)."""

    dataset: Dataset | None
    error: str | None
    info: dict[str, Any]

    def begin(self) -> None: ...
    def start_repetition(self, warmup: int) -> None: ...
    def request(self, i: int) -> None: ...


def interleave(
    pipelines: Sequence[Interleavable],
    queries: int,
    *,
    warmup: int = 0,
    repeat: int = 1,
    progress: Callable[[int], None] | None = None,
    order: str = "balanced",
    seed: int = 0,
) -> orders.Schedule:
    """Run ``queries`` requests on every pipeline, interleaved request by request, ``repeat`` times.

    Each pipeline starts a new measured run (:meth:`Pipeline.begin`), and
    each repetition with ``warmup`` requests on every pipeline. ``order``
    names the design of the rounds (:mod:`ragbench.orders`): ``balanced``
    (default; positions balanced by a Williams design drawn with ``seed``,
    each configuration on a different query in a round) or ``same-query``
    (a rotation, every configuration on the same query in turn). Every
    pipeline serves requests ``0 .. queries-1`` once per repetition either
    way. Each pipeline's ``info["order"]`` records the design, the seed, its
    query offset and how often it ran in each position. A failing pipeline is
    dropped from later rounds with its error kept. Returns the schedule.
    """
    n_queries = min(
        (len(p.dataset.queries.ids) for p in pipelines if p.dataset is not None), default=None
    )
    plan = orders.schedule(
        order, len(pipelines), queries, repeat=repeat, n_queries=n_queries, seed=seed
    )
    for p in pipelines:
        p.begin()
    live = set(range(len(pipelines)))
    positions = [[0] * len(pipelines) for _ in pipelines]
    for rep in range(repeat):
        for c in sorted(live):
            pipelines[c].start_repetition(warmup)
        rounds = plan.rounds[rep * queries : (rep + 1) * queries]
        live = _interleaved_rounds(pipelines, rounds, live, positions, progress)
    repeats = orders.consecutive_repeats(plan, n_queries or queries)
    for c, p in enumerate(pipelines):
        p.info["order"] = {
            "design": plan.design,
            "seed": plan.seed,
            "configurations": len(pipelines),
            "positions": positions[c],
            "query_offset": plan.offsets[c],
            "consecutive_same_query": repeats,
        }
    return plan


def _interleaved_rounds(
    pipelines: Sequence[Interleavable],
    rounds: Sequence[Sequence[tuple[int, int]]],
    live: set[int],
    positions: list[list[int]],
    progress: Callable[[int], None] | None,
) -> set[int]:
    """Run ``rounds`` of ``(pipeline, request)`` turns, skipping dropped pipelines; the live ones."""
    for turns in rounds:
        if not live:
            return live
        position = 0
        for c, request in turns:
            if c not in live:
                continue
            positions[c][position] += 1
            position += 1
            p = pipelines[c]
            try:
                p.request(request)
            except (TransportError, GeneratorError) as exc:
                p.error = f"{type(exc).__name__}: {exc}"
        live = {c for c in live if pipelines[c].error is None}
        if progress is not None:
            progress(1)
    return live
