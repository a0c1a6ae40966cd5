"""What the lexical indexes (``bm25``, ``tantivy``, ``pg-fts``) share.

Texts in (checked), ids and scores out with the contract's padding, the
vector metric a pipeline passes recorded for the rerank stage, the
calling thread's last search split into three timed parts, and the saved
payload (the corpus texts: a load indexes them again, so a loaded index is
the built one).
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, IndexFileError, InputError, UnsupportedOperationError
from ..timing import Parts
from ..validate import METRICS, check_k, check_metric
from ..validate import positive_int as int_param
from ._arrays import F32, I64
from ._writes_and_filters import IdSpace, resolve_filter
from .base import BaseIndex

#: The name of the scores every lexical index returns (higher is better).
LEXICAL_METRICS = ("bm25",)


def texts_of(data: Any, what: str) -> list[str]:
    """``data`` as a list of ``str`` (one ``str`` is one query), else :class:`InputError`."""
    if isinstance(data, str) and what == "queries":
        return [data]
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        raise InputError(
            f"{what}: expected a sequence of strings, got a single {type(data).__name__}"
        )
    texts = list(data)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{what}: item {i} is {type(text).__name__}, not str")
    return texts


def pads(nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids int64 (nq, k) of -1, scores float32 (nq, k) of -inf)``."""
    # empty + fill: np.full's generic copyto costs ~2.5 us an array, fill ~0.7 (timeit, k 100)
    ids, scores = np.empty((nq, k), dtype=I64), np.empty((nq, k), dtype=F32)
    ids.fill(-1)
    scores.fill(-np.inf)
    return ids, scores


class LexicalIndex(BaseIndex):
    """A text index over words: metric ``bm25``, a vector metric kept as :attr:`rescore_metric`.

    Created like every index, ``create(name, dim=..., metric=..., **build)``:
    ``dim`` is checked and ignored (the index reads texts); ``metric`` is
    the name of its scores (``supported_metrics[0]``: ``"bm25"``) or ``None``, or a vector metric (``ip``, ``cosine``,
    ``l2``), which a pipeline passes for its corpus vectors: recorded as
    :attr:`rescore_metric`, the metric the rerank stage re-scores with.
    Subclasses implement ``_index(texts)``, ``_search_parts(texts, k, plan)``
    and ``memory_bytes``.
    """

    input_kind: ClassVar[Any] = "texts"
    supported_metrics: ClassVar[tuple[str, ...]] = LEXICAL_METRICS
    #: the search's three timed parts, in order (before, inside, after the engine)
    part_names: ClassVar[tuple[str, str, str]] = ("tokenize", "score", "decode")
    #: ``pre``: the engine scores only the allowed rows (the one strategy it has)
    filter_strategies: ClassVar[tuple[str, ...]] = ("pre",)

    def __init__(
        self, dim: int | None = None, metric: str | None = None, **build_params: Any
    ) -> None:
        owner = f"index {self.name!r}"
        if dim is not None:
            int_param(owner, "dim", dim)  # checked, then unused: this index reads texts
        scores = self.supported_metrics[0]
        metric = check_metric(owner, scores if metric is None else metric, (scores, *METRICS))
        #: The vector metric the rerank stage re-scores candidates with, or None.
        self.rescore_metric: str | None = None if metric == scores else metric
        self._init_common(None, scores, build_params)
        self._local = threading.local()
        self._texts: list[str] | None = None
        # positions <-> ids (identity until a subclass with writes adds or deletes)
        self._space: IdSpace | None = None
        self._written = False

    # -- the contract ---------------------------------------------------------------

    @property
    def id_bound(self) -> int:
        """The length of a filter mask: one more than the largest id ever held."""
        if self._space is None:
            raise self._not_built()
        return self._space.id_bound

    def last_parts(self) -> Parts | None:
        """This thread's last search as :class:`~ragbench.timing.Parts` named by
        :attr:`part_names` (ns), or ``None``."""
        # kept as the four stamps around the three parts: the search stores them as they are
        # (no arithmetic on the request's path), the differences are taken here
        stamps: tuple[int, int, int, int] | None = getattr(self._local, "parts", None)
        if stamps is None:
            return None
        t0, t1, t2, t3 = stamps
        return Parts(self.part_names, (t1 - t0, t2 - t1, t3 - t2))

    def info(self) -> dict[str, Any]:
        """:meth:`BaseIndex.info` plus ``search_parts`` (the names of ``last_parts``) and
        ``rescore_metric``."""
        return {
            **super().info(),
            "search_parts": list(self.part_names),
            "rescore_metric": self.rescore_metric,
        }

    def build(self, data: Any) -> None:
        """Index ``n >= 1`` texts (row ``i`` gets id ``i``), at least one with a word."""
        texts = texts_of(data, "corpus texts")
        if not texts:
            raise InputError(f"index {self.name!r}: the corpus is empty; pass at least one text")
        self._timed_build(lambda: self._index_checked(texts))

    def _index_checked(self, texts: list[str]) -> None:
        words = self._index(texts)
        if words == 0:
            raise InputError(
                f"index {self.name!r}: none of the {len(texts)} corpus texts has a word to "
                f"index (empty, or only stop words of {self._stop_words()})"
            )
        self._texts = texts
        self._n = len(texts)
        self._space = IdSpace.identity(len(texts))
        self._written = False

    def _index(self, texts: list[str]) -> int:
        """Index ``texts``; returns how many words (or texts with a word) it indexed."""
        raise NotImplementedError

    def _stop_words(self) -> str:
        """Which stop words the analysis removes, for messages."""
        return f"stopwords={self.build_params['stopwords']!r}"

    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best texts per query text by the engine's BM25, best first.

        Args:
            queries: a sequence of query strings (one string is one query).
            k: results per query, ``1 <= k <= ntotal``.
            filter / strategy: an allow-list (see
                :class:`~ragbench.indexes.contract.FilteredIndex`); ``strategy``
                ``"auto"`` or ``"pre"``.

        Returns:
            ``ids`` int64 ``(nq, k)``, ``scores`` float32 ``(nq, k)`` (BM25,
            > 0). Only texts sharing a word with the query are hits: the rest
            of a row is ``-1`` / ``-inf`` (a query of only stop words or
            unknown words: a row of pads).
        """
        space = self._space
        if (
            not params
            and type(queries) is list
            and len(queries) == 1
            and type(k) is int
            and 0 < k <= self._n
            and space is not None
            and space.labels is None
            and type(queries[0]) is str
        ):
            # A request's search (one text in a list, no filter, k an int in range, ids equal
            # rows): every check of _search_checked holds, so none is repeated; the target
            # "at most 1.05x the engine's own call" (docs/reference/performance-targets.md#lexical,
            # bench/test_bench_lexical.py). Anything else, bad input too, takes the checked route.
            return self._search_one(queries[0], k)
        return self._search_checked(queries, k, params, space)

    def _search_checked(
        self, queries: Any, k: Any, params: dict[str, Any], space: IdSpace | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` with every check: the plain path, and each bad input's error."""
        allow = params.pop("filter", None)
        strategy = params.pop("strategy", None)
        if params:
            self._parse_query(params)
        if space is None:
            raise self._not_built()
        if strategy not in (None, "auto", "pre"):
            raise ConfigError(
                f"index {self.name!r}: filter strategy {strategy!r} is not supported; "
                "supported: auto, pre"
            )
        texts = texts_of(queries, "queries")
        k = check_k(k, self._n)
        masks = None
        if allow is not None:
            plan = resolve_filter(allow, len(texts), space)
            masks = [plan.mask(i) for i in range(len(texts))]
        pos, scores = self._search_parts(texts, k, masks)
        return (pos if space.labels is None else space.to_ids(pos)), scores

    def _search_parts(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _search_one(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """One unfiltered query whose ``k`` is checked: :meth:`_search_parts` of ``[text]``
        unless a subclass writes it straight through (the same arrays, faster)."""
        return self._search_parts([text], k, None)

    def _keep_parts(self, t0: int, t1: int, t2: int, t3: int) -> None:
        self._local.parts = (t0, t1, t2, t3)

    # -- writes: none (a subclass that has them declares WritableIndex) --------------

    def add(self, data: Any, ids: Any = None) -> np.ndarray:
        """Refused: this engine's index takes no rows after ``build``."""
        raise UnsupportedOperationError(
            f"index {self.name!r}: {self.no_write_reason}; build it again from the final texts"
        )

    no_write_reason: ClassVar[str] = "the engine cannot add texts to a built index"

    # -- persistence: the texts -----------------------------------------------------

    def _payload(self) -> bytes:
        if self._texts is None:
            raise self._not_built()
        if self._written:
            raise UnsupportedOperationError(
                f"index {self.name!r}: saving an index changed by add()/delete() is not "
                "supported; build it again from the final texts and save that"
            )
        return json.dumps(self._texts, ensure_ascii=False).encode()

    def _payload_extra(self) -> dict[str, Any]:
        return {"rescore_metric": self.rescore_metric}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        try:
            texts = json.loads(bytes(payload).decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise IndexFileError(
                f"{self.name}: payload is not a JSON list of texts: {exc}"
            ) from None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise IndexFileError(f"{self.name}: payload is not a JSON list of texts")
        extra = header.get("extra") or {}
        rescore = extra.get("rescore_metric") if isinstance(extra, dict) else None
        if rescore is not None and rescore not in METRICS:
            raise IndexFileError(f"{self.name}: header rescore_metric {rescore!r} is unknown")
        self.rescore_metric = rescore
        try:
            self._index_checked(texts)
        except InputError as exc:
            raise IndexFileError(f"{self.name}: the saved texts cannot be indexed: {exc}") from None
