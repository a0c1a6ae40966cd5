"""Trace assembly: a measured request's stamps as an OpenTelemetry trace (:mod:`ragbench.otel`).

Always after the requests were timed, from their recorded stamps, so
exporting changes no stage time. :class:`RequestTraces` holds what every
request of one pipeline shares (the stage-span attributes, made once);
:func:`export` hands each request to a :class:`ragbench.otel.TraceExporter`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import otel
from ..generators import Generator
from ..settings import Config
from .build import Built
from .capabilities import ChatOrCompletion, HasModel, LimitsTokens, NamesModel
from .context import RequestRecord
from .samples import RETRIEVE_PARTS

__all__ = ["TRACE_FLUSH_EVERY", "RequestTraces", "export", "llm_info"]

#: Exported requests between flushes when exporting in bulk (a batch span
#: processor holds 2048 spans by default and drops what overflows).
TRACE_FLUSH_EVERY = 100


class RequestTraces:
    """The attributes and nested spans of each request's trace, for one set-up pipeline.

    ``backends``: the backend of each configured stage (``embed``, ``retrieve``,
    ``rerank``, ``serialize``, ``transport``, ``generate``) as the pipeline
    names them.
    """

    def __init__(
        self,
        config: Config,
        backends: Mapping[str, str],
        built: Built,
        *,
        label: str,
        simulated: Sequence[str],
        caveats: Sequence[str],
    ) -> None:
        self.label = label
        self.built = built
        self.k: int = config.run.k
        self.k_candidates = built.info.get("k_candidates")
        self.simulated = simulated
        self.caveats = caveats
        stage_backends: dict[str, str | None] = {
            "embed": built.embedding.name,
            "cache": config.cache.backend,
            "retrieve": backends["retrieve"],
            "rerank": backends["rerank"],
            "serialize": backends["serialize"],
            "transport": backends["transport"],
            "deserialize": backends["serialize"],
            "prompt": None,
            "generate": backends["generate"],
        }
        self.static = otel.stage_attributes(
            {stage: v for stage, v in stage_backends.items() if stage in built.stage_names},
            k=self.k,
            k_candidates=self.k_candidates,
            dimension=int(built.embedding.corpus.shape[1]),
            data_source=built.dataset.name,
            generator=llm_info(built.generator),
        )

    def of(self, rec: RequestRecord, row: np.ndarray, recall: float, llm: bool) -> dict[str, Any]:
        """One request's ``attributes``, ``stage_attributes`` and ``inner`` spans.

        ``row``: its int64 per-stage nanoseconds (columns of ``stage_names``).
        """
        built = self.built
        stage_ns = {name: int(row[j]) for j, name in enumerate(built.stage_names)}
        far = rec.far
        # the LLM's own count where its generator gave one, else the prompt builder's
        tokens = rec.model_prompt_tokens if rec.model_prompt_tokens >= 0 else rec.prompt_tokens
        own = otel.request_stage_attributes(
            stage_ns,
            payload_bytes=rec.payload_bytes,
            wire_bytes=None if far is None else (far.wire_bytes_sent, far.wire_bytes_received),
            prompt_tokens=tokens,
            llm_stage="generate" if llm else None,
        )
        stages = {name: {**self.static.get(name, {}), **own[name]} for name in stage_ns}
        inner = None
        if far is not None and "transport" in built.loop_names:
            j = built.loop_names.index("transport")
            parts = [
                ("deserialize", far.decode_ns, stages["deserialize"]),
                ("prompt", far.prompt_ns, stages["prompt"]),
            ]
            spans = otel.centered_spans(rec.stamps[j], rec.stamps[j + 1], parts)
            # keep_alive = false: the connection's set-up, from the transport's start
            setup = [(f"transport.{n}", ns, None) for n, ns in far.connection_ns]
            inner = {"transport": otel.leading_spans(rec.stamps[j], setup) + spans}
        if rec.retrieve_parts is not None and "retrieve" in built.loop_names:
            j = built.loop_names.index("retrieve")
            # the index's own part names (bm25: tokenize, score, decode) when its info has them
            names = (built.info.get("index") or {}).get("search_parts") or RETRIEVE_PARTS
            split = [
                (f"retrieve.{n}", ns, None) for n, ns in zip(names, rec.retrieve_parts, strict=True)
            ]
            spans = otel.centered_spans(rec.stamps[j], rec.stamps[j + 1], split)
            inner = {**(inner or {}), "retrieve": spans}
        attributes = otel.request_attributes(
            label=self.label,
            query_id=built.dataset.queries.ids[rec.query_row],
            k=self.k,
            k_candidates=self.k_candidates,
            payload_bytes=rec.payload_bytes,
            prompt_tokens=tokens,
            recall=recall,
            simulated=bool(self.simulated),
            caveats=self.caveats,
        )
        return {"attributes": attributes, "stage_attributes": stages, "inner": inner}


def export(
    exporter: otel.TraceExporter,
    traces: RequestTraces,
    loop_names: Sequence[str],
    records: Sequence[RequestRecord],
    wall: np.ndarray,
    recall: np.ndarray,
    *,
    first_token: bool,
) -> int:
    """Export ``records`` (``wall``: their int64 stage ns, ``recall`` theirs); return how many.

    Flushes after the first request and every :data:`TRACE_FLUSH_EVERY`: a
    batch processor's queue drops what overflows, and a dead collector, found
    with the first request's spans, stops the rest.
    """
    for r, rec in enumerate(records):
        exporter.export(
            loop_names,
            rec.stamps,
            first_token=first_token,
            **traces.of(rec, wall[r], float(recall[r]), first_token),
        )
        if (r == 0 or (r + 1) % TRACE_FLUSH_EVERY == 0) and not exporter.flush():
            return r + 1
    exporter.flush()
    return len(records)


def llm_info(generator: Generator) -> dict[str, Any]:
    """What the GenAI span attributes say about the LLM client (nothing for ``none``)."""
    name = generator.name
    if name == "none":
        return {}
    model: object = None
    if isinstance(generator, NamesModel):
        model = generator.model_id
    elif isinstance(generator, HasModel):
        model = generator.model
    max_tokens = generator.max_tokens if isinstance(generator, LimitsTokens) else None
    chat = generator.chat if isinstance(generator, ChatOrCompletion) else True
    return {
        "operation": "chat" if chat else "text_completion",
        "provider": "openai" if name == "openai" else f"ragbench.{name}",
        "model": model if isinstance(model, str) else None,
        "max_tokens": max_tokens if isinstance(max_tokens, int) else None,
    }
