"""One versioned schema per record kind, as ``msgspec`` Structs: what results files hold.

Every record names its schema, ``ragbench.<kind>/<version>`` (``ragbench.run/1``).
:data:`SCHEMAS` maps each (kind, version) to the Struct that version is
written and read with; :data:`CURRENT` is the version this ragbench writes.
A record is checked against its Struct when it is written
(:func:`ragbench.results.records.append_record`) and when it is read
(:func:`check_record`): a field of the wrong type is an error naming it; a
record of a newer version than this ragbench knows is refused with a message
saying so, and an older one is read with its own version's Struct (and
brought up to date by :data:`UPGRADES`, when a version changes a field).

Fields are optional (records written before a field existed, or partial
records a driver stamps later) and a field a Struct does not name is kept:
a minor addition does not change the version; renaming, removing or
retyping a field does. The JSON Schema of every kind comes from these
Structs (:func:`records_schema`, ``ragbench schema records``).

Readers take a stored record as its kind's current Struct with
:func:`read_struct` (the same checks, upgrades and refusals; a field the
record lacks is None, and :func:`need` names one a reader cannot do
without). Fields several kinds share live in :class:`PipelineRecord` (run,
load) and :class:`IndexRecord` (sweep, scale, stream); ``diff`` records
(:class:`DiffRecord`) are what ``ragbench diff A B --out F`` appends, ``frontier`` records
(:class:`FrontierRecord`) what ``ragbench frontier`` appends after its run records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

import msgspec
from msgspec import Struct

from ..errors import RecordError

__all__ = [
    "CURRENT",
    "SCHEMAS",
    "UPGRADES",
    "RecordError",
    "check_record",
    "need",
    "read_struct",
    "records_schema",
    "schema_name",
    "schema_version",
]

T = TypeVar("T")
Num = int | float | None  # a statistic (an int stays an int): NaN if nothing measured, None if n/a
Obj = dict[str, Any]


class Record(Struct, kw_only=True, frozen=True):
    """What every record carries: its schema, kind, time, the node and environment it was measured on."""

    schema: str
    kind: str
    time: str | None = None
    node: str | None = None
    env: Obj | None = None


class JudgedAnswers(Struct, kw_only=True, frozen=True):
    """Answer quality against the dataset's judged answers (qrels), as :func:`ragbench.judged.summary` writes it.

    Means over the judged queries measured (each query's requests averaged
    first) with 95 % bootstrap intervals over those queries; ``depth``: the
    places recall@100 was computed on (``min(100, results returned)``);
    ``per_query``: measure -> each request's (run, load) or query's (sweep)
    value, NaN where the query has no relevant passage. A record of a dataset
    without qrels has no ``judged`` field.
    """

    qrels: str | None = None
    queries: int | None = None  # judged queries measured (with a relevant passage)
    measured: int | None = None  # distinct queries measured
    depth: int | None = None
    gain: str | None = None  # "linear": nDCG's gain is the grade
    ndcg_at_10: Num = None
    ndcg_at_10_ci: list[Num] | None = None
    mrr_at_10: Num = None
    mrr_at_10_ci: list[Num] | None = None
    recall_at_100: Num = None
    recall_at_100_ci: list[Num] | None = None
    per_query: dict[str, list[float]] | None = None
    # --rebuilds N (ragbench.judged.merge_builds): each build's mean; the intervals are the envelope
    rebuilds: int | None = None
    ndcg_at_10_builds: list[float] | None = None
    mrr_at_10_builds: list[float] | None = None
    recall_at_100_builds: list[float] | None = None


class PipelineRecord(Record, frozen=True):
    """The fields run and load records share: the pipeline measured, its stages, recall, caveats."""

    label: str | None = None
    config: Obj | None = None
    stages: list[str] | None = None
    repeats: int | None = None
    k: int | None = None
    recall_at_k: Num = None
    recall_p10: Num = None
    recall_zero: int | None = None  # requests that found none of the true top k
    judged: JudgedAnswers | None = None  # nDCG@10, MRR@10, recall@100 against the qrels
    simulated: list[str] | None = None
    caveats: list[str] | None = None


class IndexRecord(Record, frozen=True):
    """The fields index records share (sweep, scale, stream): the index, its data, its recall."""

    dataset: str | None = None
    n: int | None = None
    dim: int | None = None
    metric: str | None = None
    k: int | None = None
    index: str | None = None
    build: Obj | None = None
    query: Obj | None = None
    build_s: Num = None
    recall: Num = None
    recall_p10: Num = None
    recall_zero: int | None = None  # queries that found none of the true top k
    recall_per_query: list[float] | None = None
    judged: JudgedAnswers | None = None  # nDCG@10, MRR@10, recall@100 against the qrels


class RunRecord(PipelineRecord, frozen=True):
    """``ragbench.run/1``: one pipeline run, per-stage statistics and the raw per-request samples."""

    kind: Literal["run"] = "run"
    dataset: Obj | None = None
    info: Obj | None = None
    summary: dict[str, Obj] | None = None
    total: Obj | None = None
    intervals: str | None = None
    requests: int | None = None
    payload_bytes_p50: Num = None
    wire_bytes_p50: Num = None
    cache_hit_rate: Num = None
    setup_s: dict[str, float] | None = None
    cache_events: list[Obj] | None = None
    error: str | None = None
    samples_ns: dict[str, list[int]] | None = None
    recall: list[float] | None = None
    payload_bytes: list[int] | None = None
    wire_bytes: list[int] | None = None
    prompt_tokens: list[int] | None = None
    cache: Obj | None = None
    repetition: list[int] | None = None
    model_prompt_tokens: list[int] | None = None
    model_prompt_tokens_p50: Num = None
    next_tokens: int | None = None
    inter_token: Obj | None = None
    inter_token_ns: list[list[int]] | None = None
    cpu_total: Obj | None = None
    cpu_samples_ns: dict[str, list[int]] | None = None
    server_cpu_ns: list[int] | None = None  # each request's database-server CPU (pgvector's own)
    server_cpu_p50_us: Num = None
    connection: dict[str, Obj] | None = None  # a new connection per request: its parts
    connection_ns: dict[str, list[int]] | None = None
    interleaved: bool | None = None  # False: each configuration in its own task
    # --start-together DIR:N: the folder, N, processes arrived, announced and started (UTC),
    # waited_s (between the set-up and the warm-up)
    start_together: Obj | None = None
    cache_state: str | None = None  # "after-stages": each search inside its request
    # compare --rebuilds N: recall over N builds (seed + i), its spread and envelope interval
    rebuilds: int | None = None
    recall_builds: list[float] | None = None
    recall_build_spread: Num = None
    recall_ci: list[Num] | None = None


class IndexPoint(IndexRecord, frozen=True):
    """The fields sweep and scale points share: the index, its data and its measured point."""

    memory_bytes: Num = None
    memory_method: str | None = None  # procstat.METHOD (sweeps.memory); None: the engine's own
    engine_bytes: Num = (
        None  # the index's own memory_bytes() (its serialized size, folder, relations)
    )
    bytes_per_vector: Num = None
    code_bytes_per_vector: Num = None
    rescore_bytes_per_vector: Num = None
    rescore_bytes: Num = (
        None  # the float vectors re-scoring reads from (n × rescore_bytes_per_vector)
    )
    rescore: int | None = None
    p50_us: Num = None
    p95_us: Num = None
    p99_us: Num = None
    mean_us: Num = None
    qps_single: Num = None
    qps_batch: Num = None
    batch_threads: int | None = None
    queries: int | None = None
    search_p50_us: Num = None
    latency_ns: list[int] | None = None
    p50_us_ci: list[float] | None = None
    p99_us_ci: list[float] | None = None
    repeats: int | None = None
    repetition: list[int] | None = None
    recall_ci: list[Num] | None = None
    recall_before_rescore: Num = None
    recall_before_rescore_p10: Num = None
    rescore_p50_us: Num = None
    build_info: Obj | None = None
    rebuilds: int | None = None
    warmup: int | None = None  # untimed searches before the point's timed ones
    search_threads: int | None = None  # threads one query's search may use (None: not limited)
    cache_state: str | None = None  # "hot": the point's searches back to back
    cpu_p50_us: Num = None  # p50 of each query's thread CPU time (time.thread_time_ns)
    cpu_ns: list[int] | None = None  # each query's thread CPU time, as latency_ns
    server_cpu_ns: list[int] | None = None  # each query's database-server process CPU (pgvector)
    server_cpu_p50_us: Num = None


class SweepRecord(IndexPoint, frozen=True):
    """``ragbench.sweep/1``: one (index, build, query parameters[, filter strategy, selectivity]) point."""

    kind: Literal["sweep"] = "sweep"
    # what embedded the vectors (``minilm:onnx-int8+query-only``; None: the dataset's own)
    embedder: str | None = None
    embed_agreement: Obj | None = None  # against MiniLM on torch: top-10 overlap, query cosine
    strategy: str | None = None
    selectivity: Num = None
    filter: Obj | None = None
    filter_violations: int | None = None
    filter_cliff: Obj | None = None
    build_given: Obj | None = None  # the --build values of the point (the rest: defaults)
    effective_query: Obj | None = None  # the query parameters that ran, when not ``query``
    recall_target: Num = None  # the lowest --recall-target: cliffs, the cheapest point
    recall_targets: list[float] | None = None  # every --recall-target: the iso-recall reading
    grid: str | None = None  # "refined": the default grid chose the knob's values (sweeps.grid)
    grid_knob: str | None = None  # the query parameter it refined (ef, nprobe, nprobes)


class ScaleRecord(IndexPoint, frozen=True):
    """``ragbench.scale/1``: one (index, corpus size) point, tuned to a target recall."""

    kind: Literal["scale"] = "scale"
    target_recall: Num = None
    reached: bool | None = None


class LoadRecord(PipelineRecord, frozen=True):
    """``ragbench.load/1``: one (configuration, offered rate or concurrency) load level."""

    kind: Literal["load"] = "load"
    mode: str | None = None
    worker_kind: str | None = None
    workers: int | None = None
    pinned: bool | None = None
    arrivals: str | None = None
    burstiness: Num = None
    offered_qps: Num = None
    concurrency: int | None = None
    duration_s: Num = None
    timeout_s: Num = None
    queue_size: int | None = None
    scheduled: int | None = None
    completed: int | None = None
    timed_out: int | None = None
    rejected: int | None = None
    failed: int | None = None
    achieved_qps: Num = None
    window_s: Num = None
    # open loop: what the schedule actually offered, and the backlog it ended with
    schedule_span_s: Num = None
    offered_actual_qps: Num = None
    last_arrival_wait_s: Num = None
    response_p50_us: Num = None
    response_p90_us: Num = None
    response_p99_us: Num = None
    response_max_us: Num = None
    response_all_p50_us: Num = None
    response_all_p90_us: Num = None
    response_all_p99_us: Num = None
    response_all_max_us: Num = None
    service_p50_us: Num = None
    service_p99_us: Num = None
    generator_lagged: bool | None = None
    generator_ok: bool | None = None
    generator_note: str | None = None
    errors: list[Any] | None = None
    stage_p50_us: dict[str, Num] | None = None
    stage_share: dict[str, Num] | None = None
    retrieve_parts: dict[str, dict[str, float]] | None = None  # an index behind a client
    index_connections: int | None = None  # a database index's connections (thread pools)
    cpu_share: dict[str, Num] | None = None
    cpu_per_request_us: Num = None
    response_p50_us_ci: list[float] | None = None
    response_p99_us_ci: list[float] | None = None
    dispatch_delay_p50_us: Num = None
    dispatch_delay_p99_us: Num = None
    idle_dispatch_delay_p99_us: Num = None
    ttft_p50_us: Num = None
    ttft_p99_us: Num = None
    loop_lag_p50_us: Num = None
    loop_lag_p99_us: Num = None
    slo_ms: Num = None
    goodput_qps: Num = None
    tasks_per_worker: int | None = None
    offload: str | None = None
    actors: int | None = None
    nodes: list[str] | None = None
    recall_per_query: list[float] | None = None


class StreamRecord(IndexRecord, frozen=True):
    """``ragbench.stream/1``: one checkpoint of a stream of inserts and deletes beside queries."""

    kind: Literal["stream"] = "stream"
    initial: int | None = None
    options: Obj | None = None
    checkpoint: int | None = None
    elapsed_s: Num = None
    live: int | None = None
    inserted_total: int | None = None
    deleted_total: int | None = None
    search: Obj | None = None
    insert: Obj | None = None
    delete: Obj | None = None
    freshness: Obj | None = None
    deleted_returned: int | None = None


class DiffRecord(Record, frozen=True):
    """``ragbench.diff/1``: one compared (configuration, part) of ``ragbench diff A B --out F``.

    ``a`` and ``b`` are the statistic ``stat`` of each side in ns (sweep, run
    and load latencies alike); ``ratio`` is B / A with its 95 % bootstrap
    interval ``ratio_low``..``ratio_high`` (NaN without raw samples on a side),
    and ``verdict`` what ``ragbench diff`` concluded at ``threshold``; with ``--paired``
    the ratio and interval come from ``pairs`` pairs of runs (a paired t interval).
    """

    kind: Literal["diff"] = "diff"
    key: str | None = None
    part: str | None = None
    compared: str | None = None  # the records compared: run, sweep, load, stream, pytest-benchmark
    stat: str | None = None
    a: Num = None
    b: Num = None
    ratio: Num = None
    ratio_low: Num = None
    ratio_high: Num = None
    threshold: Num = None
    verdict: str | None = None
    a_file: str | None = None
    b_file: str | None = None
    a_runs: int | None = None
    b_runs: int | None = None
    pairs: int | None = None  # diff --paired: pairs of runs the ratio came from (None: unpaired)
    env_differences: list[str] | None = None


class FrontierPoint(Struct, kw_only=True, frozen=True):
    """One configuration of a frontier: total latency before the first token (µs) and nDCG@10."""

    label: str
    p50_us: Num = None
    p50_us_ci: list[Num] | None = None
    p99_us: Num = None
    p99_us_ci: list[Num] | None = None
    ndcg_at_10: Num = None
    ndcg_at_10_ci: list[Num] | None = None
    cost_only: str | None = None  # why it is not ranked on quality ("cost only: random weights")
    pareto: bool = False
    requests: int | None = None  # measured requests of the configuration
    stages_p50_us: dict[str, Num] | None = None  # each stage's p50 (µs), in the run's order


class FrontierRecord(Record, frozen=True):
    """``ragbench.frontier/1``: what ``ragbench frontier`` concluded from the run records before it.

    ``pareto_stat`` names the latency statistic of the Pareto set (p50); ``best``,
    ``cheapest`` (the lowest p50 within ``within`` of the best nDCG@10) and
    ``best_under_budget`` (the highest nDCG@10 with p99 <= ``p99_budget_ms``) are labels of
    ``points``; ``cost_only`` the labels never ranked on quality (:mod:`ragbench.results.frontier`).
    """

    kind: Literal["frontier"] = "frontier"
    dataset: str | None = None
    qrels: str | None = None
    pareto_stat: str | None = None
    within: Num = None
    p99_budget_ms: Num = None
    best: str | None = None
    cheapest: str | None = None
    best_under_budget: str | None = None
    pareto: list[str] | None = None
    cost_only: list[str] | None = None
    points: list[FrontierPoint] | None = None


R = TypeVar("R", bound=Record)

#: (kind, version) → the Struct that version of the kind is written and read with.
SCHEMAS: dict[tuple[str, int], type[Record]] = {
    ("run", 1): RunRecord,
    ("sweep", 1): SweepRecord,
    ("scale", 1): ScaleRecord,
    ("load", 1): LoadRecord,
    ("stream", 1): StreamRecord,
    ("diff", 1): DiffRecord,
    ("frontier", 1): FrontierRecord,
}

#: The Struct of each kind's current version → its kind.
_KIND_OF: dict[type[Record], str] = {}

#: Kind → the version this ragbench writes.
CURRENT: dict[str, int] = {kind: v for kind, v in sorted(SCHEMAS)}
_KIND_OF.update({SCHEMAS[(kind, v)]: kind for kind, v in CURRENT.items()})

#: (kind, version) → the function turning a record of that version into one of the next.
UPGRADES: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

_SCHEMA = re.compile(r"^ragbench\.(?P<kind>[a-z]+)/(?P<version>[0-9]{1,6})$")


def schema_name(kind: str, version: int | None = None) -> str:
    """``ragbench.<kind>/<version>`` (the current version by default)."""
    return f"ragbench.{kind}/{CURRENT[kind] if version is None else version}"


def schema_version(schema: Any) -> tuple[str, int] | None:
    """(kind, version) of a schema name such as ``ragbench.run/1``; None for anything else."""
    m = _SCHEMA.match(schema) if isinstance(schema, str) else None
    return (m["kind"], int(m["version"])) if m else None


def check_record(rec: Mapping[str, Any]) -> dict[str, Any]:
    """``rec`` checked against the Struct of its schema and brought to the current version.

    Raises :class:`RecordError` for a record that is not a ragbench record,
    is of a newer version than this ragbench reads ("upgrade ragbench"), or
    holds a field of the wrong type (named). Fields the Struct does not know
    are kept; nothing is filled in, so a reader sees what was written.
    """
    parsed = schema_version(rec.get("schema"))
    kind = rec.get("kind")
    if parsed is None or parsed[0] != kind or kind not in CURRENT:
        known = ", ".join(schema_name(k) for k in CURRENT)
        raise RecordError(
            f"not a ragbench record (kind={kind!r}, schema={rec.get('schema')!r}); known: {known}"
        )
    version = parsed[1]
    if version > CURRENT[kind]:
        raise RecordError(
            f"record written by a newer ragbench ({rec['schema']}; this one reads "
            f"{schema_name(kind)} and older): upgrade ragbench to read it"
        )
    cls = SCHEMAS.get((kind, version))
    if cls is None:
        raise RecordError(f"{rec['schema']} is not a version this ragbench reads")
    validate(rec, cls)
    out = dict(rec)
    while version < CURRENT[kind]:
        out = UPGRADES[(kind, version)](out)
        version += 1
    return out


def validate(rec: Mapping[str, Any], cls: type[Record] | None = None) -> None:
    """Raise :class:`RecordError` naming the field of ``rec`` that does not fit its Struct."""
    if cls is None:
        parsed = schema_version(rec.get("schema"))
        cls = SCHEMAS.get(parsed) if parsed else None
        if cls is None:
            return
    convert(rec, cls)


def convert(rec: Mapping[str, Any], cls: type[R]) -> R:
    """``rec`` as an instance of ``cls``, or :class:`RecordError` naming the field that does not fit.

    A record made in this process may hold numpy scalars or tuples: they are
    read as the JSON values they are written as.
    """
    try:
        try:
            return msgspec.convert(rec, cls, str_keys=True)
        except msgspec.ValidationError:
            plain = msgspec.to_builtins(rec, enc_hook=_plain, str_keys=True)
            return msgspec.convert(plain, cls, str_keys=True)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("`", "")
        msg, _, where = text.partition(" - at $")
        field = where.lstrip(".")
        what = f"field {field!r} has the wrong type" if field else "wrong shape"
        raise RecordError(
            f"{rec.get('kind')} record ({rec.get('schema')}): {what}: {msg[:1].lower()}{msg[1:]}"
        ) from None


def _plain(obj: Any) -> Any:
    """A value msgspec does not know (numpy scalar or array, path) as the JSON value it is written as."""
    tolist = getattr(obj, "tolist", None)
    return tolist() if tolist is not None else str(obj)


def read_struct(rec: Mapping[str, Any] | Record, cls: type[R]) -> R:
    """A stored record (a dict) as the Struct of its kind's current version: how readers take records.

    Older versions are read with their own Struct and upgraded, newer ones
    refused, a field of the wrong type named (:func:`check_record`);
    ``cls`` is the Struct the reader expects (a record of another kind is a
    :class:`RecordError`). A field the record lacks is None on the Struct,
    never a made-up value; a Struct passes through.
    """
    if isinstance(rec, Record):
        if not isinstance(rec, cls):
            raise RecordError(f"a {rec.kind} record where a {_kind_of(cls)} record was expected")
        return rec
    if "schema" not in rec and cls in _KIND_OF and rec.get("kind", _KIND_OF[cls]) == _KIND_OF[cls]:
        # a record built in memory and not stamped yet: read as the current version of cls
        # (files are read through check_record, which refuses a record without its schema)
        kind = _KIND_OF[cls]
        return convert({**rec, "schema": schema_name(kind), "kind": kind}, cls)
    parsed = schema_version(rec.get("schema"))
    if parsed is not None and "kind" not in rec:  # the schema names the kind
        rec = {**rec, "kind": parsed[0]}
    if parsed is not None and parsed[0] == rec.get("kind") and CURRENT.get(parsed[0]) == parsed[1]:
        out = convert(rec, SCHEMAS[parsed])  # the current version: one conversion
    else:
        upgraded = check_record(rec)
        out = convert(upgraded, SCHEMAS[(upgraded["kind"], CURRENT[upgraded["kind"]])])
    if not isinstance(out, cls):
        raise RecordError(f"a {out.kind} record where a {_kind_of(cls)} record was expected")
    return out


def _kind_of(cls: type[Record]) -> str:
    return _KIND_OF.get(cls, cls.__name__)


def need(value: T | None, name: str) -> T:
    """``value``, or ``KeyError(name)`` when a record lacks a field its reader cannot do without."""
    if value is None:
        raise KeyError(name)
    return value


def records_schema(kind: str | None = None) -> dict[str, Any]:
    """The JSON Schema of the current version of one record kind, or of every kind (``oneOf``)."""
    kinds = [kind] if kind is not None else list(CURRENT)
    structs = [SCHEMAS[(k, CURRENT[k])] for k in kinds]
    refs, components = msgspec.json.schema_components(structs, ref_template="#/$defs/{name}")
    doc: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    doc.update(refs[0] if len(refs) == 1 else {"oneOf": list(refs)})
    doc["$defs"] = components
    for k, cls in zip(kinds, structs, strict=True):
        props = components[cls.__name__]["properties"]
        props["schema"] = {"const": schema_name(k)}
    return doc
