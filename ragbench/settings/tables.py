"""The tables of a config as frozen ``msgspec`` Structs: ragbench's own tables and the stage tables.

Part of :mod:`ragbench.settings` (which re-exports every name here). Each
stage table's base Struct (:class:`Stage` and its kinds) holds the keys
ragbench owns; the Struct of each backend is made from it in
:mod:`ragbench.settings.variants`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType, field

from ..errors import ConfigError
from .params import ThreadCount

__all__ = [
    "MAX_COUNT",
    "STAGES",
    "Cache",
    "Count",
    "Dataset",
    "Embed",
    "Filter",
    "Generate",
    "PositiveInt",
    "Prompt",
    "Rerank",
    "Retrieve",
    "Run",
    "Serialize",
    "Stage",
    "Table",
    "Transport",
]

#: Most requests (measured or warm-up) one run may ask for: 10**9 one by one is
#: already days of requests and ~TBs of records; anything more is a typo.
MAX_COUNT = 10**9

PositiveInt = Annotated[int, Meta(ge=1)]
Count = Annotated[int, Meta(ge=1, le=MAX_COUNT)]


class Table(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every configuration table: frozen, keyword-only, unknown keys refused."""

    def to_dict(self) -> dict[str, Any]:
        """The table as a plain dict (keys left unset are left out), as a record stores it."""
        return dict(msgspec.to_builtins(self))


# ------------------------------------------------------------------- ragbench's own tables


class Dataset(Table, frozen=True):
    """``[dataset]``: a bundled dataset by ``name`` (with its parameters) or a file by ``path``."""

    name: str | UnsetType = UNSET
    path: str | UnsetType = UNSET
    n: PositiveInt | UnsetType = UNSET
    dim: PositiveInt | UnsetType = UNSET
    n_queries: PositiveInt | UnsetType = UNSET
    seed: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    drop_empty: bool | UnsetType = UNSET
    #: the judged answers of a path dataset: a .tsv/.csv file or a BEIR split ("dev")
    qrels: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.name is not UNSET and self.path is not UNSET:
            raise ConfigError("give either name or path, not both")
        if self.name is UNSET and self.path is UNSET:
            msgspec.structs.force_setattr(self, "name", "pydocs")


class Run(Table, frozen=True):
    """``[run]``: how many requests, which ``k``, and what is measured beside wall time."""

    queries: Count = 200
    warmup: Annotated[int, Meta(ge=0, le=MAX_COUNT)] = 20
    k: PositiveInt = 10
    k_candidates: PositiveInt = 100
    threads: ThreadCount | None = 1
    label: str | None = None
    cpu_time: bool = False
    otel: bool = False
    repeat: Count = 1

    def __post_init__(self) -> None:
        if self.queries * self.repeat > MAX_COUNT:
            raise ConfigError(
                f"queries x repeat = {self.queries * self.repeat} requests is more than "
                f"the {MAX_COUNT} a run can hold; lower queries or repeat"
            )
        if self.k_candidates < self.k:
            raise ConfigError(
                f"k_candidates ({self.k_candidates}) must be >= k ({self.k}); "
                "raise k_candidates (--k-candidates)"
            )


class Cache(Table, frozen=True):
    """``[cache]``: an LRU of query results with a time to live, or none."""

    backend: Literal["none", "lru"] = "none"
    size: PositiveInt = 1024
    ttl_s: Annotated[float, Meta(ge=0, le=1e9)] = 300.0


class Prompt(Table, frozen=True):
    """``[prompt]``: the token budget and template of the prompt builder."""

    max_tokens: PositiveInt = 2048
    template: str | None = None


class Filter(Table, frozen=True, rename={"from_": "from"}):
    """``[retrieve] filter``: one filter per query (see :mod:`ragbench.attributes`).

    ``from = "queries"`` takes each query's own filter and nothing else;
    otherwise ``selectivity`` in (0, 1] is required.
    """

    attribute: str | None = None
    selectivity: Annotated[float, Meta(gt=0, le=1)] | None = None
    correlated: bool = False
    kind: Literal["values", "range"] | None = None
    seed: Annotated[int, Meta(ge=0)] = 0
    from_: Literal["queries"] | None = None

    def __post_init__(self) -> None:
        if self.from_ is None and self.selectivity is None:
            raise ConfigError("selectivity must be a number in (0, 1], got None")

    def to_dict(self) -> dict[str, Any]:
        """The table as :func:`ragbench.settings.sources.check_filter_table` returns it."""
        if self.from_ is not None:
            return {"from": self.from_}
        out: dict[str, Any] = msgspec.to_builtins(self)
        del out["from"]
        return out


# ------------------------------------------------------------------------- stage tables


class Stage(Table, frozen=True):
    """A stage table: its ``backend`` and that backend's parameters (:meth:`params`)."""

    #: keys of the table ragbench owns (never passed to the backend)
    OWN: ClassVar[tuple[str, ...]] = ()

    backend: str | None = None

    def params(self) -> dict[str, Any]:
        """The backend parameters the config gave (what the backend is created with).

        A backend's parameters are free-form keyword arguments, so they stay a mapping.
        """
        out: dict[str, Any] = msgspec.to_builtins(self)
        for key in ("backend", *self.OWN):
            out.pop(key, None)
        out.update(out.pop("options", None) or {})
        return out

    def to_dict(self) -> dict[str, Any]:
        """``backend``, ragbench's own keys, then the backend parameters the config gave."""
        return {"backend": self.backend, **{k: getattr(self, k) for k in self.OWN}, **self.params()}


class Embed(Stage, frozen=True):
    """``[embed]``: the embedder (``backend`` None: the dataset's default one)."""

    OWN = ("re_embed",)
    re_embed: bool = False


class Rerank(Stage, frozen=True):
    """``[rerank]``: the candidate reranker."""

    backend: str | None = "numba"


class Serialize(Stage, frozen=True):
    """``[serialize]``: the codec (the deserialize stage uses the same one)."""

    OWN = ("with_embeddings", "with_metadata")
    backend: str | None = "protobuf"
    with_embeddings: bool = False
    with_metadata: bool = True


class Transport(Stage, frozen=True):
    """``[transport]``: how the payload crosses from the retriever's side to the LLM's."""

    backend: str | None = "inproc"


class Generate(Stage, frozen=True):
    """``[generate]``: the LLM generator, timed to its first token."""

    backend: str | None = "none"


class Retrieve(Stage, frozen=True):
    """``[retrieve]``: the index, its ``build`` and ``search`` parameters, a per-query filter."""

    OWN = (
        "metric",
        "build",
        "search",
        "index_file",
        "dsn",
        "filter",
        "filter_strategy",
        "fast_build",
    )
    backend: str | None = "hnsw"
    metric: str | None = None
    build: Any = field(default_factory=dict)
    search: Any = field(default_factory=dict)
    index_file: Annotated[str, Meta(min_length=1)] | None = None
    #: a database server for the backends that use one (pgvector): ``postgresql://...``
    dsn: str | None = None
    filter: Filter | None = None
    filter_strategy: Literal["auto", "pre", "post", "in-graph"] | None = None
    #: build on every core (not deterministic; ragbench.indexes.builds) instead of one
    fast_build: bool = False

    def __post_init__(self) -> None:
        if self.dsn is not None and not self.dsn.strip():
            raise ConfigError(f"dsn must be a connection string, got {self.dsn!r}")
        if self.filter is None and self.filter_strategy is not None:
            raise ConfigError(
                f"filter_strategy = {self.filter_strategy!r} but there is no "
                "[retrieve] filter: give one (e.g. filter = { selectivity = 0.05 }, or "
                "--filter-selectivity), or drop the strategy"
            )

    def build_params(self) -> dict[str, Any]:
        """The ``build`` parameters the config gave: the index's keyword arguments."""
        return dict(msgspec.to_builtins(self.build))

    def search_params(self) -> dict[str, Any]:
        """The ``search`` parameters the config gave: the index's query keyword arguments."""
        return dict(msgspec.to_builtins(self.search))

    def to_dict(self) -> dict[str, Any]:
        """The table as a plain dict (``filter`` as :meth:`Filter.to_dict` gives it)."""
        return {
            "backend": self.backend,
            "metric": self.metric,
            "build": self.build_params(),
            "search": self.search_params(),
            "index_file": self.index_file,
            "dsn": self.dsn,
            "filter": None if self.filter is None else self.filter.to_dict(),
            "filter_strategy": self.filter_strategy,
            "fast_build": self.fast_build,
        }


STAGES: dict[str, type[Stage]] = {
    "embed": Embed,
    "retrieve": Retrieve,
    "rerank": Rerank,
    "serialize": Serialize,
    "transport": Transport,
    "generate": Generate,
}
