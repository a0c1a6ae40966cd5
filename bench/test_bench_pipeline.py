"""Pipeline bookkeeping overhead (targets in shared PERF.md).

- per stage: ``run_stages`` over N no-op stages vs calling the same N stages
  in a bare loop, measured interleaved; the difference / N is the cost of
  timing one stage (target ≤ 200 ns);
- per request: ``Pipeline.request`` over 9 trivial stages, minus the bare
  calls (target ≤ 3 µs per request, including recording the request).

Run: ``.venv/bin/pytest bench/test_bench_pipeline.py --benchmark-only -s``
"""

from __future__ import annotations

import statistics
from time import perf_counter_ns

from ragbench.pipeline import Pipeline, RequestContext
from ragbench.timing import run_stages

N_STAGES = 9
REPEATS = 2000
ROUNDS = 31


class Noop:
    name = "noop"

    def __call__(self, ctx: object) -> None:
        return None


def _bare(stages, ctx) -> None:
    for stage in stages:
        stage(ctx)


def _interleaved(fns, inner: int = REPEATS, rounds: int = ROUNDS) -> list[float]:
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


class _FakeDataset:
    class queries:  # noqa: N801 - mimics Dataset.queries
        ids = ["q0"]
        texts = ["question"]


def _trivial_pipeline() -> Pipeline:
    pipe = Pipeline({"dataset": {"name": "synthetic"}})
    pipe.dataset = _FakeDataset()  # type: ignore[assignment]
    pipe._stages = [Noop() for _ in range(N_STAGES)]
    pipe._loop_names = [f"s{i}" for i in range(N_STAGES)]
    pipe._stamps = [0] * (N_STAGES + 1)
    pipe._ready = True
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
        f"for {N_STAGES} no-op stages; target ≤ 200 ns)"
    )
    benchmark(run_stages, stages, ctx, stamps)
    assert per_stage > 0  # the timer costs something; the figure is the result


def test_pipeline_request_overhead(benchmark) -> None:
    pipe = _trivial_pipeline()
    stages = pipe._stages
    ctx = RequestContext(0, "q0", "question")

    def request() -> None:
        pipe.request(0)
        if len(pipe._records) > 10_000:
            pipe._records.clear()

    bare, full = _interleaved([lambda: _bare(stages, ctx), request])
    overhead = full - bare
    benchmark.extra_info.update(bare_ns=bare, request_ns=full, overhead_ns=overhead)
    print(
        f"\npipeline request over {N_STAGES} trivial stages: {overhead:.0f} ns bookkeeping "
        f"(request {full:.0f} ns vs bare calls {bare:.0f} ns; target ≤ 3000 ns)"
    )
    benchmark(request)
