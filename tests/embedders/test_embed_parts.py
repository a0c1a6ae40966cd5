"""The parts both timed embedders share (ragbench.embedders._parts): the embed stage's three
parts in one order under one clock, each thread's own, and the texts' check."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragbench.embedders import _parts
from ragbench.embedders.hashing import HashingEmbedder
from ragbench.errors import InputError
from ragbench.pipeline.context import RequestContext
from ragbench.pipeline.stages import EmbedStage
from ragbench.timing import Parts


def _run(clock: _parts.PartClock, calls: list[str]) -> np.ndarray:
    def tokenize() -> list[int]:
        calls.append("tokenize")
        return [1, 2, 3]

    def forward(tokens: list[int]) -> np.ndarray:
        calls.append("forward")
        return np.asarray(tokens, dtype=np.float32)

    def pool(tokens: list[int], hidden: np.ndarray) -> np.ndarray:
        calls.append("pool")
        assert tokens == [1, 2, 3]  # the pool part sees what tokenizing gave
        return hidden / np.linalg.norm(hidden)

    return clock.run(tokenize, forward, pool)


def test_the_clock_runs_and_names_the_three_parts_in_order() -> None:
    clock = _parts.PartClock()
    assert clock.last() is None
    calls: list[str] = []
    out = _run(clock, calls)
    assert calls == ["tokenize", "forward", "pool"]
    np.testing.assert_allclose(np.linalg.norm(out), 1.0)
    parts = clock.last()
    assert isinstance(parts, Parts)
    assert list(parts) == ["tokenize", "forward", "pool"] and all(ns >= 0 for ns in parts.ns)


def test_each_thread_reads_its_own_last_split() -> None:
    clock = _parts.PartClock()
    _run(clock, [])
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(clock.last()))
    worker.start()
    worker.join()
    assert seen == [None] and clock.last() is not None


def test_the_stage_records_the_three_times_of_both_timed_embedders() -> None:
    """EmbedStage keeps ``Parts.ns``: the request record's three numbers (the names are the
    embed stage's own), whichever embedder timed them."""

    class Timed(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(dim=16)
            self._clock = _parts.PartClock()

        def embed(self, texts):  # type: ignore[no-untyped-def, override]
            batch = _parts.checked_texts(texts)
            return self._clock.run(lambda: batch, super().embed, lambda _t, v: v)

        def last_parts(self) -> Parts | None:
            return self._clock.last()

    emb = Timed()
    ctx = RequestContext(0, "q", "a query")
    EmbedStage(emb)(ctx)
    assert ctx.query_vector.shape == (1, 16)
    parts = emb.last_parts()
    assert parts is not None and ctx.embed_parts == parts.ns


@pytest.mark.parametrize(
    ("texts", "message"),
    [("one string", "not one string"), (["ok", 3], r"texts\[1\] must be a string, got int")],
)
def test_texts_are_checked(texts: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _parts.checked_texts(texts)  # type: ignore[arg-type]
