"""The serialize stage's fast path (Hit.unchecked) makes exactly the result the dataclasses'
own constructors make (issue 27: ragbench's own per-hit object work trimmed, measured in
bench/test_bench_codecs.py::test_serialize_result_fast_path)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.pipeline.stages import SerializeStage
from ragbench.types import Hit, RetrievalResult

DATASET = rb.datasets.load("pydocs")
N = len(DATASET.corpus.ids)
VECTORS = np.random.default_rng(0).standard_normal((N, 8)).astype(np.float32)


def _stage(with_embeddings: bool, with_metadata: bool) -> SerializeStage:
    codec = rb.codecs.create("json")
    return SerializeStage(codec, DATASET, VECTORS, with_embeddings, with_metadata)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.integers(min_value=-1, max_value=N - 1), max_size=40),
    data=st.data(),
    with_embeddings=st.booleans(),
    with_metadata=st.booleans(),
    query=st.text(max_size=30),
)
def test_the_fast_path_makes_what_the_constructors_make(
    rows: list[int], data: st.DataObject, with_embeddings: bool, with_metadata: bool, query: str
) -> None:
    scores = data.draw(
        st.lists(st.floats(allow_nan=False, width=32), min_size=len(rows), max_size=len(rows))
    )
    stage = _stage(with_embeddings, with_metadata)
    r = np.asarray(rows, dtype=np.int64)
    s = np.asarray(scores, dtype=np.float32)
    fast = stage.result("q-7", query, r, s)
    plain = stage.result_plain("q-7", query, r, s)
    assert fast == plain
    assert [type(h) for h in fast.hits] == [Hit] * len(plain.hits)
    assert type(fast) is RetrievalResult
    # and every codec writes the same bytes for both
    for name in ("json", "protobuf", "msgpack"):
        codec = rb.codecs.create(name)
        assert codec.encode(fast) == codec.encode(plain)


def test_unchecked_hits_equal_checked_ones_and_skip_only_the_checks() -> None:
    emb = np.arange(4, dtype="<f4").tobytes()
    assert Hit.unchecked("d", 0.5, "t", {"k": "v"}, emb) == Hit("d", 0.5, "t", {"k": "v"}, emb)
    with pytest.raises(rb.errors.InputError):  # the checked constructor still checks
        Hit("d", 0.5, "t", {}, b"abc")
    assert RetrievalResult.unchecked("q", "x", []) == RetrievalResult("q", "x", [])
