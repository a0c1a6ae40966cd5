"""What one request carries through the stages, and what it leaves behind.

:class:`RequestContext` is read and written by the stages of one request;
:class:`RequestRecord` is what a measured request keeps (stamps, far-side
report, final hits). :data:`STAGES` is the one place the stage order lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..transports import FarSide

__all__ = ["NO_IDS", "STAGES", "RequestContext", "RequestRecord"]

#: Every stage in request order. A pipeline runs these, minus ``cache`` when it is off.
STAGES = (
    "embed",
    "cache",
    "retrieve",
    "rerank",
    "serialize",
    "transport",
    "deserialize",
    "prompt",
    "generate",
)

#: The hits of a request no stage has answered yet: int64 ``(0,)``, read-only.
NO_IDS = np.empty(0, dtype=np.int64)
NO_IDS.flags.writeable = False


class RequestContext:
    """Everything one request reads and writes on its way through the stages."""

    # written by the stage that owns each field before any later stage reads it
    query_vector: np.ndarray
    candidate_ids: np.ndarray
    candidate_scores: np.ndarray
    hit_ids: np.ndarray
    hit_scores: np.ndarray
    prompt: str
    first_token: str

    __slots__ = (
        "index",
        "query_id",
        "query",
        "cache_key",
        "query_vector",
        "cached",
        "candidate_ids",
        "candidate_scores",
        "hit_ids",
        "hit_scores",
        "payload",
        "far",
        "prompt",
        "prompt_tokens",
        "first_token",
        "model_prompt_tokens",
        "decode_rest",
        "retrieve_parts",
        "embed_parts",
        "exact_top",
    )

    def __init__(self, index: int, query_id: str, query: str) -> None:
        # Only what a later stage may read before an earlier one writes it is
        # set here; the rest is written by the stage that owns it.
        self.index = index
        self.query_id = query_id
        self.query = query
        self.cache_key = query  # the query and, when filtered, its filter
        self.cached = False
        self.hit_ids = NO_IDS
        self.payload = b""
        self.far: FarSide | None = None
        self.prompt_tokens = 0
        self.model_prompt_tokens = -1  # the LLM's own count, when its generator reports one
        self.decode_rest: Callable[[], tuple[int, ...]] | None = None
        self.retrieve_parts: tuple[int, int, int] | None = None  # (send, server, decode) ns
        self.embed_parts: tuple[int, int, int] | None = None  # (tokenize, forward, pool) ns
        # a text reranker's exact top k of the candidates, computed after the stamps (recall)
        self.exact_top: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


class RequestRecord(NamedTuple):
    """What one measured request leaves behind; everything else is derived in :meth:`Pipeline.report`."""

    stamps: list[int]  # len(loop stages) + 1 perf_counter_ns stamps
    cpu_stamps: list[int] | None  # the same in thread_time_ns, with [run] cpu_time
    far: FarSide | None  # what the far side reported, or None
    hit_ids: np.ndarray  # the final hits (recall is computed from them)
    payload_bytes: int
    prompt_tokens: int
    query_row: int  # row of the query in the dataset
    model_prompt_tokens: int = -1  # the LLM's own prompt token count (-1: not reported)
    inter_token_ns: tuple[int, ...] = ()  # each next token's latency, decoded after the stamps
    retrieve_parts: tuple[int, int, int] | None = None  # the index's (send, server, decode) ns
    exact_ids: np.ndarray | None = None  # a text reranker's exact top k of the candidates (recall)
    embed_parts: tuple[int, int, int] | None = None  # the embedder's (tokenize, forward, pool) ns
    # CPU ns the index's database server spent on the request (pgvector's own server; -1: not read)
    server_cpu_ns: int = -1
