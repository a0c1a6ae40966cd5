"""A filter value the column cannot hold exactly matches nothing, on every path.

The same corpus and specs go through ``mask_of`` (ragbench's masks, the
``pre``/``post`` strategies and the filtered ground truth), pgvector's SQL
``WHERE`` (on ragbench's shared test server) and LanceDB's SQL prefilter.
The SQL paths are given an all-allowed ``filter`` beside ``where=``, so what
comes back is what the SQL alone selected: a ``2.5`` cast to ``2`` there
would bring back the rows holding 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pgshared
import pytest

import ragbench as rb
from ragbench.attributes import filters_from_specs, mask_of
from ragbench.errors import DatasetError

N, DIM, NQ, K = 400, 8, 5, 10
_RNG = np.random.default_rng(11)
X = _RNG.standard_normal((N, DIM)).astype(np.float32)
Q = _RNG.standard_normal((NQ, DIM)).astype(np.float32)
ATTRS: dict[str, np.ndarray] = {
    "tenant": np.arange(N, dtype=np.int64) % 5,  # 0..4, 80 rows each
    # 2.0 (int-valued), 2.5 and 2**53 (float64 holds it; 2**53 + 1 it does not)
    "score": np.array([2.0, 2.5, 0.75, 2.0**53] * (N // 4)),
    "category": np.array(["a", "3", "b", "2"] * (N // 4)),
}
#: (spec, the spec with the same rows, written with values the column holds)
SAME = [
    ({"tenant": [2.5, 3]}, {"tenant": 3}),
    ({"tenant": 2.0}, {"tenant": 2}),
    ({"tenant": [1, 2**70, -(2**64), float("nan"), float("inf")]}, {"tenant": 1}),
    # (score is a range attribute: a list of two numbers would be a range)
    ({"score": 2}, {"score": 2.0}),
    ({"score": [2**53 + 1, 0.75, 99.0]}, {"score": 0.75}),
    ({"score": [10**400, 2.5, 7.0]}, {"score": 2.5}),
    ({"tenant": [0.5, 4], "category": ["a", "b"]}, {"tenant": 4, "category": ["a", "b"]}),
]
NOTHING = [{"tenant": 2.5}, {"tenant": [1.5, 3.25]}, {"score": 2**53 + 1}]
#: (spec, the attribute the error names)
WRONG_TYPE = [
    ({"tenant": "3"}, "tenant"),
    ({"tenant": [3, "x"]}, "tenant"),
    ({"tenant": True}, "tenant"),
    ({"score": "2.5"}, "score"),
    ({"category": 3}, "category"),
    ({"category": ["a", None]}, "category"),
]


def _index(name: str) -> Any:
    params = {"dsn": pgshared.dsn(), "index": "flat"} if name == "pgvector" else {}
    index = rb.indexes.create(name, dim=DIM, **params)
    index.set_attributes(ATTRS)
    index.build(X)
    assert index.filter_path == "where"
    return index


@pytest.fixture(scope="module", params=["pgvector", "lancedb"])
def db(request: pytest.FixtureRequest) -> Any:
    index = _index(request.param)
    yield index
    index.close()


def _exact(allow: np.ndarray) -> list[set[int]]:
    """The exact filtered top-``K`` of each query, as sets (float32 engines may swap near-ties)."""
    s = Q.astype(np.float64) @ X.astype(np.float64).T
    s[:, ~allow] = -np.inf
    order = np.argsort(-s, axis=1, kind="stable")[:, : min(K, int(allow.sum()))]
    return [set(row) for row in order.tolist()]


def _ids(ids: np.ndarray) -> list[set[int]]:
    return [set(row[row >= 0].tolist()) for row in ids]


def test_mask_of_leaves_out_what_the_column_cannot_hold() -> None:
    for spec, same in SAME:
        want = mask_of(ATTRS, same)
        assert want.any(), same
        np.testing.assert_array_equal(mask_of(ATTRS, spec), want, err_msg=str(spec))
    assert mask_of(ATTRS, {"tenant": 2.0}).sum() == 80
    for spec in NOTHING:
        assert not mask_of(ATTRS, spec).any(), spec
    qf = filters_from_specs(ATTRS, [{"tenant": 2.5}, None, {"tenant": [2.5, 3]}])
    assert qf.selectivity.tolist() == [0.0, 1.0, 0.2]


def test_mask_of_refuses_a_value_of_the_wrong_type() -> None:
    for spec, name in WRONG_TYPE:
        with pytest.raises(DatasetError, match=f"is not a value of attribute '{name}'"):
            mask_of(ATTRS, spec)
        with pytest.raises(DatasetError, match=f"attribute '{name}'"):
            filters_from_specs(ATTRS, [None, spec])


def test_a_nan_range_bound_is_refused_by_mask_of_and_where(db: Any) -> None:
    """A range with a NaN bound is an error on both paths (mask_of used to allow no row)."""
    for spec in ({"score": [float("nan"), 3.0]}, {"score": [0.0, float("nan")]}):
        with pytest.raises(DatasetError, match="a range bound is NaN"):
            mask_of(ATTRS, spec)
        with pytest.raises(DatasetError, match="a range bound is NaN"):
            db.search(Q, K, where=spec, filter=np.ones(N, dtype=bool))
    assert mask_of(ATTRS, {"score": [0.0, 3.0]}).sum() == 3 * N // 4


def test_sql_where_matches_the_same_rows_as_mask_of(db: Any) -> None:
    everything = np.ones(N, dtype=bool)
    for spec, same in SAME:
        allow = mask_of(ATTRS, same)
        ids, _ = db.search(Q, K, where=spec, filter=everything, strategy="in-graph")
        assert _ids(ids) == _exact(allow), (db.name, spec)
        # without filter=, the mask ragbench computes from the spec agrees
        ids_m, _ = db.search(Q, K, where=spec, strategy="post")
        assert _ids(ids_m) == _exact(allow), (db.name, spec)
    for spec in NOTHING:
        ids, _ = db.search(Q, K, where=spec, filter=everything, strategy="in-graph")
        assert (ids == -1).all(), (db.name, spec)  # was the rows holding 2 (or 1 and 3)
        with pytest.raises(rb.errors.InputError, match="allow-list is empty"):
            db.search(Q, K, where=spec)  # the spec's own mask is empty


def test_sql_where_refuses_a_value_of_the_wrong_type(db: Any) -> None:
    for spec, name in WRONG_TYPE:
        with pytest.raises(DatasetError, match=f"is not a value of attribute '{name}'"):
            db.search(Q, K, where=spec, filter=np.ones(N, dtype=bool))
        with pytest.raises(DatasetError, match=f"attribute '{name}'"):
            db.search(Q, K, where=[{}, spec, {}, {}, {}])


def test_an_empty_spec_is_no_filter_on_every_engine_alone_or_per_row(db: Any) -> None:
    """``{}`` selects every row: the engine searches unfiltered whatever ``filter=`` says,
    as it runs any other spec on its own columns (LanceDB used to take the allow-list then)."""
    tenant0 = ATTRS["tenant"] == 0
    want = _exact(np.ones(N, dtype=bool))
    for where in ({}, [{}] * NQ):
        ids, _ = db.search(Q, K, where=where, filter=tenant0, strategy="in-graph")
        assert _ids(ids) == want, (db.name, where)
