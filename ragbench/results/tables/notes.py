"""The lines under a table: simulated timings, caveats, hardware, filters, the retrieve split, builds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...rerankers import CAVEAT_PREFIX
from ..records import caveats_of
from ..schema import IndexPoint, LoadRecord, PipelineRecord, Record, RunRecord, read_struct
from .cells import num

__all__ = [
    "SETUP_LABELS",
    "build_note",
    "connection_note",
    "filter_note",
    "hardware_note",
    "index_family",
    "record_caveats",
    "typed",
    "llm_note",
    "retrieve_parts_note",
    "simulated_note",
    "simd_level",
    "stage_label",
]


SETUP_LABELS = {
    "dataset_load": "dataset load",
    "model_load": "model load",
    "corpus_vectors": "corpus vectors",
    "query_vectors": "query vectors",
    "index_build": "index build",
    "exact_neighbors": "exact neighbours",
    "query_filters": "query filters",
    "jit_compile": "JIT compile",
    "transport_start": "transport start",
    "generator_start": "LLM start",
    "warmup": "warm-up",
}


def typed(records: Iterable[Mapping[str, Any] | Record]) -> list[Record]:
    """Records of any kinds as their kinds' Structs (:func:`ragbench.results.schema.read_struct`)."""
    return [read_struct(r, Record) for r in records]


def record_caveats(records: Iterable[Record]) -> list[str]:
    """Every caveat the run and load records carry (a random-weight LLM, ...), once each, sorted."""
    return caveats_of(records)  # only run and load records have caveats


def simulated_note(records: Iterable[Mapping[str, Any] | Record]) -> str:
    """``  [SIMULATED: ...]`` and each caveat (``  [RANDOM WEIGHTS ...]``) of ``records``, for a title."""
    recs = typed(records)
    sim = sorted({s for r in recs if isinstance(r, PipelineRecord) for s in r.simulated or []})
    out = f"  [SIMULATED: {', '.join(sim)}]" if sim else ""
    return out + "".join(f"  [{c}]" for c in record_caveats(recs))


def _generate_label(records: Sequence[Record], short: bool = False) -> str:
    """``generate``, marked when its timings are simulated or its model has random weights."""
    if any(isinstance(r, PipelineRecord) and r.simulated for r in records):
        return "generate (sim)" if short else "generate (simulated)"
    if any(not c.startswith(CAVEAT_PREFIX) for c in record_caveats(records)):
        return "generate (rand. w.)" if short else "generate (random weights)"
    return "generate"


def stage_label(
    name: str, records: Sequence[Mapping[str, Any] | Record], short: bool = False
) -> str:
    """A stage's column or row name, marked when its timings or its model say so."""
    recs = typed(records)
    if name == "generate":
        return _generate_label(recs, short)
    if name == "rerank" and any(c.startswith(CAVEAT_PREFIX) for c in record_caveats(recs)):
        return "rerank (rand. w.)" if short else "rerank (random weights)"
    return name


def llm_note(rec: Mapping[str, Any] | RunRecord) -> str:
    """The LLM's own prompt token count and the inter-token latency after the first token ("" if none)."""
    run = read_struct(rec, RunRecord)
    parts = []
    if run.model_prompt_tokens_p50 is not None:
        approx = run.prompt_tokens or []
        approx_p50 = sorted(approx)[len(approx) // 2] if approx else None
        parts.append(
            f"prompt tokens p50: {num(run.model_prompt_tokens_p50)} by the model's tokenizer, "
            f"{num(approx_p50)} by the prompt budget's approximate count"
        )
    itl = run.inter_token
    if itl:
        parts.append(
            f"after the first token (not in the table): {run.next_tokens} next tokens, "
            f"inter-token p50 {num(itl.get('p50_us'))} µs, p99 {num(itl.get('p99_us'))} µs "
            "(greedy, KV cache)"
        )
    return "\n".join(parts)


def simd_level(flags: Sequence[str]) -> str:
    """The widest vector extension of a CPU's flags: ``AVX-512``, ``AVX2``, ``SSE4.2`` or ``?``."""
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "SSE4.2" if "sse4_2" in flags else "?"


def machine_line(records: Sequence[Record]) -> str:
    """``machine: AMD EPYC, 2 cores, AVX-512; load average 0.4-0.9 when the rows were written``.

    The load is the 1-minute load average each record's environment took when
    it was written; at or above the core count the cores were shared with other
    work while measuring (wall times read high, long calls most).
    """
    env = records[0].env or {}
    cores = env.get("cores")
    line = f"machine: {env.get('cpu') or '?'}, {cores or '?'} cores, {simd_level(env.get('cpu_flags') or [])}"
    loads = [
        float(la[0])
        for r in records
        if isinstance(la := (r.env or {}).get("load_avg"), list) and la
    ]
    if not loads:
        return line + "; load not recorded"
    low, high = min(loads), max(loads)
    span = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f}"
    line += f"; 1-min load average {span} when the rows were written"
    if isinstance(cores, int) and high >= cores:
        line += f" (≥ {cores} cores: other work shared the machine)"
    return line


def hardware_note(records: Sequence[Mapping[str, Any] | Record]) -> str:
    """The machine line under a table, or a note when its rows were measured on different machines.

    A machine is a record's ``node`` with its environment's CPU model and
    cores; load records offered from several Ray nodes say so too.
    """
    recs = typed(records)
    machines: dict[tuple[str, str, Any], int] = {}
    for r in recs:
        env = r.env or {}
        key = (
            str(r.node or env.get("node") or "?"),
            str(env.get("cpu") or "?"),
            env.get("cores"),
        )
        machines[key] = machines.get(key, 0) + 1
    lines = []
    if len(machines) == 1:
        lines.append(machine_line(recs))
    if len(machines) > 1:
        same_cpu = len({(cpu, cores) for _, cpu, cores in machines}) == 1
        what = "different nodes with the same CPU" if same_cpu else "different hardware"
        lines.append(
            f"NOTE: rows measured on {what}: "
            + "; ".join(
                f"{node} ({cpu}, {cores} cores) {n} row(s)"
                for (node, cpu, cores), n in machines.items()
            )
        )
    senders = sorted({str(n) for r in recs if isinstance(r, LoadRecord) for n in (r.nodes or [])})
    if len(senders) > 1:
        lines.append(
            f"load offered from {len(senders)} nodes ({', '.join(senders)}); "
            "each request timed on the node that sent it"
        )
    return "\n".join(lines)


def connection_note(parts: Mapping[str, Mapping[str, Any]]) -> str:
    """One line on a transport's per-request connection set-up (``keep_alive = false``)."""
    cells = ", ".join(f"{name} {num(s.get('p50_us'))} µs" for name, s in parts.items())
    return f"transport, new connection per request (p50, inside the transport stage): {cells}"


def filter_note(filt: Mapping[str, Any]) -> str:
    """One line on a run's filter: what was asked, the selectivity reached, the strategy."""
    if filt.get("from") == "queries":
        asked = "filters from the queries file"
    else:
        corr = "correlated" if filt.get("correlated") else "random"
        asked = (
            f"filter on {filt.get('attribute')} at selectivity {filt.get('selectivity')} ({corr})"
        )
    line = (
        f"{asked}: achieved mean {filt['achieved_mean']:.4g} "
        f"[{filt['achieved_min']:.4g}–{filt['achieved_max']:.4g}], strategy {filt.get('strategy')}"
    )
    empty = filt.get("empty_rows") or []
    if empty:
        shown = ", ".join(str(r) for r in empty[:5]) + (", ..." if len(empty) > 5 else "")
        line += (
            f"; {len(empty)} quer{'y' if len(empty) == 1 else 'ies'} (row {shown}) "
            f"match{'es' if len(empty) == 1 else ''} no row: empty results, recall 1.00 "
            "(nothing to find)"
        )
    return line


#: What each known split of an index's search is, by its part names (``info.search_parts``).
_PARTS_WHAT = {
    ("send", "server", "decode"): "the index's client",
    ("tokenize", "score", "decode"): "the lexical engine: query words, scoring, hits to arrays",
    ("dense", "lexical", "fuse"): "the two retrievers and the fusion",
}


def retrieve_parts_note(rec: Mapping[str, Any] | RunRecord) -> str | None:
    """``retrieve p50 split (what): send 12 µs, server 480 µs, decode 9 µs``, or None (no split).

    ``what`` says whose parts they are: an index behind a client (``send`` /
    ``server`` / ``decode``), a lexical engine (``tokenize`` / ``score`` /
    ``decode``) or a hybrid (``dense`` / ``lexical`` / ``fuse``); an unknown
    split is shown without it.
    """
    run = read_struct(rec, RunRecord)
    parts = (run.info or {}).get("retrieve_parts")
    if not parts:
        return None
    text = ", ".join(f"{name} {parts[name]['p50_ns'] / 1e3:,.1f} µs" for name in parts)
    what = _PARTS_WHAT.get(tuple(parts))
    head = "retrieve p50 split" + (f" ({what})" if what else "")
    return f"{run.label or 'run'}: {head}: {text}"


def _build_of(rec: Record) -> Mapping[str, Any] | None:
    """How a record's index was built: ``build_info`` (sweep, scale) or ``info.index.build`` (run)."""
    got: Any = None
    if isinstance(rec, IndexPoint):
        got = rec.build_info
    elif isinstance(rec, RunRecord):
        got = ((rec.info or {}).get("index") or {}).get("build")
    return got if isinstance(got, Mapping) else None


def build_note(records: Sequence[Mapping[str, Any] | Record]) -> str:
    """One line on how the indexes were built: deterministic or not, cached, rebuilt ("" if unknown)."""
    recs = typed(records)
    points = [r for r in recs if isinstance(r, IndexPoint)]
    builds = [b for b in (_build_of(r) for r in recs) if b is not None]
    if not builds:
        return ""
    # deterministic None: a backend that promises nothing either way (no DeclaresBuild)
    unknown = sum(1 for b in builds if b.get("deterministic") is None)
    known = [b for b in builds if b.get("deterministic") is not None]
    loose = [b for b in known if not b.get("deterministic")]
    if not known:
        text = "builds: determinism unknown (the backend does not say)"
    elif not loose:
        text = "builds: deterministic (one build thread, seeded: the same index every run)"
    else:
        # on every core (--fast-build), or on one thread by an engine that draws its own
        # random numbers (pgvector's HNSW levels come from the server's unseedable generator)
        fast = sum(1 for b in loose if int(b.get("threads") or 1) > 1)
        why = ["--fast-build: every core"] if fast else []
        why += ["an engine that cannot be seeded"] if fast < len(loose) else []
        what = f"NOT deterministic ({'; '.join(why)}; recall varies build to build)"
        if len(loose) == len(known):
            text = f"builds: {what}"
        else:
            text = f"builds: {len(loose)} of {len(known)} {what}, the rest deterministic"
    if unknown and known:
        text += f"; {unknown} of unknown determinism (the backend does not say)"
    cached = sum(1 for b in builds if b.get("cached"))
    if cached:
        text += f"; {cached} loaded from the index cache (build s: reused, no seconds of this run)"
    reps = max(int(r.rebuilds or 1) if isinstance(r, IndexPoint | RunRecord) else 1 for r in recs)
    if reps > 1:
        text += (
            f"; {reps} builds per point (seed + i): recall = their mean, recall ± = the envelope "
            "of the builds' 95 % intervals over queries"
        )
    elif any(r.recall_ci for r in points):
        text += "; recall ±: 95 % bootstrap interval over queries"
    return text


#: What each backend's index is, in a few words, for the tables that set engines side by side
#: (a "graph" engine beside an IVF one is not one kind of index). A backend whose kind depends on
#: a build parameter maps that parameter's values (``default``: the value when the build does
#: not give it); tests/results/test_index_family.py checks every registered backend has an
#: entry and every default is the backend's own, so a new backend adds its line here.
FAMILIES: dict[str, str | tuple[str, dict[str, str]]] = {
    "flat": "exact scan",
    "hnsw": "HNSW graph",
    "faiss-hnsw": "HNSW graph",
    "ivf": "IVF lists",
    "lsh": "LSH binary codes, exact scan",
    "minhash-lsh": "MinHash LSH buckets",
    "ivfpq": "IVF lists, PQ codes",
    "ivfpq-fs": "IVF lists, 4-bit PQ codes",
    "ivf-sq8": "IVF lists, 8-bit scalar codes",
    "hnsw-sq": "HNSW graph, 8-bit scalar codes",
    "hnsw-fp16": "HNSW graph, float16 vectors",
    "binary-flat": "binary codes, exact scan",
    "binary-hnsw": "HNSW graph, binary codes",
    "usearch": "HNSW graph",
    "qdrant-edge": "HNSW graph",
    "chroma": "HNSW graph",
    "pgvector": (
        "index",
        {"default": "hnsw", "hnsw": "HNSW graph", "ivfflat": "IVF lists", "flat": "exact scan"},
    ),
    "lancedb": (
        "index_type",
        {
            "default": "flat",
            "flat": "exact scan",
            "ivf_flat": "IVF partitions",
            "ivf_pq": "IVF partitions, PQ codes",
            "ivf_sq": "IVF partitions, scalar codes",
            "ivf_hnsw_sq": "IVF partitions, an HNSW graph in each, scalar codes",
            "ivf_hnsw_pq": "IVF partitions, an HNSW graph in each, PQ codes",
        },
    ),
    "bm25": "BM25 inverted index",
    "tantivy": "BM25 inverted index",
    "pg-fts": "PostgreSQL full-text GIN index",
    "hybrid": "dense and lexical, fused",
    "pg-hybrid": "dense and lexical, fused",
}


def index_family(
    backend: str, build: Mapping[str, Any] | None = None, search: Mapping[str, Any] | None = None
) -> str:
    """What kind of index ``backend`` built with ``build`` and searched with ``search`` is, e.g.
    ``"HNSW graph"``, or ``"IVF partitions, an HNSW graph in each, scalar codes; re-scored on
    the full vectors"`` for LanceDB's ``ivf_hnsw_sq`` searched with ``refine_factor`` > 0 (a
    run record's ``config.retrieve`` backend/build/search; a sweep point's index/build/query).
    A backend without an entry in :data:`FAMILIES` reads as its own name."""
    entry = FAMILIES.get(backend, backend)
    if isinstance(entry, tuple):
        key, kinds = entry
        value = (build or {}).get(key, kinds["default"])
        entry = kinds.get(str(value), f"{backend} {key}={value}")
    if ((search or {}).get("refine_factor") or 0) > 0:
        entry += "; re-scored on the full vectors"
    return entry
