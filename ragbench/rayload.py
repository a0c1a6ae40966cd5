"""Open-loop load from Ray actors (``ragbench load --executor ray``), beside the other load drivers.

:func:`ray_load_points` starts :class:`LoadGenerator` actors on a Ray cluster
(:class:`ragbench.executors.RayExecutor`), each with its own pipelines and
thread or process workers (:mod:`ragbench.workers`), offers each its share
of every load level with :func:`ragbench.traffic.open_loop`, and merges
their requests into one load record per (level, configuration).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import threads
from .env import environment
from .errors import ConfigError
from .executors import STOP_WAIT_S, Configs, RayExecutor, raise_cause
from .pipeline import Pipeline, SharedParts
from .results.records import Collector, new_record, node_name
from .settings import parse_config
from .traffic import LoadOptions, Traffic, arrivals, merge_concurrent, open_loop, summarize, warm
from .workers import ProcessWorkers, ThreadWorkers

__all__ = ["LoadGenerator", "ray_load_points"]


class LoadGenerator:
    """A Ray actor offering one share of each load level (:func:`ray_load_points`).

    It sets up its own pipeline per configuration (built where it runs), its
    own pool of ``workers`` thread or process workers per configuration, and
    offers open-loop arrivals to it with :func:`ragbench.traffic.open_loop`.
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.pipelines: list[Pipeline] = []
        self.pools: list[Any] = []

    def setup(
        self, configs: Configs, *, worker_kind: str, workers: int, warmup: int, build_threads: int
    ) -> dict[str, Any]:
        """Set up every configuration and its warm pool; where this actor runs (:meth:`about`).

        A method, not the constructor: an error here reaches the driver as itself.
        """
        threads.set_threads(build_threads)
        try:
            self._setup(configs, worker_kind, workers, warmup)
        except BaseException:
            self._stack.close()
            raise
        return self.about()

    def _setup(self, configs: Configs, worker_kind: str, workers: int, warmup: int) -> None:
        index_dir = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="ragbench-"))
        for j, (config, label) in enumerate(configs):
            cfg = parse_config(config)  # an actor is sent the plain dict; read it typed
            if worker_kind == "process" and cfg.retrieve.index_file is None:
                # built once here, loaded by every worker process of this actor
                cfg = cfg.replace("retrieve", index_file=os.path.join(index_dir, f"{j}.index"))
            pipe = Pipeline(cfg, label=label)
            self._stack.callback(pipe.close)
            self.pipelines.append(pipe)
        shared = SharedParts()
        for pipe in self.pipelines:
            pipe.setup(shared=shared)
        for pipe in self.pipelines:
            pool: Any
            if worker_kind == "thread":
                pool = ThreadWorkers(pipe, workers)
                self._stack.callback(pool.close)
                warm(pool, max(1, warmup // workers))
            else:
                pool = ProcessWorkers(pipe.config, workers, warmup=warmup)
                self._stack.callback(pool.close)
            self.pools.append(pool)

    def about(self) -> dict[str, Any]:
        """Where this actor runs: its ``node`` and environment block."""
        return {"node": node_name(), "env": {**environment(), "node": node_name()}}

    def offer(
        self, j: int, rate: float, count: int, seed: int, first: int, options: LoadOptions
    ) -> Traffic:
        """Offer ``count`` requests at ``rate``/s (open loop) to configuration ``j``'s pool."""
        schedule = arrivals(
            rate, count, kind=options.arrivals, burstiness=options.burstiness, seed=seed
        )
        run = open_loop(
            self.pools[j],
            schedule,
            timeout_s=options.timeout_s,
            queue_size=options.queue_size,
            first_request=first,
        )
        # with [run] otel: this actor's completed requests, now that none is being timed
        self.pipelines[j].export_traces([r for r in run.records if r is not None])
        return run

    def summary(self, j: int, options: LoadOptions, repeats: int, *runs: Traffic) -> dict[str, Any]:
        """Load-record fields of configuration ``j`` from every actor's runs (``repeats`` rounds of them)."""
        per = len(runs) // repeats
        merged = [merge_concurrent(runs[r * per : (r + 1) * per]) for r in range(repeats)]
        pipe = self.pipelines[j]
        fields = summarize(
            merged,
            pipe,
            timeout_s=options.timeout_s,
            slo_ms=options.slo_ms,
            lag_warn_us=options.lag_warn_us,
        )
        return {
            "label": pipe.label,
            **fields,
            "simulated": list(pipe.simulated),
            "caveats": list(pipe.caveats),
            "config": pipe.config.to_dict(),
        }

    def close(self) -> None:
        self._stack.close()


def _plan(
    executor: RayExecutor, actors: int | None, workers: int | None, request_threads: int
) -> list[tuple[dict[str, Any], int]]:
    """Per actor: its Ray options (CPUs, placement) and its worker count."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = executor.nodes()
    if not nodes:
        raise ConfigError("the Ray cluster has no node with CPUs")
    plan: list[tuple[dict[str, Any], int]] = []
    if actors is None:  # one per node, pinned to it, by default a worker per core
        for node in nodes:
            n = workers or max(1, int(node["cpus"]) // request_threads)
            if n * request_threads > node["cpus"]:
                raise ConfigError(
                    f"a load generator with {n} workers × {request_threads} threads needs "
                    f"{n * request_threads} CPUs; node {node['host']} has {node['cpus']:g}"
                )
            where = NodeAffinitySchedulingStrategy(node["id"], soft=False)
            plan.append(({"num_cpus": n * request_threads, "scheduling_strategy": where}, n))
    else:  # spread; by default the cluster's cores shared out among them
        total = sum(int(node["cpus"]) for node in nodes)
        n = workers or max(1, total // (actors * request_threads))
        plan = [({"num_cpus": n * request_threads, "scheduling_strategy": "SPREAD"}, n)] * actors
        if actors * n * request_threads > total:
            raise ConfigError(
                f"{actors} load generators × {n} workers × {request_threads} threads need "
                f"{actors * n * request_threads} CPUs; the cluster has {total}"
            )
    for _, n in plan:
        executor.check_fits(n * request_threads, "load generator")
    return plan


def ray_load_points(
    executor: RayExecutor,
    configs: Configs,
    rates: Sequence[float],
    *,
    actors: int | None = None,
    workers: int | None = None,
    worker_kind: str = "thread",
    warmup: int = 20,
    options: LoadOptions | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Open-loop load from Ray actors: one load record per (rate, configuration).

    ``actors`` load generators (:class:`LoadGenerator`; default one per node,
    pinned to it) each offer ``rate / actors`` with their own pipeline and
    ``workers`` workers (default: their node's cores, or the cluster's cores
    shared out), asking Ray for ``workers × [run] threads`` CPUs. Per level
    and configuration every actor's requests are merged into one record
    (:func:`ragbench.traffic.merge_concurrent`: each request timed on the
    node that sent it, no clocks compared across nodes); configurations take
    turns, as in :func:`ragbench.traffic.load_points`. Each actor's arrivals
    have their own seed, so their schedules do not coincide.
    """
    opts = options or LoadOptions()
    ray = executor.ray
    request_threads = max(int(cfg["run"]["threads"] or 1) for cfg, _ in configs)
    plan = _plan(executor, actors, workers, request_threads)
    remote = ray.remote(LoadGenerator)
    handles = [remote.options(**ray_options).remote() for ray_options, _ in plan]
    emit = Collector(on_point, progress)
    try:
        about = _get(
            ray,
            [
                h.setup.remote(
                    list(configs),
                    worker_kind=worker_kind,
                    workers=n,
                    warmup=warmup,
                    build_threads=ray_options["num_cpus"],
                )
                for h, (ray_options, n) in zip(handles, plan, strict=True)
            ],
        )
        shape = {
            "executor": "ray",
            "actors": len(handles),
            "worker_kind": worker_kind,
            "workers": sum(n for _, n in plan),
            "workers_per_actor": [n for _, n in plan],
            "nodes": [a["node"] for a in about],
            "node": ",".join(sorted({a["node"] for a in about})),
        }
        first = 0
        for rate in rates:
            runs, first = _offer_level(ray, handles, len(configs), rate, opts, first)
            for j in range(len(configs)):
                fields = _get(ray, handles[0].summary.remote(j, opts, opts.repeat, *runs[j]))
                emit(
                    new_record("load", _load_fields(fields, shape, rate, opts), env=about[0]["env"])
                )
    except BaseException:
        for h in handles:
            ray.kill(h)
        raise
    _stop(ray, handles)
    return emit.records


def _offer_level(
    ray: Any, handles: list[Any], n_configs: int, rate: float, opts: LoadOptions, first: int
) -> tuple[list[list[Any]], int]:
    """Every actor offers its share of ``rate`` to each configuration in turn, ``repeat`` rounds."""
    share = rate / len(handles)
    count = max(1, int(round(share * opts.duration_s)))
    runs: list[list[Any]] = [[] for _ in range(n_configs)]
    for _ in range(opts.repeat):  # repetitions take turns too
        for j in range(n_configs):
            refs = [
                # seed * 1000 + a: every actor's arrivals differ, and stay reproducible
                h.offer.remote(j, share, count, opts.seed * 1000 + a, first + a * count, opts)
                for a, h in enumerate(handles)
            ]
            ray.wait(refs, num_returns=len(refs), fetch_local=False)  # the next takes its turn
            runs[j] += refs
            first += count * len(handles)
    return runs, first


def _load_fields(
    fields: Mapping[str, Any], shape: Mapping[str, Any], rate: float, opts: LoadOptions
) -> dict[str, Any]:
    return {
        "label": fields["label"],
        "mode": "open",
        **shape,
        "arrivals": opts.arrivals,
        "burstiness": opts.burstiness,
        "offered_qps": float(rate),
        "concurrency": None,
        "duration_s": opts.duration_s,
        "timeout_s": opts.timeout_s,
        "queue_size": opts.queue_size,
        **{k: v for k, v in fields.items() if k not in ("label", "config", "simulated")},
        "simulated": fields["simulated"],
        "config": fields["config"],
    }


def _get(ray: Any, refs: Any) -> Any:
    try:
        return ray.get(refs)
    except ray.exceptions.RayError as exc:
        raise_cause(ray, exc)


def _stop(ray: Any, handles: list[Any]) -> None:
    """Close every actor (its pools, pipelines and servers), then end it."""
    closing = [h.close.remote() for h in handles]
    with contextlib.suppress(Exception):
        ray.wait(closing, num_returns=len(closing), timeout=STOP_WAIT_S)
    for h in handles:
        ray.kill(h)
