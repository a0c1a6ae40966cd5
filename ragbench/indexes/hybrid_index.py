"""``hybrid`` backend: a dense index and a lexical one, their candidates fused by rank.

Build and search take both inputs at once (``input_kind == "both"``): a
:class:`Pair` of the corpus vectors ``float32 (n, dim)`` and its texts, and
a :class:`Pair` of query vectors ``(nq, dim)`` and query texts. A pipeline
gives it both. Build parameters:

``dense`` / ``lexical``
    The two backends (``flat`` and ``bm25`` by default; any dense one and
    any lexical one), each made with the pipeline's ``dim`` and ``metric``
    and its own ``dense_build`` / ``lexical_build`` table; ``dense_search``
    is the dense side's search parameters (``{ef = 64}``).
``fusion``
    ``rrf`` (reciprocal rank fusion, ``k_rrf``, default 60) or ``weighted``
    (min-max normalised scores, ``alpha`` times the dense side's plus
    ``1 - alpha`` times the lexical side's; ``alpha`` in [0, 1]), by the
    compiled kernels of :mod:`ragbench.fusion`; the scores returned are the
    fused ones (``index.metric`` names them).
``candidates``
    How many candidates each side returns before fusion (0: the search's
    ``k``, capped at the corpus size).
``concurrent``
    ``False`` (default): the dense search, then the lexical one, on the
    calling thread. ``True``: the lexical search runs on a second thread
    (one per index, started at build) while the dense one runs on the
    calling thread. ``info()["retrievers"]`` says which.

Timed parts of each search (``last_parts()``, the run record's
``retrieve_parts``): ``dense`` and ``lexical`` (each side's own search call,
measured on the thread that ran it: concurrent, they overlap, and the
retrieve stage takes about the longer of the two) and ``fuse`` (the fusion
of the two lists, with its arrays). A side that returns nothing (a query of
only stop words) leaves the other side's list, fused alone; both empty: a
row of pads. Filters and writes are not offered (``ragbench stream``
refuses it), and ``ragbench sweep`` (vectors only) cannot build it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, IndexFileError, InputError
from ..timing import Parts
from ..validate import METRICS, check_k, check_metric
from ..validate import positive_int as int_param
from ._arrays import F32, I64
from ._lexical import texts_of
from .base import BaseIndex

__all__ = ["HybridIndex", "Pair", "pair_of"]

_perf = time.perf_counter_ns


class Pair:
    """Vectors and texts of the same rows: ``Pair(vectors float32 (n, dim), texts list[str])``.

    Slicing slices both (``pair[:1]``); ``len`` is the number of rows.
    """

    __slots__ = ("texts", "vectors")

    def __init__(self, vectors: Any, texts: Any) -> None:
        self.vectors = vectors
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, rows: slice) -> Pair:
        return Pair(self.vectors[rows], self.texts[rows])


def pair_of(data: Any, what: str, owner: str = "hybrid") -> Pair:
    """``data`` as a :class:`Pair` (a Pair or a 2-tuple), else :class:`InputError` naming it."""
    if isinstance(data, Pair):
        return data
    if isinstance(data, tuple) and len(data) == 2:
        return Pair(*data)
    hint = ""
    if isinstance(data, np.ndarray):  # what ragbench sweep gives every index
        hint = (
            f" (ragbench sweep times indexes of vectors or of texts: time {owner} with run, "
            "compare or load)"
        )
    raise InputError(
        f"index {owner!r}: {what} must be a Pair (or a tuple) of vectors and texts, "
        f"got {type(data).__name__}{hint}"
    )


def _declared(side: Any, what: str) -> bool:
    """A side's ``DeclaresBuild`` property ``what``; False when it does not declare it."""
    from .contract import DeclaresBuild

    return isinstance(side, DeclaresBuild) and bool(getattr(side, what))


class HybridIndex(BaseIndex):
    """A dense and a lexical index fused by rank; see the module docstring."""

    name: ClassVar[str] = "hybrid"
    input_kind: ClassVar[Any] = "both"
    library: ClassVar[str] = "ragbench"
    supported_metrics: ClassVar[tuple[str, ...]] = ("rrf", "weighted")
    payload_format: ClassVar[str] = "ragbench.hybrid-f32-rows+texts-json"
    part_names: ClassVar[tuple[str, str, str]] = ("dense", "lexical", "fuse")
    build_defaults: ClassVar[dict[str, Any]] = {
        "dense": "flat",
        "lexical": "bm25",
        "fusion": "rrf",
        "k_rrf": 60.0,
        "alpha": 0.5,
        "candidates": 0,
        "concurrent": False,
        "dense_build": {},
        "lexical_build": {},
        "dense_search": {},
    }

    def __init__(self, dim: int | None = None, metric: str = "ip", **build_params: Any) -> None:
        owner = f"index {self.name!r}"
        if dim is None:
            raise ConfigError(f"{owner}: pass dim=<vector width>, e.g. dim=384")
        fusion = build_params.get("fusion", "rrf")
        if fusion not in self.supported_metrics:
            raise ConfigError(f"{owner}: fusion {fusion!r} is not one of rrf, weighted")
        #: the vector metric of the dense side (and the rerank stage)
        self.rescore_metric = (
            check_metric(owner, metric, METRICS) if metric not in ("rrf", "weighted") else None
        )
        self._init_common(int_param(owner, "dim", dim), fusion, build_params)
        self._dense: Any = None
        self._lexical: Any = None
        self._make_sides(self.rescore_metric or "ip")
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None
        self._rows: Pair | None = None

    def _make_sides(self, vector_metric: str) -> None:
        from . import create

        p, owner = self.build_params, f"index {self.name!r}"
        dense: Any = create(p["dense"], dim=self.dim, metric=vector_metric, **p["dense_build"])
        lexical: Any = create(p["lexical"], metric=vector_metric, **p["lexical_build"])
        if dense.input_kind != "vectors" or lexical.input_kind != "texts":
            raise ConfigError(
                f"{owner}: dense={p['dense']!r} must be an index of vectors and "
                f"lexical={p['lexical']!r} one of texts"
            )
        check = getattr(dense, "check_query_params", None)  # a base-class helper, not contract
        if callable(check):
            check(p["dense_search"])
        self._dense, self._lexical = dense, lexical

    @property
    def build_deterministic(self) -> bool:
        """Both sides' one-thread builds are reproducible (a side that does not say: no)."""
        return all(_declared(side, "build_deterministic") for side in (self._dense, self._lexical))

    @property
    def build_cacheable(self) -> bool:
        """The build cache may keep it: both sides may be kept (a database side may not)."""
        return all(_declared(side, "build_cacheable") for side in (self._dense, self._lexical))

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        if params["fusion"] not in self.supported_metrics:
            raise ConfigError(f"{owner}: fusion {params['fusion']!r} is not one of rrf, weighted")
        from ..fusion import reciprocal_rank_fusion, weighted_fusion

        try:  # the fusion's own checks of k_rrf and alpha, on an empty fusion
            reciprocal_rank_fusion([], [], k_rrf=params["k_rrf"])
            weighted_fusion([], [], [], [], alpha=params["alpha"])
        except ConfigError as exc:
            raise ConfigError(f"{owner}: {exc}") from None
        params["candidates"] = int_param(owner, "candidates", params["candidates"], lo=0)
        if not isinstance(params["concurrent"], bool):
            raise ConfigError(f"{owner}: concurrent must be true or false")
        for key in ("dense_build", "lexical_build", "dense_search"):
            if not isinstance(params[key], dict):
                raise ConfigError(f"{owner}: {key} must be a table of parameters")
            params[key] = dict(params[key])
        return params

    # -- build ----------------------------------------------------------------------

    def build(self, data: Any) -> None:
        """Build both sides: ``data`` a :class:`Pair` of ``n >= 1`` vectors and ``n`` texts."""
        pair = pair_of(data, "the corpus")
        texts = texts_of(pair.texts, "corpus texts")
        if len(texts) != len(pair.vectors):
            raise InputError(
                f"index 'hybrid': {len(pair.vectors)} corpus vectors but {len(texts)} texts"
            )
        if not texts:
            raise InputError("index 'hybrid': the corpus is empty; pass at least one row")

        def run() -> None:
            self._dense.build(pair.vectors)
            self._lexical.build(texts)
            t0 = _perf()  # the fusion kernels compile (or load numba's cache) on first use
            pad = np.full((1, 1), -1, dtype=I64)
            self._fuse(pad, pad.astype(F32), pad, pad.astype(F32), 1)
            self.compile_ns = (_perf() - t0) + sum(
                int(getattr(side, "compile_ns", 0)) for side in (self._dense, self._lexical)
            )
            if self.build_params["concurrent"] and self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="ragbench-hybrid-lexical")
            self._rows = Pair(pair.vectors, texts)
            self._n = len(texts)

        self._timed_build(run)

    # -- search ---------------------------------------------------------------------

    def _lexical_timed(self, texts: list[str], k: int) -> tuple[Any, Any, int]:
        t0 = _perf()
        ids, scores = self._lexical.search(texts, k)
        return ids, scores, _perf() - t0

    def search(self, queries: Any, k: int, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best rows per query by the fused ranking.

        Args:
            queries: a :class:`Pair` of query vectors ``float32 (nq, dim)`` and
                ``nq`` query texts.
            k: results per query, ``1 <= k <= ntotal``.

        Returns:
            ``ids`` int64 ``(nq, k)``, ``scores`` float32 ``(nq, k)`` (fused:
            RRF or the weighted sum), ``-1`` / ``-inf`` padded.
        """
        if params:
            self._parse_query(params)
        if self._rows is None:
            raise self._not_built()
        pair = pair_of(queries, "queries")
        texts = texts_of(pair.texts, "query texts")
        k = check_k(k, self._n)
        side = min(self._n, max(k, self.build_params["candidates"] or k))
        pool, dsearch = self._pool, self.build_params["dense_search"]
        t0 = _perf()
        if pool is not None:
            lexical = pool.submit(self._lexical_timed, texts, side)
            d_ids, d_scores = self._dense.search(pair.vectors, side, **dsearch)
            t_dense = _perf() - t0
            l_ids, l_scores, t_lex = lexical.result()
        else:
            d_ids, d_scores = self._dense.search(pair.vectors, side, **dsearch)
            t_dense = _perf() - t0
            l_ids, l_scores, t_lex = self._lexical_timed(texts, side)
        if len(texts) != d_ids.shape[0]:
            raise InputError(
                f"index 'hybrid': {d_ids.shape[0]} query vectors but {len(texts)} texts"
            )
        t1 = _perf()
        ids, scores = self._fuse(d_ids, d_scores, l_ids, l_scores, k)
        self._local.parts = (t_dense, t_lex, _perf() - t1)
        return ids, scores

    def _fuse(
        self, d_ids: Any, d_scores: Any, l_ids: Any, l_scores: Any, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        from ..fusion import reciprocal_rank_fusion, weighted_fusion

        p = self.build_params
        nq = d_ids.shape[0]
        ids = np.full((nq, k), -1, dtype=I64)
        scores = np.full((nq, k), -np.inf, dtype=F32)
        for row in range(nq):
            if p["fusion"] == "rrf":
                f_ids, f_scores = reciprocal_rank_fusion(
                    d_ids[row], l_ids[row], k_rrf=p["k_rrf"], limit=k
                )
            else:
                keep_d, keep_l = d_ids[row] >= 0, l_ids[row] >= 0
                f_ids, f_scores = weighted_fusion(
                    d_ids[row][keep_d],
                    d_scores[row][keep_d].astype(np.float64),
                    l_ids[row][keep_l],
                    l_scores[row][keep_l].astype(np.float64),
                    alpha=p["alpha"],
                    limit=k,
                )
            ids[row, : f_ids.size] = f_ids
            scores[row, : f_ids.size] = f_scores
        return ids, scores

    def last_parts(self) -> Parts | None:
        """This thread's last search as :class:`~ragbench.timing.Parts` ``dense``, ``lexical``,
        ``fuse`` (ns), or ``None``."""
        ns: tuple[int, int, int] | None = getattr(self._local, "parts", None)
        return None if ns is None else Parts(self.part_names, ns)

    # -- the rest of the contract -----------------------------------------------------

    def memory_bytes(self) -> int:
        """Both sides' ``memory_bytes()`` summed."""
        if self._rows is None:
            raise self._not_built()
        return int(self._dense.memory_bytes()) + int(self._lexical.memory_bytes())

    def info(self) -> dict[str, Any]:
        """:meth:`BaseIndex.info` plus each side's ``info()`` and how they ran."""
        out = super().info()
        out["search_parts"] = list(self.part_names)
        out["retrievers"] = (
            "concurrent (the lexical side on a second thread)"
            if self.build_params["concurrent"]
            else "sequential (dense, then lexical, on the calling thread)"
        )
        out["rescore_metric"] = self.rescore_metric
        if self._rows is not None:
            out["dense_index"] = self._dense.info()
            out["lexical_index"] = self._lexical.info()
        return out

    def close(self) -> None:
        """Stop the second thread and close both sides (a database side stops its server)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for side in (self._dense, self._lexical):
            closer = getattr(side, "close", None)
            if callable(closer):
                closer()
        self._rows = None
        self._n = 0

    def _payload(self) -> bytes:
        rows = self._rows
        if rows is None:
            raise self._not_built()
        import json

        vectors = np.ascontiguousarray(rows.vectors, dtype="<f4").tobytes()
        return vectors + json.dumps(rows.texts, ensure_ascii=False).encode()

    def _payload_extra(self) -> dict[str, Any]:
        return {
            "rescore_metric": self.rescore_metric,
            "vector_bytes": 4 * self._n * int(self.dim or 0),
        }

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        import json

        extra = header.get("extra") if isinstance(header.get("extra"), dict) else {}
        cut = extra.get("vector_bytes") if isinstance(extra, dict) else None
        width = 4 * int(self.dim or 0)
        if not isinstance(cut, int) or not width or cut % width or cut > len(payload):
            raise IndexFileError(
                f"{self.name}: header vector_bytes {cut!r} does not fit the payload"
            )
        vectors = np.frombuffer(payload[:cut], dtype="<f4").reshape(-1, width // 4).astype(F32)
        try:
            texts = json.loads(bytes(payload[cut:]).decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise IndexFileError(f"{self.name}: payload texts are not JSON: {exc}") from None
        rescore = extra.get("rescore_metric") if isinstance(extra, dict) else None
        if rescore is not None and rescore not in METRICS:
            raise IndexFileError(f"{self.name}: header rescore_metric {rescore!r} is unknown")
        if rescore != self.rescore_metric:  # the dense side as it was saved
            self.rescore_metric = rescore
            self._make_sides(rescore or "ip")
        try:
            self.build(Pair(vectors, texts))
        except InputError as exc:
            raise IndexFileError(f"{self.name}: the saved rows cannot be indexed: {exc}") from None
