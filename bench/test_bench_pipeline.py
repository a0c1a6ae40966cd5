"""Pipeline bookkeeping overhead (targets: docs/reference/performance-targets.md#pipeline-bookkeeping),
asserted.

- per stage: ``run_stages`` over N no-op stages vs calling the same N stages
  in a bare loop, measured interleaved; the difference / N is the cost of
  timing one stage (target ≤ 200 ns);
- per request: ``Pipeline.request`` over 9 trivial stages, minus the bare
  calls of the same stages (target ≤ 3 µs per request, including building the
  request's context, its stamps and recording the request);
- CPU-time mode (``[run] cpu_time = true``: ``run_stages_cpu`` also stamps
  ``thread_time_ns``) vs without, per stage: the loops alone, and
  ``Pipeline.serve`` of two trivial pipelines differing only in ``cpu_time``
  (which adds the CPU stamps list); target ≤ 1.2 µs added per stage, both
  asserted.

Both are differences of medians measured side by side, interleaved, in one
process; each gate takes attempts inside a ``Watch`` and is judged on the best
quiet one (see ``bench/_quick.py``). Run: ``.venv/bin/pytest bench/test_bench_pipeline.py -p no:cacheprovider -s``
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from time import perf_counter_ns

import numpy as np
from _quick import attempts, judge, need, pick, until_met

from ragbench.pipeline import Pipeline, RequestContext, RequestRecord
from ragbench.timing import run_stages, run_stages_cpu

N_STAGES = 9
REPEATS = pick(2000, 500)
ROUNDS = pick(31, 11)
PER_STAGE_TARGET_NS = 200
PER_REQUEST_TARGET_NS = 3000
CPU_TIME_PER_STAGE_TARGET_NS = 1200


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


def _trivial_pipeline(*, cpu_time: bool = False) -> Pipeline:
    """A set-up pipeline (public API) whose stages are then swapped for no-ops."""
    pipe = Pipeline({**TRIVIAL, "run": {**TRIVIAL["run"], "cpu_time": cpu_time}})
    pipe.setup()
    pipe._stages = [Noop() for _ in range(N_STAGES)]
    pipe._loop_names = [f"s{i}" for i in range(N_STAGES)]
    return pipe


def test_bookkeeping_per_stage(benchmark) -> None:
    stages = [Noop() for _ in range(N_STAGES)]
    ctx = RequestContext(0, "q0", "question")
    stamps = [0] * (N_STAGES + 1)

    def measure() -> tuple[float, float]:
        return tuple(
            _interleaved(  # type: ignore[return-value]
                [lambda: _bare(stages, ctx), lambda: run_stages(stages, ctx, stamps)]
            )
        )

    def per(v: tuple[float, float]) -> float:
        return (v[1] - v[0]) / N_STAGES

    runs = attempts(measure, until_met((per, PER_STAGE_TARGET_NS, False)))
    bare, timed = min(
        (a for a in runs if a.quiet), key=lambda a: per(a.value), default=runs[-1]
    ).value
    per_stage = per((bare, timed))
    benchmark.extra_info.update(bare_ns=bare, timed_ns=timed, per_stage_ns=per_stage)
    print(
        f"\nbookkeeping per stage: {per_stage:.0f} ns (timed {timed:.0f} ns vs bare {bare:.0f} ns "
        f"for {N_STAGES} no-op stages; target ≤ {PER_STAGE_TARGET_NS} ns)"
    )
    benchmark(run_stages, stages, ctx, stamps)
    judge(
        "bookkeeping per stage",
        runs,
        per,
        bound=PER_STAGE_TARGET_NS,
        higher_is_better=False,
        unit=" ns",
        fmt=".0f",
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

        def measure() -> list[float]:
            return _interleaved(
                [
                    lambda: _bare(stages, ctx),
                    request,
                    lambda: RequestContext(0, "q0", "question"),
                    lambda: [0] * (N_STAGES + 1),
                    lambda: RequestRecord([0], None, far, ids, 0, 0, 0),
                ]
            )

        def added(v: list[float]) -> float:
            return v[1] - v[0]

        runs = attempts(measure, until_met((added, PER_REQUEST_TARGET_NS, False)))
        best = min((a for a in runs if a.quiet), key=lambda a: added(a.value), default=runs[-1])
        bare, full, new_ctx, new_stamps, new_record = best.value
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
    judge(
        "request bookkeeping",
        runs,
        added,
        bound=PER_REQUEST_TARGET_NS,
        higher_is_better=False,
        unit=" ns",
        fmt=".0f",
    )


def test_otel_export_cost(benchmark) -> None:
    """OpenTelemetry export per request, after timing; the timed request path unchanged with it on.

    Export cost: ``TraceExporter.export`` of a request shaped like the
    pipeline's (root, 6 loop stages, deserialize and prompt nested under
    transport: 9 spans) -- span creation plus the BatchSpanProcessor's enqueue,
    to an exporter that drops every span; then the whole
    ``Pipeline.export_traces`` per request (attributes, recall, flushes).
    Neither runs inside a timed request: ``Pipeline.request`` with an
    exporter attached calls it zero times and costs what it costs without.
    """

    need("opentelemetry.sdk.trace", "otel")
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from ragbench.otel import TraceExporter

    class Drop(SpanExporter):
        spans = 0

        def export(self, spans) -> SpanExportResult:
            Drop.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter = TraceExporter(Drop())  # BatchSpanProcessor, as --otel uses
    with Pipeline(TRIVIAL, otel=exporter) as traced, Pipeline(TRIVIAL) as plain:
        for pipe in (traced, plain):
            pipe.setup()
            pipe.begin()
        per_batch = 100
        for i in range(per_batch):
            traced.request(i)
        records = list(traced._records)
        kwargs = [
            traced.trace_of(rec, row, 1.0, False)
            for rec, row in zip(records, traced.stage_samples(records)[0], strict=True)
        ]
        names = traced._loop_names
        exported_before = exporter.exported

        # the timed path: a request with an exporter attached vs without, interleaved
        def request(pipe: Pipeline) -> Callable[[], None]:
            def one() -> None:
                pipe.request(0)
                if len(pipe._records) >= 10_000:
                    pipe._records.clear()

            return one

        with_otel, without = _interleaved([request(traced), request(plain)], inner=500)
        assert exporter.exported == exported_before, "a timed request exported something"

        # span creation + enqueue, 100 requests at a time, flushed (untimed) between batches
        span_ns: list[float] = []
        full_ns: list[float] = []
        for _ in range(ROUNDS):
            t0 = perf_counter_ns()
            for rec, kw in zip(records, kwargs, strict=True):
                exporter.export(names, rec.stamps, first_token=False, **kw)
            span_ns.append((perf_counter_ns() - t0) / per_batch)
            exporter.flush()
            t0 = perf_counter_ns()
            traced.export_traces(records)
            full_ns.append((perf_counter_ns() - t0) / per_batch)
        spans_per_request = 1 + len(names) + 2
        export = statistics.median(span_ns)
        full = statistics.median(full_ns)
        benchmark.extra_info.update(
            export_ns=export,
            export_traces_ns=full,
            spans_per_request=spans_per_request,
            request_with_otel_ns=with_otel,
            request_without_ns=without,
        )
        print(
            f"\nOpenTelemetry export per request ({spans_per_request} spans): {export / 1e3:.1f} µs "
            f"span creation + batch enqueue ({export / spans_per_request / 1e3:.1f} µs per span); "
            f"{full / 1e3:.1f} µs per request for Pipeline.export_traces (attributes, recall, "
            f"flushes to a dropping exporter); timed request with an exporter attached "
            f"{with_otel:.0f} ns vs {without:.0f} ns without (exports after timing: 0 during it)"
        )
        assert Drop.spans >= ROUNDS * per_batch * spans_per_request  # nothing was lost
        benchmark.pedantic(
            exporter.export,
            args=(names, records[0].stamps),
            kwargs={"first_token": False, **kwargs[0]},
            rounds=200,
            iterations=1,
        )
    exporter.close()


def test_cpu_time_mode_per_stage(benchmark) -> None:
    stages = [Noop() for _ in range(N_STAGES)]
    ctx = RequestContext(0, "q0", "question")
    stamps = [0] * (N_STAGES + 1)
    cpu = [0] * (N_STAGES + 1)
    with _trivial_pipeline() as off, _trivial_pipeline(cpu_time=True) as on:
        assert off.serve(0).cpu_stamps is None and on.serve(0).cpu_stamps is not None

        def measure() -> list[float]:
            return _interleaved(
                [
                    lambda: run_stages(stages, ctx, stamps),
                    lambda: run_stages_cpu(stages, ctx, stamps, cpu),
                    lambda: off.serve(0),
                    lambda: on.serve(0),
                ]
            )

        def in_loop(v: list[float]) -> float:
            return (v[1] - v[0]) / N_STAGES

        def in_serve(v: list[float]) -> float:
            return (v[3] - v[2]) / N_STAGES

        target = CPU_TIME_PER_STAGE_TARGET_NS
        runs = attempts(measure, until_met((in_loop, target, False), (in_serve, target, False)))
        quiet = [a.value for a in runs if a.quiet] or [runs[-1].value]
        wall, both, serve_off, serve_on = min(quiet, key=in_loop)
        loop_added = in_loop([wall, both, serve_off, serve_on])
        serve_added = min(in_serve(v) for v in quiet)
        benchmark.extra_info.update(
            run_stages_ns=wall,
            run_stages_cpu_ns=both,
            serve_off_ns=serve_off,
            serve_on_ns=serve_on,
            loop_added_per_stage_ns=loop_added,
            serve_added_per_stage_ns=serve_added,
        )
        print(
            f"\ncpu_time mode, added per stage: {loop_added:.0f} ns in the loop (run_stages_cpu "
            f"{both:.0f} ns vs run_stages {wall:.0f} ns for {N_STAGES} no-op stages), "
            f"{serve_added:.0f} ns per stage through Pipeline.serve (cpu_time on {serve_on:.0f} ns "
            f"vs off {serve_off:.0f} ns per request); target ≤ {CPU_TIME_PER_STAGE_TARGET_NS} ns"
        )
        benchmark(on.serve, 0)
    for what, value in (("run_stages_cpu", in_loop), ("Pipeline.serve", in_serve)):
        judge(
            f"cpu_time mode per stage through {what}",
            runs,
            value,
            bound=target,
            higher_is_better=False,
            unit=" ns",
            fmt=".0f",
        )
