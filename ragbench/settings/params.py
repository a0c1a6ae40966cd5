"""The parameters of every built-in backend, typed: what a stage table may hold per backend.

Index build and search parameters are Structs (``[retrieve] build`` and
``search``); the other stages' parameters are field tables
(:data:`STAGE_PARAMS`) from which :mod:`ragbench.settings.variants` makes one Struct
per backend. A parameter left out stays unset: the backend fills in its own
default (documented here as the field's JSON-Schema ``default``), and checks
ranges it owns (``M`` in [2, 4096], ...) when it is created. What this module
adds is that a misspelt key or a value of the wrong type is refused when the
config is read, with its path, before anything is built.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from .._registry import BUILTIN_INDEXES
from ..threads import MAX_THREADS

__all__ = [
    "BUILD_DEPENDENT",
    "INDEXES",
    "STAGE_PARAMS",
    "Params",
    "ThreadCount",
    "documented_defaults",
]

#: A thread count: 1 to :data:`ragbench.threads.MAX_THREADS` (each one is an OS thread).
ThreadCount = Annotated[int, Meta(ge=1, le=MAX_THREADS)]


def _d(value: Any) -> Meta:
    """Field metadata: the backend's own default, for the JSON Schema."""
    return Meta(extra_json_schema={"default": value})


class Params(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Index build or search parameters; each one left unset takes the backend's default.

    Which backend a Struct types is said on the backend's registry line
    (:data:`ragbench.indexes.registry`), the one place a name is listed.
    """

    #: Search parameters the index takes only with some builds (pgvector's, by index type).
    build_dependent: ClassVar[frozenset[str]] = frozenset()


class NoParams(Params, frozen=True):
    """A backend without parameters of this kind."""


class EfSearch(Params, frozen=True):
    """Search parameters of the graph indexes."""

    ef: Annotated[int, _d(64)] | UnsetType = UNSET


class NprobeSearch(Params, frozen=True):
    """Search parameters of the inverted-file indexes."""

    nprobe: Annotated[int, _d(8)] | UnsetType = UNSET


class GraphBuild(Params, frozen=True):
    """Build parameters of faiss's graph indexes (``faiss-hnsw``, ``hnsw-fp16``, ``binary-hnsw``)."""

    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(200)] | UnsetType = UNSET


class FaissHnswBuild(GraphBuild, frozen=True):
    """Build parameters of ``faiss-hnsw`` (its seed fixes the level of each inserted point)."""

    seed: Annotated[int, _d(12345)] | UnsetType = UNSET


class HnswBuild(GraphBuild, frozen=True):
    """Build parameters of ``hnsw`` (hnswlib)."""

    seed: Annotated[int, _d(100)] | UnsetType = UNSET


class HnswSqBuild(GraphBuild, frozen=True):
    """Build parameters of ``hnsw-sq`` (faiss HNSW over 8-bit scalar codes)."""

    train_size: Annotated[int, _d(50000)] | UnsetType = UNSET
    seed: Annotated[int, _d(1234)] | UnsetType = UNSET


class UsearchBuild(Params, frozen=True):
    """Build parameters of ``usearch``."""

    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(128)] | UnsetType = UNSET
    dtype: Annotated[str, _d("f32")] | UnsetType = UNSET


class QdrantBuild(Params, frozen=True):
    """Build parameters of ``qdrant-edge``."""

    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(100)] | UnsetType = UNSET
    full_scan_threshold: Annotated[int, _d(10000)] | UnsetType = UNSET
    search_threads: Annotated[int, Meta(ge=1, le=256), _d(1)] | UnsetType = UNSET


class IvfBuild(Params, frozen=True):
    """Build parameters of ``ivf`` (``nlist`` None: about 4 sqrt(n))."""

    nlist: Annotated[int | None, _d(None)] | UnsetType = UNSET
    seed: Annotated[int, _d(1234)] | UnsetType = UNSET


class IvfSq8Build(IvfBuild, frozen=True):
    """Build parameters of ``ivf-sq8``."""

    train_size: Annotated[int, _d(50000)] | UnsetType = UNSET


class IvfPqFsBuild(IvfSq8Build, frozen=True):
    """Build parameters of ``ivfpq-fs`` (``m`` None: chosen from the dimension)."""

    m: Annotated[int | None, _d(None)] | UnsetType = UNSET


class IvfPqBuild(IvfPqFsBuild, frozen=True):
    """Build parameters of ``ivfpq``."""

    nbits: Annotated[int, _d(8)] | UnsetType = UNSET


class LshBuild(Params, frozen=True):
    """Build parameters of ``lsh`` (faiss IndexLSH)."""

    nbits: Annotated[int, _d(512)] | UnsetType = UNSET
    rotate_data: Annotated[bool, _d(True)] | UnsetType = UNSET
    train_thresholds: Annotated[bool, _d(False)] | UnsetType = UNSET


class MinHashBuild(Params, frozen=True):
    """Build parameters of ``minhash-lsh`` (datasketch)."""

    num_perm: Annotated[int, _d(128)] | UnsetType = UNSET
    threshold: Annotated[float, _d(0.3)] | UnsetType = UNSET
    shingle_size: Annotated[int, _d(3)] | UnsetType = UNSET
    seed: Annotated[int, _d(1)] | UnsetType = UNSET


class Bm25Build(Params, frozen=True):
    """Build parameters of ``bm25`` (bm25s; ``stemmer``: a PyStemmer algorithm such as
    ``english``, or none; ``stopwords``: a bm25s list name such as ``en``, or ``none``)."""

    k1: Annotated[float, Meta(gt=0), _d(1.5)] | UnsetType = UNSET
    b: Annotated[float, Meta(ge=0, le=1), _d(0.75)] | UnsetType = UNSET
    method: (
        Annotated[Literal["lucene", "robertson", "atire", "bm25l", "bm25+"], _d("lucene")]
        | UnsetType
    ) = UNSET
    backend: Annotated[Literal["numpy", "numba"], _d("numpy")] | UnsetType = UNSET
    stopwords: Annotated[str, _d("en")] | UnsetType = UNSET
    stemmer: Annotated[str | None, _d(None)] | UnsetType = UNSET


class TantivyBuild(Params, frozen=True):
    """Build parameters of ``tantivy`` (``stopwords`` and ``stemmer``: a Tantivy language such
    as ``english``, or none; ``heap_mb``: the writer's memory)."""

    stopwords: Annotated[str, _d("english")] | UnsetType = UNSET
    stemmer: Annotated[str | None, _d(None)] | UnsetType = UNSET
    heap_mb: Annotated[int, Meta(ge=15, le=4096), _d(64)] | UnsetType = UNSET


class PgFtsBuild(Params, frozen=True):
    """Build parameters of ``pg-fts`` (``config``: a text search configuration; ``match``: how
    a query's lexemes combine; ``dsn`` None: ragbench's own PostgreSQL server)."""

    config: Annotated[str, _d("english")] | UnsetType = UNSET
    match: Annotated[Literal["any", "all", "websearch"], _d("any")] | UnsetType = UNSET
    normalization: Annotated[int, Meta(ge=0, le=63), _d(0)] | UnsetType = UNSET
    dsn: Annotated[str | None, _d(None)] | UnsetType = UNSET
    table: Annotated[str | None, _d(None)] | UnsetType = UNSET
    connect_timeout: Annotated[float, Meta(gt=0), _d(10.0)] | UnsetType = UNSET
    statement_timeout: Annotated[float, Meta(gt=0), _d(60.0)] | UnsetType = UNSET
    build_timeout: Annotated[float, Meta(gt=0), _d(3600.0)] | UnsetType = UNSET


class PgHybridBuild(PgFtsBuild, frozen=True):
    """Build parameters of ``pg-hybrid``: ``pg-fts``'s, the vector side's ``dense_index``
    (``flat`` or ``hnsw`` with ``ef``) and the fusion's ``k_rrf`` and ``candidates`` (0: k)."""

    dense_index: Annotated[Literal["flat", "hnsw"], _d("flat")] | UnsetType = UNSET
    ef: Annotated[int, Meta(ge=1, le=1000), _d(40)] | UnsetType = UNSET
    k_rrf: Annotated[float, Meta(ge=0), _d(60.0)] | UnsetType = UNSET
    candidates: Annotated[int, Meta(ge=0), _d(0)] | UnsetType = UNSET


class HybridBuild(Params, frozen=True):
    """Build parameters of ``hybrid``: its two sides (``dense``, ``lexical`` and their own
    tables), the fusion (``rrf`` with ``k_rrf``, or ``weighted`` with ``alpha``), the candidates
    per side (0: k) and whether the two searches run on two threads (``concurrent``)."""

    dense: Annotated[str, _d("flat")] | UnsetType = UNSET
    lexical: Annotated[str, _d("bm25")] | UnsetType = UNSET
    fusion: Annotated[Literal["rrf", "weighted"], _d("rrf")] | UnsetType = UNSET
    k_rrf: Annotated[float, Meta(ge=0), _d(60.0)] | UnsetType = UNSET
    alpha: Annotated[float, Meta(ge=0, le=1), _d(0.5)] | UnsetType = UNSET
    candidates: Annotated[int, Meta(ge=0), _d(0)] | UnsetType = UNSET
    concurrent: Annotated[bool, _d(False)] | UnsetType = UNSET
    dense_build: Annotated[dict[str, Any], _d({})] | UnsetType = UNSET
    lexical_build: Annotated[dict[str, Any], _d({})] | UnsetType = UNSET
    dense_search: Annotated[dict[str, Any], _d({})] | UnsetType = UNSET


class LanceDbBuild(Params, frozen=True):
    """Build parameters of ``lancedb`` (``index_type`` flat: no ANN index, exact scan)."""

    index_type: (
        Annotated[
            Literal["flat", "ivf_flat", "ivf_pq", "ivf_sq", "ivf_hnsw_sq", "ivf_hnsw_pq"],
            _d("flat"),
        ]
        | UnsetType
    ) = UNSET
    num_partitions: Annotated[int, _d(0)] | UnsetType = UNSET
    num_sub_vectors: Annotated[int, _d(0)] | UnsetType = UNSET
    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(100)] | UnsetType = UNSET


class LanceDbSearch(Params, frozen=True):
    """Search parameters of ``lancedb`` (``nprobes`` for IVF types, ``ef`` for the HNSW ones)."""

    nprobes: Annotated[int, _d(20)] | UnsetType = UNSET
    refine_factor: Annotated[int, _d(0)] | UnsetType = UNSET
    ef: Annotated[int, _d(64)] | UnsetType = UNSET


class ChromaBuild(Params, frozen=True):
    """Build parameters of ``chroma`` (it takes ``ef_search`` when the collection is made)."""

    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(100)] | UnsetType = UNSET
    ef_search: Annotated[int, _d(64)] | UnsetType = UNSET


class ChromaSearch(Params, frozen=True):
    """Search parameters of ``chroma``: ``ef`` (None: the build's ``ef_search``; another value
    updates the collection and reopens a copy of its folder, as Chroma reads it only at load)."""

    ef: Annotated[int | None, _d(None)] | UnsetType = UNSET


class PgvectorBuild(Params, frozen=True):
    """Build parameters of ``pgvector`` (``dsn`` None: ragbench's own PostgreSQL server)."""

    index: Annotated[Literal["hnsw", "ivfflat", "flat"], _d("hnsw")] | UnsetType = UNSET
    M: Annotated[int, _d(16)] | UnsetType = UNSET
    ef_construction: Annotated[int, _d(64)] | UnsetType = UNSET
    lists: Annotated[int, _d(100)] | UnsetType = UNSET
    storage: Annotated[Literal["vector", "halfvec", "bit"], _d("vector")] | UnsetType = UNSET
    prepare: Annotated[bool, _d(True)] | UnsetType = UNSET
    dsn: Annotated[str | None, _d(None)] | UnsetType = UNSET
    table: Annotated[str | None, _d(None)] | UnsetType = UNSET
    attribute_index: Annotated[bool, _d(False)] | UnsetType = UNSET
    connect_timeout: Annotated[float, Meta(gt=0), _d(10.0)] | UnsetType = UNSET
    statement_timeout: Annotated[float, Meta(gt=0), _d(60.0)] | UnsetType = UNSET
    build_timeout: Annotated[float, Meta(gt=0), _d(3600.0)] | UnsetType = UNSET


class PgvectorSearch(Params, frozen=True):
    """Search parameters of ``pgvector``: ``ef`` (hnsw) or ``nprobe`` (ivfflat), ``rescore``
    (halfvec and bit storage), ``iterative_scan``; the index refuses the ones its build lacks."""

    build_dependent: ClassVar[frozenset[str]] = frozenset({"ef", "nprobe", "rescore"})

    ef: Annotated[int, _d(40)] | UnsetType = UNSET
    nprobe: int | UnsetType = UNSET
    rescore: int | UnsetType = UNSET
    iterative_scan: (
        Annotated[Literal["off", "relaxed_order", "strict_order"], _d("off")] | UnsetType
    ) = UNSET


Seconds = Annotated[float, Meta(gt=0)]
_CODEC = {
    "shape": Annotated[Literal["row", "columnar"], _d("row")],
    "max_payload_bytes": int,
}
_SERVER = {
    "host": Annotated[str, _d("127.0.0.1")],
    "timeout": Seconds,
    "startup_timeout": Seconds,
    "tls": Annotated[bool, _d(False)],
    "keep_alive": Annotated[bool, _d(True)],
    "allow_remote": Annotated[bool, _d(False)],
}

#: Stage table → backend → parameter → type (``Annotated`` with its default when known).
STAGE_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "embed": {
        "minilm": {
            "batch_size": Annotated[int, _d(64)],
            "device": str,
            "threads": ThreadCount | None,
            "runtime": Annotated[
                Literal["torch", "torch-bf16", "onnx", "onnx-int8", "openvino"], _d("torch")
            ],
            "query_only": Annotated[bool, _d(False)],
        },
        "hashing": {
            "dim": Annotated[int, _d(384)],
            "ngram": Annotated[tuple[int, int], _d([1, 2])],
            "seed": Annotated[int, _d(0)],
            "lowercase": Annotated[bool, _d(True)],
        },
        "precomputed": {},
        "model2vec": {
            "dims": Annotated[int, _d(256)],
            "zipf": Annotated[bool, _d(True)],
        },
    },
    "rerank": {
        "numba": {"parallel": Annotated[bool, _d(False)], "parallel_threshold": int | None},
        "numpy": {},
        "python": {},
        "none": {},
        "cross-encoder": {
            "model": str | None,
            "tokenizer": str | None,
            "runtime": Annotated[Literal["torch", "onnx", "onnx-int8"], _d("torch")],
            "batch_size": Annotated[int, _d(32)],
            "max_length": int | None,
            "threads": ThreadCount | None,
            "inference_mode": Annotated[bool, _d(True)],
            "seed": Annotated[int, _d(0)],
        },
    },
    "serialize": {
        name: dict(_CODEC) for name in ("json", "orjson", "msgspec-json", "msgpack", "protobuf")
    },
    "transport": {
        "inproc": {},
        "http": dict(_SERVER),
        "grpc": {
            **_SERVER,
            "max_message_bytes": int | None,
            "initial_window_bytes": int | None,
            "bdp_probe": bool | None,
            "compression": Annotated[Literal["none", "gzip", "deflate"], _d("none")],
            "keepalive_ms": int | None,
            "reply": Annotated[Literal["unary", "stream"], _d("unary")],
            "stream_chunk_bytes": Annotated[int, _d(16384)],
        },
        "asgi": {
            **_SERVER,
            "http": Annotated[str, _d("auto")],
            "loop": Annotated[str, _d("auto")],
            "offload": Annotated[bool, _d(True)],
            "keep_alive_s": Annotated[int, _d(3600)],
            "http2": Annotated[bool, _d(False)],
        },
    },
    "generate": {
        "none": {},
        "stub": {
            "prefill_ms_per_1k_tokens": float,
            "base_ms": float,
            "inter_token_ms": float,
            "max_tokens": Annotated[int, _d(1)],
            "host": str,
            "timeout": Seconds,
            "startup_timeout": Seconds,
            "client": Annotated[str, _d("minimal")],
            "read_timeout_s": Seconds | None,
            "allow_remote": Annotated[bool, _d(False)],
        },
        "openai": {
            "base_url": str | None,
            "model": str | None,
            "api_key": str | None,
            "timeout": Seconds,
            "max_tokens": Annotated[int, _d(16)],
            "chat": Annotated[bool, _d(True)],
            "client": Annotated[str, _d("minimal")],
        },
        "transformers": {
            "model": str | None,
            "architecture": str | None,
            "tokenizer": str | None,
            "threads": ThreadCount | None,
            "device": Annotated[str, _d("cpu")],
            "dtype": Annotated[str, _d("float32")],
            "next_tokens": Annotated[int, _d(0)],
            "seed": Annotated[int, _d(0)],
        },
    },
}


def _index_params() -> dict[str, tuple[type[Params], type[Params]]]:
    """Built-in index name -> (build Struct, search Struct), read off the registry lines."""
    structs = globals()
    return {
        name: (structs[line.params[0]], structs[line.params[1]])
        for name, line in BUILTIN_INDEXES.items()
    }


#: Index backend → (its build parameters, its search parameters), derived from the one line
#: per backend in :data:`ragbench._registry.BUILTIN_INDEXES` (no name is listed here).
INDEXES: dict[str, tuple[type[Params], type[Params]]] = _index_params()
#: Search parameters an index takes only with some builds, by backend (each search Struct's
#: ``build_dependent``; pgvector's by index type and storage).
BUILD_DEPENDENT: dict[str, frozenset[str]] = {
    name: search.build_dependent for name, (_, search) in INDEXES.items() if search.build_dependent
}


def documented_defaults(params: type[Params]) -> dict[str, Any]:
    """The defaults a Params Struct documents for its backend (``{field: default}``)."""
    import msgspec

    out = {}
    for f in msgspec.structs.fields(params):
        for member in getattr(f.type, "__args__", ()):
            for meta in getattr(member, "__metadata__", ()):
                extra = getattr(meta, "extra_json_schema", None) or {}
                if "default" in extra:
                    out[f.name] = extra["default"]
    return out
