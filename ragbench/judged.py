"""Answer quality against judged answers (qrels): nDCG@10, MRR@10 and recall@100.

Recall against exact search says whether an index found the neighbours the
vectors have; judged answers say whether the passages that reach the LLM
answer the question. A dataset's judgments (BEIR ``qrels``, ``relevant`` in
``queries.jsonl``, a ``qrels.tsv`` beside the corpus; read by
:mod:`ragbench.datasets`) become :class:`Judgments`: per query row, the grade
(an integer >= 0) of each judged corpus row. A passage nobody judged has grade 0.

Definitions (trec_eval's, so that ``pytrec_eval`` gives the same numbers;
``tests/test_judged.py`` checks it to 1e-9), for one query's ranked list
``d_1, d_2, ...`` (corpus rows, best first) and grades ``g``:

- relevant: grade >= 1.
- nDCG@10 = DCG@10 / IDCG@10 with DCG@10 = sum over i = 1..min(10, n) of
  ``gain(d_i) / log2(i + 1)`` and a linear gain, ``gain = grade`` (as trec_eval's
  ``ndcg_cut`` and BEIR; not ``2^grade - 1``). IDCG@10 is the same sum over the
  query's judged grades sorted from the highest down.
- MRR@10: ``1 / i`` for the first relevant ``d_i`` with ``i <= 10``, else 0.
- recall@100: relevant passages among ``d_1..d_m`` over all the query's relevant
  passages, with ``m = min(100, results returned)``: a run returning k < 100
  results is judged on those k (the depth is recorded and printed; raise k to
  100 for the full depth). Nothing is searched again to judge a run.

A list's ``-1`` padding ranks nothing, and a row repeated in a list counts at
its first place only. A query counts when it has at least one relevant
passage; a query without judgments, or judged with grade 0 only, is left out
of every mean (its nDCG is undefined) and reads NaN per query. Means come with
a percentile-bootstrap interval over the judged queries
(:func:`ragbench.intervals.bootstrap`): a query asked several times (repeated
runs, more requests than queries) first gets the mean of its requests, so each
query weighs the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import intervals
from .errors import InputError

__all__ = [
    "MEASURES",
    "MRR_AT",
    "NDCG_AT",
    "RECALL_AT",
    "Judgments",
    "dcg",
    "merge_builds",
    "ndcg",
    "recall",
    "reciprocal_rank",
    "scores",
    "summary",
]

#: Depth of nDCG (nDCG@10).
NDCG_AT = 10
#: Depth of the reciprocal rank (MRR@10).
MRR_AT = 10
#: Depth of the judged recall (recall@100), when that many results are returned.
RECALL_AT = 100
#: The measures, as the keys of :func:`scores` and of a record's ``judged`` object.
MEASURES = ("ndcg_at_10", "mrr_at_10", "recall_at_100")


class Judgments:
    """Judged answers by row: ``grades[q]`` maps corpus row -> grade (int >= 0) for query row ``q``.

    ``source`` says where they came from (a file, for messages and records).
    An empty mapping is a query nobody judged.
    """

    __slots__ = ("grades", "source")

    def __init__(self, grades: Sequence[Mapping[int, int]], source: str) -> None:
        self.grades = [dict(g) for g in grades]
        self.source = source

    def __len__(self) -> int:
        return len(self.grades)

    def counts(self) -> list[int]:
        """Judgments (judged passages, any grade) of each query row."""
        return [len(g) for g in self.grades]

    def relevant_counts(self) -> list[int]:
        """Relevant passages (grade >= 1) of each query row."""
        return [sum(1 for v in g.values() if v >= 1) for g in self.grades]

    def judged_rows(self) -> np.ndarray:
        """int64 query rows with at least one relevant passage (the queries that count)."""
        return np.flatnonzero(np.asarray(self.relevant_counts(), dtype=np.int64) > 0)

    def subset(self, n: int) -> Judgments:
        """The judgments of the first ``n`` query rows."""
        return Judgments(self.grades[:n], self.source)


def _first_places(ranked: Sequence[int] | np.ndarray, depth: int) -> list[int]:
    """The rows of ``ranked[:depth]`` in order, without -1 pads and repeats (first place kept)."""
    seen: set[int] = set()
    out: list[int] = []
    for place, row in enumerate(ranked):
        if place >= depth:
            break
        r = int(row)
        if r < 0 or r in seen:
            out.append(-1)  # keeps the places of the rows after it
            continue
        seen.add(r)
        out.append(r)
    return out


def dcg(gains: Sequence[float]) -> float:
    """``sum(gain_i / log2(i + 1))`` over places ``i = 1, 2, ...`` (linear gain)."""
    return float(sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g))


def ndcg(
    ranked: Sequence[int] | np.ndarray, grades: Mapping[int, int], depth: int = NDCG_AT
) -> float:
    """nDCG@``depth`` of one ranked list (corpus rows, best first); NaN without a relevant passage."""
    ideal = dcg(sorted(grades.values(), reverse=True)[:depth])
    if ideal <= 0:
        return float("nan")
    got = dcg([grades.get(r, 0) if r >= 0 else 0 for r in _first_places(ranked, depth)])
    return got / ideal


def reciprocal_rank(
    ranked: Sequence[int] | np.ndarray, grades: Mapping[int, int], depth: int = MRR_AT
) -> float:
    """``1 / place`` of the first relevant row among the first ``depth``; 0 if none; NaN unjudged."""
    if not any(v >= 1 for v in grades.values()):
        return float("nan")
    for place, r in enumerate(_first_places(ranked, depth), start=1):
        if r >= 0 and grades.get(r, 0) >= 1:
            return 1.0 / place
    return 0.0


def recall(
    ranked: Sequence[int] | np.ndarray, grades: Mapping[int, int], depth: int = RECALL_AT
) -> float:
    """Relevant rows among the first ``depth`` over all relevant rows; NaN without one."""
    relevant = {r for r, v in grades.items() if v >= 1}
    if not relevant:
        return float("nan")
    found = {r for r in _first_places(ranked, depth) if r in relevant}
    return len(found) / len(relevant)


def scores(
    ranked: np.ndarray, query_rows: Sequence[int] | np.ndarray, judgments: Judgments
) -> dict[str, np.ndarray]:
    """Per list: :data:`MEASURES` -> float64 ``(m,)`` (NaN for a query that does not count).

    ``ranked``: int64 ``(m, depth)`` corpus rows, best first, -1 padded;
    ``query_rows[i]``: the query row list ``i`` answers. recall@100 is computed
    on ``min(100, depth)`` places (:func:`depth_of`).
    """
    ranked = np.asarray(ranked)
    rows = np.asarray(query_rows, dtype=np.int64)
    if ranked.ndim != 2 or rows.shape != (ranked.shape[0],):
        raise InputError(
            f"judged scores: ranked must be (m, depth) with one query row each, got "
            f"{ranked.shape} and {rows.shape}"
        )
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= len(judgments)):
        raise InputError(f"judged scores: query rows outside [0, {len(judgments)})")
    m = ranked.shape[0]
    out = {name: np.full(m, np.nan) for name in MEASURES}
    deep = depth_of(ranked.shape[1])
    for i in range(m):
        g = judgments.grades[int(rows[i])]
        if not g:
            continue
        out["ndcg_at_10"][i] = ndcg(ranked[i], g)
        out["mrr_at_10"][i] = reciprocal_rank(ranked[i], g)
        out["recall_at_100"][i] = recall(ranked[i], g, deep)
    return out


def depth_of(returned: int) -> int:
    """The places recall@100 is computed on when ``returned`` results come back: ``min(100, returned)``."""
    return min(RECALL_AT, int(returned))


def _per_query(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The mean of each query row's values (NaN ones dropped), one per judged query, by row."""
    keep = ~np.isnan(values)
    if not keep.any():
        return np.zeros(0)
    uniq, inverse = np.unique(rows[keep], return_inverse=True)
    sums = np.bincount(inverse, weights=values[keep], minlength=uniq.size)
    return sums / np.bincount(inverse, minlength=uniq.size)


def summary(
    per: Mapping[str, np.ndarray],
    query_rows: Sequence[int] | np.ndarray,
    judgments: Judgments,
    *,
    returned: int,
) -> dict[str, Any]:
    """The ``judged`` object of a record: means over judged queries with 95 % intervals.

    ``per``: :func:`scores` of ``m`` lists; ``query_rows``: their query rows;
    ``returned``: results per list (the depth recall@100 was computed on is
    ``min(100, returned)``). Keys: ``qrels`` (source), ``queries`` (judged
    queries measured), ``measured`` (distinct queries measured), ``depth``,
    ``gain`` (``"linear"``), then per measure its mean and ``<measure>_ci``
    ([low, high]), and ``per_query`` (measure -> each list's value, NaN for a
    query that does not count, in request order).
    """
    rows = np.asarray(query_rows, dtype=np.int64)
    out: dict[str, Any] = {
        "qrels": judgments.source,
        "measured": int(np.unique(rows).size),
        "depth": depth_of(returned),
        "gain": "linear",
    }
    for name in MEASURES:
        each = _per_query(np.asarray(per[name], dtype=np.float64), rows)
        out["queries"] = int(each.size)
        iv = intervals.bootstrap(each, "mean")
        out[name] = iv.value
        out[f"{name}_ci"] = [iv.low, iv.high]
    out["per_query"] = {name: [round(float(v), 9) for v in per[name]] for name in MEASURES}
    return out


def merge_builds(
    summaries: Sequence[Mapping[str, Any] | None], *, pool: str
) -> dict[str, Any] | None:
    """The ``judged`` object of one configuration measured on several builds (``--rebuilds N``).

    As recall over builds (:mod:`ragbench.results.rebuilds`): each measure is the mean of
    the builds' means and its interval the envelope of the builds' intervals
    (where one build's lands); ``per_query`` is every build's values one after
    the other (``pool="concat"``: a run's pooled requests) or each query's mean
    over the builds (``pool="mean"``: a sweep point's queries). ``None`` when no
    build was judged.
    """
    got = [s for s in summaries if s is not None]
    if not got:
        return None
    out = dict(got[0])
    for name in MEASURES:
        values = [float(s[name]) for s in got]
        lows = [float(s[f"{name}_ci"][0]) for s in got]
        highs = [float(s[f"{name}_ci"][1]) for s in got]
        out[name] = float(np.mean(values))
        out[f"{name}_ci"] = [float(np.min(lows)), float(np.max(highs))]
        out[f"{name}_builds"] = values
    per = [s.get("per_query") or {} for s in got]
    if pool == "concat":
        out["per_query"] = {name: [v for p in per for v in p.get(name, [])] for name in MEASURES}
    else:
        out["per_query"] = {name: _mean_over(per, name) for name in MEASURES}
    out["rebuilds"] = len(got)
    return out


def _mean_over(per: Sequence[Mapping[str, Any]], name: str) -> list[float]:
    """Each position's mean over the builds' ``per[b][name]`` lists, NaN where every build has NaN."""
    values = np.asarray([p[name] for p in per], dtype=np.float64)
    seen = (~np.isnan(values)).sum(axis=0)
    sums = np.nansum(values, axis=0)
    means = np.full(values.shape[1], np.nan)
    np.divide(sums, seen, out=means, where=seen > 0)
    return [round(float(v), 9) for v in means]
