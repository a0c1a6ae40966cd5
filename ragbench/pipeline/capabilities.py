"""What a backend can do beyond its stage Protocol, each as one small Protocol.

The stage Protocols (:class:`ragbench.indexes.Index`,
:class:`ragbench.transports.Transport`, ...) say what every backend has.
Some backends can do more -- an async client, filtered search, a
self-description for records -- and the pipeline asks for that with
``isinstance(part, SupportsX)`` on these runtime-checkable Protocols, never
with ``getattr(part, "x", default)``. A third-party backend gains a
capability by having the attribute; it registers nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..generators import FirstToken
from ..indexes.contract import SplitsSearch
from ..timing import Parts
from ..transports import FarSide

__all__ = [
    "filter_path",
    "AwaitableStage",
    "ClosesAsync",
    "Closes",
    "CompressedCodes",
    "RanksTexts",
    "RecordsBuild",
    "EmbedsCorpusApart",
    "HasReferenceEmbedder",
    "SplitsEmbed",
    "SplitsSearch",
    "ConnectsAsync",
    "CountsAsyncRequests",
    "InstantStage",
    "NamesAsyncClient",
    "Cautioned",
    "ChatOrCompletion",
    "ChecksQueryParams",
    "Describes",
    "FilteredSearch",
    "FiltersOnAttributes",
    "HasDim",
    "HasModel",
    "InProcess",
    "IndexInfo",
    "LimitsTokens",
    "NamesModel",
    "RecordsData",
    "Shaped",
    "SupportsAsyncFirstToken",
    "SupportsAsyncSend",
]


@runtime_checkable
class SupportsAsyncSend(Protocol):
    """A transport with an async client: ``await asend(payload, query)``."""

    async def asend(self, payload: bytes, query: str) -> FarSide: ...


@runtime_checkable
class SupportsAsyncFirstToken(Protocol):
    """A generator with an async streaming client: ``await afirst_token(prompt, tokens)``."""

    async def afirst_token(self, prompt: str, prompt_tokens: int) -> FirstToken: ...


@runtime_checkable
class ChecksQueryParams(Protocol):
    """An index that checks search parameter names and values itself."""

    def check_query_params(self, params: Mapping[str, Any]) -> None: ...


@runtime_checkable
class FilteredSearch(Protocol):
    """An index that searches with a filter; the strategies it offers (``pre``, ``post``, ...)."""

    filter_strategies: tuple[str, ...]


@runtime_checkable
class FiltersOnAttributes(Protocol):
    """A database index that stores attribute columns (``set_attributes`` before ``build``)
    and takes a query's filter as a spec, ``search(..., where=spec)``: SQL on those columns;
    ``filter_path``: ``where`` when its table holds them, else ``ids`` (an id allow-list)."""

    filter_path: str

    def set_attributes(self, columns: Mapping[str, np.ndarray]) -> None: ...


def filter_path(index: object, strategy: str | None) -> str | None:
    """The path a filtered search of a database ``index`` takes under ``strategy``, as records
    say it: ``auto``/``in-graph`` hand the spec to the database (its ``filter_path``: ``where``
    or ``ids``), ``pre``/``post`` run in ragbench; ``None`` for an index that is not one."""
    if not isinstance(index, FiltersOnAttributes):
        return None
    strategy = strategy or "auto"
    return index.filter_path if strategy in ("auto", "in-graph") else strategy


@runtime_checkable
class EmbedsCorpusApart(Protocol):
    """An embedder whose corpus vectors may come from another embedder (MiniLM's ``query_only``)."""

    @property
    def corpus_embedder(self) -> Any: ...


@runtime_checkable
class HasReferenceEmbedder(Protocol):
    """An embedder with a reference whose vectors it is compared with (MiniLM's torch runtime)."""

    @property
    def reference_embedder(self) -> Any: ...


@runtime_checkable
class SplitsEmbed(Protocol):
    """An embedder that times its parts: this thread's last embed as
    :class:`~ragbench.timing.Parts` ``tokenize``, ``forward``, ``pool``."""

    def last_parts(self) -> Parts | None: ...


@runtime_checkable
class Closes(Protocol):
    """A part holding a server, connections or files that must be stopped (``close()``)."""

    def close(self) -> None: ...


@runtime_checkable
class RanksTexts(Protocol):
    """A reranker of texts (a cross-encoder; ``input_kind == "texts"``): the query and the
    candidates' passages in, ``(ids int64 (k,), scores float32 (k,))`` out."""

    input_kind: str

    def rerank_texts(
        self, query: str, candidate_ids: np.ndarray, texts: Sequence[str], k: int
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def close(self) -> None: ...


@runtime_checkable
class RecordsBuild(Protocol):
    """An index that records how it was built (``build_record``: seed, seconds, cache; or None)."""

    build_record: dict[str, Any] | None


@runtime_checkable
class IndexInfo(Protocol):
    """An index that describes itself for records (backend, parameters, sizes)."""

    def info(self) -> dict[str, Any]: ...


@runtime_checkable
class HasDim(Protocol):
    """An index that knows its vector dimension."""

    dim: int


@runtime_checkable
class RecordsData(Protocol):
    """An index (loaded from a file) that records the data it was built on (a fingerprint)."""

    saved_data: dict[str, Any] | None


@runtime_checkable
class Describes(Protocol):
    """A part that describes itself for records (asgi's server, an LLM client, ...)."""

    def describe(self) -> Mapping[str, Any]: ...


@runtime_checkable
class Cautioned(Protocol):
    """A generator whose reports must carry a caveat (random weights), or ``None``."""

    @property
    def caveat(self) -> str | None: ...


@runtime_checkable
class Shaped(Protocol):
    """A codec with a payload shape (``row`` or ``columnar``)."""

    shape: str


@runtime_checkable
class InProcess(Protocol):
    """A transport that says whether its far side runs in the calling thread."""

    in_process: bool


@runtime_checkable
class NamesModel(Protocol):
    """A generator that names the model it talks to (the stub's fixed name, a checkpoint)."""

    model_id: str


@runtime_checkable
class HasModel(Protocol):
    """A generator holding its model (a name for clients, a path or module in process)."""

    model: object


@runtime_checkable
class LimitsTokens(Protocol):
    """A generator producing at most ``max_tokens`` tokens per request."""

    max_tokens: int


@runtime_checkable
class ChatOrCompletion(Protocol):
    """An LLM client calling the chat endpoint (``chat = True``) or the completions one."""

    chat: bool


# ---- async clients (ragbench.aioworkers serves the stages on an event loop)


@runtime_checkable
class AwaitableStage(Protocol):
    """A stage whose ``awaitable`` says its ``acall(ctx)`` awaits the backend's async client."""

    awaitable: bool


@runtime_checkable
class InstantStage(Protocol):
    """A stage that says whether it does nothing worth moving off an event loop (``instant``)."""

    instant: bool


@runtime_checkable
class ConnectsAsync(Protocol):
    """A backend whose async client opens its connections on the running loop (``aconnect``)."""

    async def aconnect(self) -> None: ...


@runtime_checkable
class ClosesAsync(Protocol):
    """A backend whose async client closes on the running loop (``aclose``)."""

    async def aclose(self) -> None: ...


@runtime_checkable
class NamesAsyncClient(Protocol):
    """A backend that names its async client library (``async_client()``)."""

    def async_client(self) -> str: ...


@runtime_checkable
class CountsAsyncRequests(Protocol):
    """A backend that counts the requests its async client carried (``async_requests``)."""

    async_requests: int


@runtime_checkable
class CompressedCodes(Protocol):
    """An index storing compressed codes: their bytes per vector (``code_bytes_per_vector()``)."""

    def code_bytes_per_vector(self) -> int: ...
