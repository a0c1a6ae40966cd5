"""Corpus attributes and per-query filters at a requested selectivity.

Attributes are columns over corpus rows, ``ds.corpus.attributes[name]``: a
numpy array of length ``n`` (int64, float64 or str). Where they come from:

- ``synthetic``: ``tenant`` (int64, Zipf-distributed over up to 1 000
  tenants, one per *document*: a document's passages share it), ``category``
  (str, ``cat00``..``cat63``: 90 % of rows carry their *topic's* category, so
  a category is a region of vector space -- the correlated, hard case for
  filtered search) and ``year`` (int64, 1970-2025, each year ~13 % more
  documents than the one before; one per document). Drawn from their own seed
  stream: the vectors and texts are the same as without them.
- ``pydocs``: ``category``, the passage's module (``logging.handlers``,
  ``pydoc_data.topics``, ...), from each passage's ``metadata.source``.
- JSONL corpora: every top-level field other than ``id``/``_id``, ``text``,
  ``title`` and ``metadata``; numbers become int64/float64 columns (a missing
  value is NaN, the column then float64), anything else str (missing: ``""``).

A filter is one of two kinds: ``values`` (the row's value is in a set) or
``range`` (``lo <= value <= hi``, for numbers). :func:`attribute_kind` says
which an attribute gets by default: ``range`` for floats and for integer
attributes named like a date or amount (``year``, ``date``, ``time``,
``timestamp``, ``price``, ``size``), ``values`` otherwise.

:func:`make_filters` draws one filter per query whose allowed fraction of the
corpus is as close as it can get to a requested *selectivity*: for ``values``
a set of values (greedy: a value is taken while it brings the fraction
closer), for ``range`` the contiguous range of distinct values closest to it.
``correlated=False`` orders the candidate values at random; ``correlated=True``
takes them from the query's own exact neighbourhood first (its nearest
neighbours' values, most frequent first; a range must contain the nearest
neighbour's value), so the allowed rows lie near the query.
:func:`filters_from_specs` reads per-query filters written out
(``{"tenant": 3}``, ``{"year": [2010, 2015]}``, ``{"category": ["a", "b"]}``;
several keys must all hold; a str attribute takes strings, a number one numbers --
anything else is a DatasetError naming the attribute -- and a number the column
cannot hold exactly, ``2.5`` for an int64 one, matches no row). Both return a :class:`QueryFilters`: one boolean
mask over corpus rows per query, the filters as JSON-able dicts, and the
achieved selectivity of each.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError, DatasetError
from .settings.sources import FILTER_KEYS, check_filter_table

__all__ = [
    "FILTER_KEYS",
    "QueryFilters",
    "attribute_kind",
    "check_filter_table",
    "filter_values",
    "filters_from_specs",
    "from_fields",
    "make_filters",
    "mask_of",
    "pydocs_categories",
    "synthetic_attributes",
]

N_TENANTS = 1000
TENANT_ZIPF = 1.1  # P(tenant = t) ~ (t + 1) ** -TENANT_ZIPF, per document
N_CATEGORIES = 64
CATEGORY_FIDELITY = 0.9  # share of rows carrying their topic's category
YEARS = (1970, 2025)
YEAR_GROWTH = 0.12  # P(year) ~ exp(YEAR_GROWTH * year)
_RANGE_NAMES = {"year", "date", "time", "timestamp", "price", "size"}
_NEIGHBOURHOOD = 100  # neighbours whose values a correlated filter draws from


# --------------------------------------------------------------------------- attributes


def synthetic_attributes(topics: np.ndarray, docs: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """``tenant``, ``category`` and ``year`` of each synthetic row (see the module docstring).

    ``topics`` and ``docs``: int64 ``(n,)`` topic and document of each row.
    Deterministic from ``seed``; independent of the vector draws.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA77B]))
    n_docs = int(docs.max()) + 1 if docs.size else 0
    n_topics = int(topics.max()) + 1 if topics.size else 0
    p = np.arange(1, N_TENANTS + 1, dtype=np.float64) ** -TENANT_ZIPF
    tenant_of_doc = rng.choice(N_TENANTS, size=n_docs, p=p / p.sum())
    years = np.arange(YEARS[0], YEARS[1] + 1)
    py = np.exp(YEAR_GROWTH * (years - YEARS[1]))
    year_of_doc = rng.choice(years, size=n_docs, p=py / py.sum())
    topic_cat = rng.integers(0, N_CATEGORIES, n_topics)
    cat = topic_cat[topics]
    stray = rng.random(topics.size) >= CATEGORY_FIDELITY
    cat[stray] = rng.integers(0, N_CATEGORIES, int(stray.sum()))
    names = np.asarray([f"cat{c:02d}" for c in range(N_CATEGORIES)])
    return {
        "tenant": tenant_of_doc[docs].astype(np.int64),
        "category": names[cat],
        "year": year_of_doc[docs].astype(np.int64),
    }


def pydocs_categories(metadata: Sequence[Mapping[str, str]]) -> np.ndarray:
    """The module of each pydocs passage from ``metadata["source"]`` (``Lib/a/b.py:x`` → ``a.b``)."""
    out = []
    for meta in metadata:
        source = meta.get("source", "").rpartition(":")[0] or meta.get("source", "")
        if source.startswith("Lib/"):
            source = source[4:]
        source = source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        out.append(source)
    return np.asarray(out)


def from_fields(fields: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Attribute columns from per-row fields (JSONL fields other than id/text); see the module docstring."""
    names: dict[str, None] = {}
    for row in fields:
        names.update(dict.fromkeys(row))
    out: dict[str, np.ndarray] = {}
    for name in names:
        values = [row.get(name) for row in fields]
        present = [v for v in values if v is not None]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
        if numeric and len(present) == len(values) and all(isinstance(v, int) for v in present):
            out[name] = np.asarray(values, dtype=np.int64)
        elif numeric:
            out[name] = np.asarray([math.nan if v is None else v for v in values], np.float64)
        else:
            out[name] = np.asarray(["" if v is None else _text(v) for v in values])
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def attribute_kind(name: str, column: np.ndarray) -> str:
    """``"range"`` or ``"values"``: the filter kind ``name`` gets unless a spec says otherwise."""
    if column.dtype.kind == "f" or (column.dtype.kind in "iu" and name in _RANGE_NAMES):
        return "range"
    return "values"


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class QueryFilters:
    """One filter per query: ``masks`` bool ``(nq, n)`` (True = allowed corpus row).

    ``specs``: the filter of each query as a JSON-able dict (``{"tenant": [3,
    7]}``, ``{"year": [2010, 2015]}``); ``selectivity``: float64 ``(nq,)``
    allowed fraction of each; ``requested``: the filter table asked for
    (``attribute``, ``selectivity``, ``correlated``, ...), or ``{"from":
    "queries"}``.
    """

    masks: np.ndarray
    specs: list[dict[str, Any]]
    selectivity: np.ndarray
    requested: dict[str, Any]

    @property
    def key(self) -> str:
        """sha256 hex of the masks: what a cache of filtered neighbours is keyed by."""
        sha = hashlib.sha256(f"filters-v1{self.masks.shape}".encode())
        sha.update(np.packbits(self.masks, axis=1).data)
        return sha.hexdigest()

    def summary(self) -> dict[str, Any]:
        """For records: the request, the achieved selectivity's mean, min and max, and each query's.

        ``empty_rows``: the query rows whose filter allows no corpus row (their
        results are empty and their recall is 1.0, nothing to find).
        """
        s = self.selectivity
        return {
            **self.requested,
            "achieved_mean": float(s.mean()),
            "achieved_min": float(s.min()),
            "achieved_max": float(s.max()),
            "achieved_per_query": s.tolist(),
            "empty_rows": np.flatnonzero(~self.masks.any(axis=1)).tolist(),
        }

    def subset(self, nq: int) -> QueryFilters:
        """The filters of the first ``nq`` queries."""
        return QueryFilters(
            self.masks[:nq], self.specs[:nq], self.selectivity[:nq], dict(self.requested)
        )


def _column(attributes: Mapping[str, np.ndarray], name: str | None) -> tuple[str, np.ndarray]:
    if not attributes:
        raise DatasetError(
            "this dataset has no attributes to filter on (synthetic has tenant, category, year; "
            "pydocs category; JSONL corpora their fields other than id/text)"
        )
    if name is None:
        name = next(iter(attributes))
    if name not in attributes:
        raise ConfigError(
            f"filter attribute {name!r} is not one of this dataset's: {', '.join(attributes)}"
        )
    return name, attributes[name]


def make_filters(
    attributes: Mapping[str, np.ndarray],
    table: Mapping[str, Any],
    nq: int,
    neighbours: np.ndarray | None = None,
) -> QueryFilters:
    """One filter per query at the table's ``selectivity`` (see the module docstring).

    ``table``: checked by :func:`check_filter_table`. ``neighbours``: int64
    ``(nq, m)`` exact nearest rows of each query, best first (needed when
    ``correlated``). Deterministic from the table's ``seed``.
    """
    spec = check_filter_table("[retrieve]", table)
    name, column = _column(attributes, spec["attribute"])
    kind = spec["kind"] or attribute_kind(name, column)
    if kind == "range" and column.dtype.kind not in "iuf":
        raise ConfigError(f"filter attribute {name!r} holds text: a range filter needs numbers")
    if spec["correlated"] and neighbours is None:
        raise ConfigError("a correlated filter needs each query's exact neighbours")
    rng = np.random.default_rng(np.random.SeedSequence([spec["seed"], 0xF117]))
    inverse, low, high = _codes(column, kind)
    frac = np.bincount(inverse, minlength=low.size) / column.size
    target = spec["selectivity"]
    masks = np.zeros((nq, column.size), dtype=bool)
    specs: list[dict[str, Any]] = []
    for i in range(nq):
        near = None if not spec["correlated"] or neighbours is None else neighbours[i]
        near_codes = None if near is None else inverse[near[near >= 0][:_NEIGHBOURHOOD]]
        if kind == "range":
            lo, hi = _pick_range(frac, target, near_codes, rng)
            masks[i] = (inverse >= lo) & (inverse <= hi)
            specs.append({name: [_plain(low[lo]), _plain(high[hi])]})
        else:
            chosen = _pick_values(frac, target, near_codes, rng)
            masks[i] = np.isin(inverse, chosen)
            specs.append({name: [_plain(low[c]) for c in sorted(chosen)]})
    requested = {"attribute": name, "kind": kind, "selectivity": target}
    requested.update(correlated=spec["correlated"], seed=spec["seed"])
    return QueryFilters(masks, specs, masks.mean(axis=1), requested)


_MAX_RANGE_CODES = 256


def _codes(column: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(code of each row, lowest and highest value of each code), codes in value order.

    A code is a distinct value; for a range over more than 256 distinct
    values, one of 256 quantile buckets (a range then starts and ends on
    bucket edges).
    """
    values, inverse = np.unique(column, return_inverse=True)
    inverse = inverse.ravel()
    if kind != "range" or values.size <= _MAX_RANGE_CODES:
        return inverse, values, values
    edges = np.unique(np.quantile(values[inverse], np.linspace(0, 1, _MAX_RANGE_CODES + 1)))
    bucket = np.searchsorted(edges[1:-1], values, side="right")
    bucket_of_value = np.unique(bucket, return_inverse=True)[1].ravel()  # no empty buckets
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], bucket_of_value])))
    ends = np.concatenate([starts[1:], [values.size]]) - 1
    return bucket_of_value[inverse], values[starts], values[ends]


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _pick_values(
    frac: np.ndarray, target: float, near: np.ndarray | None, rng: np.random.Generator
) -> list[int]:
    """Value codes whose total fraction is close to ``target``: greedy over a candidate order.

    A value is taken when the total stays within 10 % above the target;
    the loop stops once the total is within 1 % of it.
    """
    order = rng.permutation(frac.size)
    if near is not None and near.size:
        codes, hits = np.unique(near, return_counts=True)
        first = codes[np.lexsort((rng.random(codes.size), -hits))]
        order = np.concatenate([first, order[~np.isin(order, first)]])
    chosen: list[int] = []
    total = 0.0
    for code in order.tolist():
        f = float(frac[code])
        if total + f <= 1.1 * target:
            chosen.append(code)
            total += f
            if abs(total - target) <= 0.01 * target:
                break
    if not chosen:  # every value overshoots by more than the target: take the smallest
        chosen = [int(order[np.argmin(frac[order])])]
    return chosen


def _pick_range(
    frac: np.ndarray, target: float, near: np.ndarray | None, rng: np.random.Generator
) -> tuple[int, int]:
    """(first, last) value code of a contiguous range whose fraction is closest to ``target``.

    Among ranges within 5 % (relative) of the best error one is drawn at
    random; a correlated one must contain a value of the neighbourhood
    ``near``, and of the ranges near the best error the one holding most
    of the neighbourhood is taken.
    """
    cum = np.concatenate([[0.0], np.cumsum(frac)])
    lo, hi = np.triu_indices(frac.size)
    err = np.abs(cum[hi + 1] - cum[lo] - target)
    held = np.zeros(lo.size)
    if near is not None and near.size:
        cum_near = np.concatenate([[0], np.cumsum(np.bincount(near, minlength=frac.size))])
        held = (cum_near[hi + 1] - cum_near[lo]).astype(np.float64)
        holds = held > 0
        lo, hi, err, held = lo[holds], hi[holds], err[holds], held[holds]
    good = np.flatnonzero(err <= err.min() + 0.05 * target)
    best = good[held[good] == held[good].max()]
    pick = int(rng.choice(best))
    return int(lo[pick]), int(hi[pick])


def mask_of(attributes: Mapping[str, np.ndarray], spec: Mapping[str, Any]) -> np.ndarray:
    """Bool ``(n,)`` rows a written-out filter allows; every key must hold (see the module docstring)."""
    if not isinstance(spec, Mapping) or not spec:
        raise DatasetError(f"a query filter must be a non-empty object, got {spec!r}")
    mask: np.ndarray | None = None
    for name, want in spec.items():
        name, column = _column(attributes, str(name))
        ranged = attribute_kind(name, column) == "range" and column.dtype.kind in "iuf"
        if isinstance(want, list) and len(want) == 2 and ranged:
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in want):
                raise DatasetError(f"filter {spec!r}: a range needs two numbers")
            if want[0] != want[0] or want[1] != want[1]:  # as the engines' where= refuses it
                raise DatasetError(f"filter {spec!r}: a range bound is NaN")
            one = (column >= want[0]) & (column <= want[1])
        else:
            one = np.isin(column, filter_values(name, column, want, spec))
        mask = one if mask is None else mask & one
    assert mask is not None
    return mask


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def filter_values(name: str, column: np.ndarray, want: Any, spec: Mapping[str, Any]) -> np.ndarray:
    """The values a ``values`` filter key ``name: want`` allows, 1-D in the column's dtype.

    ``want`` is one value or a list of them. A str column takes strings (at
    their own width: the column's would truncate them, and a longer value
    would match a row holding its prefix); a number column (int64, float64)
    takes numbers (not bools). Anything else raises DatasetError naming the
    attribute. A number the column's type cannot hold exactly is left out --
    it matches no row: ``2.5``, NaN or ``2**63`` for int64 (``2.0`` is ``2``),
    ``2**53 + 1`` for float64 (NaN too: it equals nothing).
    """
    wanted = [
        v.item() if isinstance(v, np.generic) else v
        for v in (want if isinstance(want, list) else [want])
    ]
    kind = column.dtype.kind
    if kind == "U":
        _check_types(name, wanted, spec, str, "str", "strings")
        return np.asarray(wanted, dtype=str)
    if kind == "f":
        _check_types(name, wanted, spec, _is_number, str(column.dtype), "numbers")
        return np.asarray([v for v in wanted if _exact_float(v)], dtype=column.dtype)
    if kind in "iu":
        _check_types(name, wanted, spec, _is_number, str(column.dtype), "numbers")
        info = np.iinfo(column.dtype)
        held = [int(v) for v in wanted if (type(v) is int or float(v).is_integer())]
        return np.asarray([v for v in held if info.min <= v <= info.max], dtype=column.dtype)
    try:
        return np.asarray(wanted, dtype=column.dtype)
    except (TypeError, ValueError, OverflowError):
        raise DatasetError(
            f"filter {dict(spec)!r}: {want!r} is not a value of attribute {name!r}"
        ) from None


def _exact_float(value: float) -> bool:
    """Whether a float64 holds ``value`` exactly (Python compares an int and a float exactly)."""
    try:
        return float(value) == value
    except OverflowError:  # an int past float64's range
        return False


def _check_types(
    name: str, wanted: list[Any], spec: Mapping[str, Any], ok: Any, dtype: str, takes: str
) -> None:
    """DatasetError for the first value of ``wanted`` that ``ok`` refuses (a type or a predicate)."""
    for v in wanted:
        if not (isinstance(v, ok) if isinstance(ok, type) else ok(v)):
            raise DatasetError(
                f"filter {dict(spec)!r}: {v!r} is not a value of attribute {name!r} "
                f"({dtype}: {takes} only)"
            )


def filters_from_specs(
    attributes: Mapping[str, np.ndarray], specs: Sequence[Mapping[str, Any] | None]
) -> QueryFilters:
    """The filters written per query (``None``: that query allows every row)."""
    n = next(iter(attributes.values())).size if attributes else 0
    if not attributes:
        _column(attributes, None)  # raises: nothing to filter on
    masks = np.ones((len(specs), n), dtype=bool)
    out: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        if spec is not None:
            masks[i] = mask_of(attributes, spec)
        out.append(dict(spec) if spec is not None else {})
    return QueryFilters(masks, out, masks.mean(axis=1), {"from": "queries"})
