"""Pipeline bookkeeping overhead (targets in shared PERF.md), asserted.

- per stage: ``run_stages`` over N no-op stages vs calling the same N stages
  in a bare loop, measured interleaved; the difference / N is the cost of
  timing one stage (target ≤ 200 ns);
- per request: ``Pipeline.request`` over 9 trivial stages, minus the bare
  calls of the same stages (target ≤ 3 µs per request, including building the
  request's context, its stamps and recording the request).

Both are differences of medians measured side by side, interleaved, in one
process. Run: ``.venv/bin/pytest bench/test_bench_pipeline.py -p no:cacheprovider -s``
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from time import perf_counter_ns

import numpy as np

from ragbench.pipeline import Pipeline, RequestContext, RequestRecord
from ragbench.timing import run_stages

N_STAGES = 9
REPEATS = 2000
ROUNDS = 31
PER_STAGE_TARGET_NS = 200
PER_REQUEST_TARGET_NS = 3000


class Noop:
    name = "noop"

    def __call__(self, ctx: object) -> None:
        return None


def _bare(stages, ctx) -> None:
    for stage in stages:
        stage(ctx)


def _interleaved(
    fns: list[Callable[[], object]], inner: int = REPEATS, rounds: int = ROUNDS
) -> list[float]:
    """Median ns per call of each fn, measured in alternating rounds."""
    per: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            fn = fns[i]
            t0 = perf_counter_ns()
            for _ in range(inner):
                fn()
            per[i].append((perf_counter_ns() - t0) / inner)
    return [statistics.median(x) for x in per]


TRIVIAL = {
    "dataset": {"name": "synthetic", "n": 64, "dim": 8, "n_queries": 4, "seed": 0},
    "run": {"queries": 1, "warmup": 0, "k": 1, "k_candidates": 1},
    "embed": {"backend": "precomputed"},
    "retrieve": {"backend": "flat"},
    "rerank": {"backend": "none"},
    "serialize": {"backend": "json"},
    "transport": {"backend": "inproc"},
    "generate": {"backend": "none"},
}


def _trivial_pipeline() -> Pipeline:
    """A set-up pipeline (public API) whose stages are then swapped for no-ops."""
    pipe = Pipeline(TRIVIAL)
    pipe.setup()
    pipe._stages = [Noop() for _ in range(N_STAGES)]
    pipe._loop_names = [f"s{i}" for i in range(N_STAGES)]
    return pipe


def test_bookkeeping_per_stage(benchmark) -> None:
    stages = [Noop() for _ in range(N_STAGES)]
    ctx = RequestContext(0, "q0", "question")
    stamps = [0] * (N_STAGES + 1)
    bare, timed = _interleaved(
        [lambda: _bare(stages, ctx), lambda: run_stages(stages, ctx, stamps)]
    )
    per_stage = (timed - bare) / N_STAGES
    benchmark.extra_info.update(bare_ns=bare, timed_ns=timed, per_stage_ns=per_stage)
    print(
        f"\nbookkeeping per stage: {per_stage:.0f} ns (timed {timed:.0f} ns vs bare {bare:.0f} ns "
        f"for {N_STAGES} no-op stages; target ≤ {PER_STAGE_TARGET_NS} ns)"
    )
    benchmark(run_stages, stages, ctx, stamps)
    assert per_stage <= PER_STAGE_TARGET_NS, (
        f"timing one stage costs {per_stage:.0f} ns, "
        f"{per_stage - PER_STAGE_TARGET_NS:.0f} ns over the {PER_STAGE_TARGET_NS} ns target"
    )


def test_pipeline_request_overhead(benchmark) -> None:
    with _trivial_pipeline() as pipe:
        stages = [Noop() for _ in range(N_STAGES)]
        ctx = RequestContext(0, "q0", "question")
        kept = [0]

        def request() -> None:
            pipe.request(0)
            kept[0] += 1
            if kept[0] == 10_000:  # keep the record list (and memory) bounded
                pipe.begin()
                kept[0] = 0

        # What a request does besides calling its stages, for the report.
        far = None
        ids = np.zeros(1, dtype=np.int64)
        bare, full, new_ctx, new_stamps, new_record = _interleaved(
            [
                lambda: _bare(stages, ctx),
                request,
                lambda: RequestContext(0, "q0", "question"),
                lambda: [0] * (N_STAGES + 1),
                lambda: RequestRecord([0], far, ids, 0, 0, 0),
            ]
        )
        overhead = full - bare
        benchmark.extra_info.update(bare_ns=bare, request_ns=full, overhead_ns=overhead)
        print(
            f"\npipeline request over {N_STAGES} trivial stages: {overhead:.0f} ns bookkeeping "
            f"(request {full:.0f} ns vs bare calls {bare:.0f} ns; target ≤ "
            f"{PER_REQUEST_TARGET_NS} ns); of which context {new_ctx:.0f} ns, stamps list "
            f"{new_stamps:.0f} ns, RequestRecord {new_record:.0f} ns"
        )
        pipe.begin()
        benchmark(request)
    assert overhead <= PER_REQUEST_TARGET_NS, (
        f"a request's bookkeeping costs {overhead:.0f} ns, "
        f"{overhead - PER_REQUEST_TARGET_NS:.0f} ns over the {PER_REQUEST_TARGET_NS} ns target"
    )
