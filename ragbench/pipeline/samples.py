"""Sample maths: per-stage nanoseconds, recall and token counts from request records.

Everything here is a pure function of :class:`~ragbench.pipeline.context.RequestRecord`
lists and the names of the stages that made them; nothing is timed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics import recall_at_k
from ..transports import FarSide, connection_columns
from ..validate import check_memory
from .context import RequestRecord
from .parts import Embedding

__all__ = [
    "RECORD_BYTES",
    "EMBED_PARTS",
    "RETRIEVE_PARTS",
    "connection_ns",
    "check_record_memory",
    "far_columns",
    "far_fields",
    "inter_token_ns",
    "model_prompt_tokens",
    "recall",
    "repetitions",
    "server_clock",
    "server_cpu_ns",
    "stage_samples",
    "with_retrieve_parts",
    "embed_parts",
]

#: Bytes a run keeps per measured request (its record and its share of the
#: report): 2.8 kB measured with tracemalloc over 5000 requests of a flat/inproc run.
RECORD_BYTES = 3000

#: An index's split of its search (:class:`~ragbench.pipeline.capabilities.SplitsSearch`).
RETRIEVE_PARTS = ("send", "server", "decode")
#: An embedder's split of the embed stage (:class:`~ragbench.pipeline.capabilities.SplitsEmbed`).
EMBED_PARTS = ("tokenize", "forward", "pool")


def check_record_memory(queries: Any, repeat: Any) -> None:
    """Refuse (ConfigError) a run whose records alone would not fit in the available memory."""
    if isinstance(queries, int) and isinstance(repeat, int):
        check_memory(
            queries * repeat * RECORD_BYTES, f"[run] queries x repeat = {queries * repeat} requests"
        )


def far_fields(far: FarSide | None) -> tuple[int, int, int, int, int, int]:
    """A far side's report as numbers: decode ns, prompt ns, wire bytes sent and received,
    decode and prompt CPU ns (zeros for no far side)."""
    if far is None:
        return (0, 0, 0, 0, 0, 0)
    return (
        far.decode_ns,
        far.prompt_ns,
        far.wire_bytes_sent,
        far.wire_bytes_received,
        far.decode_cpu_ns,
        far.prompt_cpu_ns,
    )


def far_columns(records: Sequence[RequestRecord]) -> np.ndarray:
    """int64 (requests, 6): :func:`far_fields` of each record."""
    rows = [far_fields(r.far) for r in records]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 6)


def stage_samples(
    records: Sequence[RequestRecord],
    loop_names: Sequence[str],
    stage_names: Sequence[str],
    *,
    cpu_time: bool,
    in_thread: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-stage wall and CPU nanoseconds of ``records``, int64 ``(requests, stages)``.

    Columns follow ``stage_names``: the far side's decode and prompt times
    are split out of the transport's round trip, so each row adds up to the
    request's total. The CPU matrix is ``None`` without ``cpu_time``;
    ``in_thread`` says the far side ran in the request's own thread (its CPU
    time is then inside the transport stage's and is subtracted).
    """
    width = len(stage_names)
    if not records:
        empty = np.zeros((0, width), np.int64)
        return empty, (empty.copy() if cpu_time else None)
    far = far_columns(records)
    stamps = np.asarray([r.stamps for r in records], dtype=np.int64)
    wall = _split(stamps, far[:, 0], far[:, 1], True, loop_names, stage_names)
    if not cpu_time:
        return wall, None
    cpu_stamps = np.asarray([r.cpu_stamps for r in records], dtype=np.int64)
    return wall, _split(cpu_stamps, far[:, 4], far[:, 5], in_thread, loop_names, stage_names)


def _split(
    stamps: np.ndarray,
    decode: np.ndarray,
    prompt: np.ndarray,
    subtract: bool,
    loop_names: Sequence[str],
    stage_names: Sequence[str],
) -> np.ndarray:
    loop = np.diff(stamps.reshape(len(stamps), -1), axis=1)
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(loop_names):
        if name == "transport":
            columns["transport"] = loop[:, j] - decode - prompt if subtract else loop[:, j]
            columns["deserialize"] = decode
            columns["prompt"] = prompt
        else:
            columns[name] = loop[:, j]
    return np.stack([columns[n] for n in stage_names], axis=1)


def recall(
    records: Sequence[RequestRecord],
    k: int,
    truth: np.ndarray,
    embedding: Embedding,
    metric: str,
    *,
    final: bool = False,
) -> np.ndarray:
    """Tie-aware recall@k of each record's hits against ``truth`` (int64 ``(nq, k)``).

    After a reranker of texts: of the exact top k of the same candidates
    (``exact_ids``), unless ``final`` (then of the reranker's own k).
    """
    if not records:
        return np.zeros(0)
    found = np.full((len(records), k), -1, dtype=np.int64)
    for r, rec in enumerate(records):
        ids = rec.hit_ids if final or rec.exact_ids is None else rec.exact_ids
        n = min(k, len(ids))
        found[r, :n] = ids[:n]
    rows = np.asarray([rec.query_row for rec in records], dtype=np.int64)
    return recall_at_k(
        found, truth, embedding.corpus, embedding.queries, k, metric, query_rows=rows
    )


def repetitions(starts: Sequence[int], n_records: int) -> np.ndarray | None:
    """The repetition of each of ``n_records`` requests (``starts``: each repetition's first
    record), or ``None`` for a single repetition."""
    if len(starts) < 2:
        return None
    reps = np.zeros(n_records, dtype=np.int64)
    for r, start in enumerate(starts[1:], 1):
        reps[start:] = r
    return reps


def model_prompt_tokens(records: Sequence[RequestRecord]) -> np.ndarray | None:
    """The LLM's own prompt token count per request, or ``None`` when its generator reports none."""
    counts = np.asarray([r.model_prompt_tokens for r in records], dtype=np.int64)
    return counts if counts.size and (counts >= 0).all() else None


def inter_token_ns(records: Sequence[RequestRecord]) -> np.ndarray | None:
    """int64 ``(requests, next tokens)`` inter-token latencies, or ``None`` when none were decoded."""
    widths = {len(r.inter_token_ns) for r in records}
    if len(widths) != 1 or 0 in widths:  # none, mixed, or no next tokens decoded
        return None
    return np.asarray([r.inter_token_ns for r in records], dtype=np.int64)


def with_retrieve_parts(info: Mapping[str, Any], recs: Sequence[RequestRecord]) -> dict[str, Any]:
    """``info`` plus ``retrieve_parts`` (p50/mean ns of send, server, decode, or the parts the
    index's info names as ``search_parts``) when the index split them."""
    out = dict(info)
    parts = [r.retrieve_parts for r in recs if r.retrieve_parts is not None]
    if parts:
        a = np.asarray(parts, dtype=np.int64)
        # an index that names its parts (a lexical one: tokenize, score, decode) in its info
        names = (info.get("index") or {}).get("search_parts") or RETRIEVE_PARTS
        out["retrieve_parts"] = {
            name: {"p50_ns": int(np.median(a[:, j])), "mean_ns": int(a[:, j].mean())}
            for j, name in enumerate(names)
        }
    return out


def server_clock(index: Any) -> Callable[[], int | None] | None:
    """The index's database-server CPU clock (ns so far) when it has a readable one, else ``None``.

    pgvector on ragbench's own server has one (``server_cpu_ns()``: the CPU of
    the backend process serving the calling thread's connection); with
    ``dsn=`` (a server that may be elsewhere) it reads ``None``, and so does
    every index without such a clock.
    """
    clock = getattr(index, "server_cpu_ns", None)
    if not callable(clock) or clock() is None:
        return None
    return clock  # type: ignore[no-any-return]


def server_cpu_ns(records: Sequence[RequestRecord]) -> np.ndarray | None:
    """int64 ``(requests,)``: each request's database-server CPU ns, or ``None`` when not read."""
    if not records or any(r.server_cpu_ns < 0 for r in records):
        return None
    return np.asarray([r.server_cpu_ns for r in records], dtype=np.int64)


def embed_parts(recs: Sequence[RequestRecord]) -> dict[str, Any]:
    """``{"embed_parts": {tokenize|forward|pool: {p50_ns, mean_ns}}}`` when the embedder split
    the stage (MiniLM), else ``{}``."""
    parts = [r.embed_parts for r in recs if r.embed_parts is not None]
    if not parts:
        return {}
    a = np.asarray(parts, dtype=np.int64)
    return {
        "embed_parts": {
            name: {"p50_ns": int(np.median(a[:, j])), "mean_ns": int(a[:, j].mean())}
            for j, name in enumerate(EMBED_PARTS)
        }
    }


def connection_ns(records: Sequence[RequestRecord]) -> dict[str, np.ndarray] | None:
    """:func:`ragbench.transports.connection_columns` of the records, as int64 arrays."""
    columns = connection_columns([r.far for r in records])
    return None if columns is None else {k: np.asarray(v, np.int64) for k, v in columns.items()}


def library_round_trip_ns(
    call: Callable[[], object], rounds: int = 41, batch: int = 10
) -> list[float]:
    """Nanoseconds per call of ``call`` (a codec's
    :meth:`~ragbench.codecs._wire.BaseCodec.library_round_trip`), after one call: ``rounds``
    figures, each the mean of ``batch`` calls back to back (hot caches). A run record keeps
    them as ``info["codec_library_ns"]``, and ``compare``'s reading ranks the codecs on them
    beside the serialize + deserialize stages."""
    clock = time.perf_counter_ns
    call()
    out = []
    for _ in range(rounds):
        t0 = clock()
        for _ in range(batch):
            call()
        out.append((clock() - t0) / batch)
    return out
