"""The engine backends' shared part (ragbench.indexes._embedded_engines): padding, query checks, folders."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ragbench as rb
from ragbench.errors import ConfigError, NonFiniteError
from ragbench.indexes._embedded_engines import import_engine, in_new_folder, pad_rows

ENGINES = ["usearch", "qdrant-edge", "chroma"]
DIM = 16


def test_pad_rows_fills_ragged_rows_and_pads_the_rest() -> None:
    ids, scores = pad_rows([["3", "10"], [], ["7"]], [[0.5, 0.25], [], [2.0]], 3)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(ids, [[3, 10, -1], [-1, -1, -1], [7, -1, -1]])
    np.testing.assert_array_equal(
        scores, np.array([[0.5, 0.25, -np.inf], [-np.inf] * 3, [2.0, -np.inf, -np.inf]])
    )


def test_pad_rows_keeps_at_most_k_per_row() -> None:
    ids, scores = pad_rows([np.arange(5)], [np.arange(5, dtype=np.float32)], 2)
    np.testing.assert_array_equal(ids, [[0, 1]])
    np.testing.assert_array_equal(scores, [[0.0, 1.0]])


def test_import_engine_names_the_missing_package() -> None:
    with pytest.raises(ConfigError) as err:
        import_engine("some-engine", "ragbench_no_such_module_xyz", "the xyz package")
    assert str(err.value) == (
        "index 'some-engine' needs the xyz package: pip install 'ragbench[vectordb]'"
    )


def test_in_new_folder_removes_the_folder_when_opening_fails() -> None:
    seen: list[str] = []

    def broken(folder: str) -> None:
        seen.append(folder)
        with open(os.path.join(folder, "partial"), "w") as fh:
            fh.write("x")
        raise RuntimeError("engine refused")

    with pytest.raises(RuntimeError, match="engine refused"):
        in_new_folder("ragbench-test-", broken)
    assert len(seen) == 1 and not os.path.exists(seen[0])
    value, folder = in_new_folder("ragbench-test-", lambda f: os.path.isdir(f))
    try:
        assert value is True and os.path.isdir(folder)
    finally:
        os.rmdir(folder)


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize(("key", "value"), [("M", 1), ("ef_construction", 0)])
def test_graph_parameters_are_checked_by_name(name: str, key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=rf"index '{name}'.*{key}"):
        rb.indexes.create(name, dim=DIM, **{key: value})


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((400, DIM)).astype(np.float32)
    q = rng.standard_normal((5, DIM)).astype(np.float32)
    return x, q


@pytest.mark.parametrize("name", ENGINES)
def test_any_memory_layout_gives_the_same_answer(
    name: str, corpus: tuple[np.ndarray, np.ndarray]
) -> None:
    """Fortran-ordered, strided and float64 queries answer as the C-contiguous float32 ones."""
    x, q = corpus
    index = rb.indexes.create(name, dim=DIM, metric="l2")
    try:
        index.build(x)
        want_ids, want_scores = index.search(q, 5)
        wide = np.zeros((q.shape[0], 2 * DIM), dtype=np.float32)
        wide[:, ::2] = q
        for other in (np.asfortranarray(q), wide[:, ::2], q.astype(np.float64)):
            ids, scores = index.search(other, 5)
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        one_ids, _ = index.search(np.asfortranarray(q[:1].T).T, 5)  # (1, dim), not C-contiguous
        np.testing.assert_array_equal(one_ids, want_ids[:1])
        bad = q.copy()
        bad[2, 3] = np.nan
        with pytest.raises(NonFiniteError):
            index.search(np.asfortranarray(bad), 5)
        empty_ids, empty_scores = index.search(np.empty((0, DIM), np.float32), 5)
        assert empty_ids.shape == empty_scores.shape == (0, 5)
    finally:
        close = getattr(index, "close", None)
        if close is not None:
            close()
