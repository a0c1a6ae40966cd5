"""Live writes: ``add`` and ``delete`` on every backend that has them, ids, errors, threads."""

from __future__ import annotations

import threading

import index_contract
import numpy as np
import pgshared
import pytest

import ragbench as rb
from ragbench.errors import (
    DimensionError,
    IdOutOfRangeError,
    InputError,
    NonFiniteError,
    NotBuiltError,
    UnsupportedOperationError,
)

N, DIM = 2000, 64
DS = rb.datasets.synthetic(n=N, dim=DIM, n_queries=20, seed=1)
X = DS.vectors
Q = DS.query_vectors_precomputed
assert X is not None and Q is not None

#: Cases: every dense backend (index_contract.py), skipped by name where it does not declare
#: WritableIndex (or, for DELETING, a delete); DENSE and DELETING name the ones that run.
WRITABLE = index_contract.declaring(rb.indexes.WritableIndex)
DELETES = index_contract.deleting()
DENSE = index_contract.names_of(WRITABLE)
DELETING = index_contract.names_of(DELETES)


def fresh(name: str, metric: str = "ip"):  # type: ignore[no-untyped-def]
    idx = rb.indexes.create(name, dim=DIM, metric=metric, **pgshared.params(name))
    idx.build(X)
    return idx


def unit_rows(m: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((m, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def strategies(idx) -> list[str | None]:  # type: ignore[no-untyped-def]
    return [None, *index_contract.strategies(idx)]


def test_delete_support_is_as_documented() -> None:
    # IVF-PQ/SQ lists and IndexBinaryFlat have remove_ids; faiss's HNSW graphs do not,
    # and IVF-PQ fast-scan's breaks later adds (see ragbench.indexes.compressed);
    # usearch (Index.remove) and Qdrant's engine (delete_points) mark rows deleted; LanceDB
    # (Table.delete), Chroma (Collection.delete) and pgvector (DELETE ... WHERE id = ANY) delete rows
    assert set(index_contract.builtin(DELETING)) == {
        "flat", "hnsw", "ivf", "lsh", "ivfpq", "ivf-sq8", "binary-flat", "usearch", "qdrant-edge",
        "lancedb", "chroma", "pgvector",
    } & set(DENSE)  # fmt: skip
    for name in ("faiss-hnsw", "hnsw-sq", "hnsw-fp16", "binary-hnsw", "ivfpq-fs"):
        idx = fresh(name)
        with pytest.raises(UnsupportedOperationError, match=r"remove_ids.*can: flat, hnsw"):
            idx.delete([1])
        assert idx.ntotal == N


@pytest.mark.parametrize("name", DELETES)
def test_deleted_id_is_never_returned(name: str) -> None:
    idx = fresh(name)
    top, _ = idx.search(Q, 5)
    victims = np.unique(np.concatenate([top[:, 0], [0, 1, N - 1]]))
    idx.delete(victims)
    assert idx.ntotal == N - victims.size
    ids, _ = idx.search(Q, 50)
    assert not np.isin(ids, victims).any()
    # the vectors of the victims, as queries, do not find them either
    ids, _ = idx.search(X[victims], 5)
    assert not np.isin(ids, victims).any()
    allow = np.zeros(N, dtype=bool)
    allow[victims] = True
    allow[::7] = True
    for st in index_contract.strategies(idx):
        ids, _ = idx.search(X[victims], 5, filter=allow, strategy=st)
        assert not np.isin(ids, victims).any(), st
        assert allow[ids[ids >= 0]].all()
    with pytest.raises(InputError, match="not in the index"):
        idx.delete(victims[:1])
    with pytest.raises(InputError, match="non-empty"):
        idx.delete([])


@pytest.mark.parametrize("name", WRITABLE)
def test_inserted_id_is_found_by_its_own_vector(name: str) -> None:
    idx = fresh(name)
    new = unit_rows(30, seed=2)
    given = np.arange(30, dtype=np.int64) * 3 + 10_000
    assert (idx.add(new, ids=given) == given).all()
    assert idx.ntotal == N + 30 and idx.id_bound == 10_000 + 29 * 3 + 1
    ids, _ = idx.search(new, 1)
    assert (ids[:, 0] == given).all()
    # default ids continue after the largest one
    more = idx.add(unit_rows(2, seed=3))
    assert more.tolist() == [idx.id_bound - 2, idx.id_bound - 1]
    # filtered by the new ids, with ids and with a mask of length id_bound
    mask = np.zeros(idx.id_bound, dtype=bool)
    mask[given[::2]] = True
    for st in index_contract.strategies(idx):
        got, _ = idx.search(new[::2], 1, filter=given[::2], strategy=st)
        assert (got[:, 0] == given[::2]).all(), st
        got, _ = idx.search(new[::2], 1, filter=mask, strategy=st)
        assert (got[:, 0] == given[::2]).all(), st
    with pytest.raises(DimensionError, match=str(idx.id_bound)):
        idx.search(new, 1, filter=np.ones(N, dtype=bool))


@pytest.mark.parametrize("name", WRITABLE)
def test_add_rejects_bad_ids_and_vectors(name: str) -> None:
    idx = fresh(name)
    v = unit_rows(2, seed=4)
    with pytest.raises(InputError, match="already in the index"):
        idx.add(v, ids=[5, 99_999])
    with pytest.raises(InputError, match="twice"):
        idx.add(v, ids=[7_000, 7_000])
    with pytest.raises(IdOutOfRangeError):
        idx.add(v, ids=[-3, 7_001])
    with pytest.raises(DimensionError, match="2 ids"):
        idx.add(v, ids=[7_002])
    with pytest.raises(InputError, match="integers"):
        idx.add(v, ids=[1.5, 2.5])
    with pytest.raises(DimensionError):
        idx.add(np.ones((2, DIM + 1), dtype=np.float32))
    bad = v.copy()
    bad[0, 0] = np.inf
    with pytest.raises(NonFiniteError):
        idx.add(bad)
    assert idx.ntotal == N  # nothing was added by the failed calls
    with pytest.raises(NotBuiltError):
        rb.indexes.create(name, dim=DIM).add(v)


@pytest.mark.parametrize("name", DELETES)
def test_deleted_id_can_be_given_again(name: str) -> None:
    idx = fresh(name)
    idx.delete([5])
    v = unit_rows(1, seed=5)
    idx.add(v, ids=[5])
    ids, _ = idx.search(v, 1)
    assert ids[0, 0] == 5
    ids, _ = idx.search(X[5:6], 3)
    assert 5 not in ids or np.allclose(X[5] @ v[0], 1.0)


@pytest.mark.parametrize("name", DELETES)
def test_ids_survive_deletes_before_them(name: str) -> None:
    # flat and lsh compact their storage on delete: later rows change position
    idx = fresh(name)
    idx.delete(np.arange(0, 500))
    probe = np.arange(600, 1600, 50)
    ids, _ = idx.search(X[probe], 1)
    if name == "lsh":
        assert (ids[:, 0] == probe).mean() >= 0.9  # Hamming ties aside
    else:
        assert (ids[:, 0] == probe).all()


# lsh and the compressed backends keep no float32 vectors, hence no 'pre'
# (test_index_filters.py::test_pre_only_where_the_float32_vectors_are pins the list).
WITH_PRE = [
    n
    for n in DENSE
    if isinstance(index_contract.probe(n), rb.indexes.FilteredIndex)
    and "pre" in index_contract.probe(n).filter_strategies
]


@pytest.mark.parametrize("name", WITH_PRE)
def test_pre_follows_writes(name: str) -> None:
    idx = fresh(name)
    allow = np.arange(0, N, 10)
    idx.search(Q, 5, filter=allow, strategy="pre")  # copies the vectors out
    new = unit_rows(20, seed=6)
    new_ids = idx.add(new)
    if idx.delete_mode is not None:
        idx.delete(allow[:50])
    live = np.ones(idx.id_bound, dtype=bool)
    if idx.delete_mode is not None:
        live[allow[:50]] = False
    allowed = np.concatenate([allow, new_ids])
    allowed = allowed[live[allowed]]
    base = np.concatenate([X, new])
    ids, scores = idx.search(new, 5, filter=allowed, strategy="pre")
    exact = new @ base[allowed].T
    order = np.argsort(-exact, axis=1)[:, :5]
    np.testing.assert_array_equal(ids, allowed[order])
    np.testing.assert_allclose(scores, np.take_along_axis(exact, order, axis=1), atol=1e-4)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
@pytest.mark.parametrize("name", ["flat", "hnsw", "ivf"])
def test_add_under_other_metrics(name: str, metric: str) -> None:
    idx = fresh(name, metric=metric)
    new = unit_rows(5, seed=8) * 3.0  # not unit length: cosine normalizes a copy
    ids = idx.add(new, ids=np.arange(50_000, 50_005))
    got, _ = idx.search(new, 1)
    assert (got[:, 0] == ids).all()
    got, _ = idx.search(new, 1, filter=ids, strategy="pre")
    assert (got[:, 0] == ids).all()


def test_hnsw_grows_its_capacity() -> None:
    idx = fresh("hnsw")
    new = unit_rows(3 * N, seed=9)
    for start in range(0, 3 * N, 700):
        idx.add(new[start : start + 700])
    assert idx.ntotal == 4 * N
    ids, _ = idx.search(new[::97], 1)
    assert (ids[:, 0] == N + np.arange(0, 3 * N, 97)).all()


@pytest.mark.parametrize("name", WRITABLE)
def test_save_refused_after_writes(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    idx = fresh(name)
    if not isinstance(idx, rb.indexes.PersistentIndex):
        pytest.skip(f"{name} does not declare PersistentIndex")
    idx.save(tmp_path / "before.idx")
    idx.add(unit_rows(1, seed=10))
    with pytest.raises(UnsupportedOperationError, match="add\\(\\)/delete\\(\\)"):
        idx.save(tmp_path / "after.idx")


def test_minhash_add_and_delete() -> None:
    texts = [f"topic{i % 7} word{i} shared words here now" for i in range(60)]
    idx = rb.indexes.create("minhash-lsh")
    idx.build(texts)
    new = ["completely different sentence about lighthouses and sailing ships"]
    assert idx.add(new, ids=[900]).tolist() == [900]
    ids, _ = idx.search(new, 1)
    assert ids[0, 0] == 900
    idx.delete([900, 3])
    ids, _ = idx.search([*new, texts[3]], 5)
    assert not np.isin(ids, [900, 3]).any()
    assert idx.ntotal == 59
    with pytest.raises(InputError, match="not in the index"):
        idx.delete([900])
    with pytest.raises(UnsupportedOperationError):
        idx.save("/nonexistent/never-written.idx")


@pytest.mark.parametrize("name", WRITABLE)
def test_concurrent_search_and_writes(name: str) -> None:
    """Reader threads search (filtered and not) while a writer adds and deletes."""
    idx = fresh(name)
    can_delete = idx.delete_mode is not None
    batches = [
        (unit_rows(40, seed=100 + b), np.arange(40, dtype=np.int64) + 20_000 + 40 * b)
        for b in range(15)
    ]
    deleted: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()
    searches = [0]

    def writer() -> None:
        try:
            for b, (vecs, ids) in enumerate(batches):
                idx.add(vecs, ids=ids)
                if can_delete:
                    victims = np.concatenate([ids[:15], np.arange(b * 20, b * 20 + 5)])
                    idx.delete(victims)
                    deleted.extend(victims.tolist())
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        strategies = [None, *index_contract.strategies(idx)]
        try:
            while not done.is_set() or searches[0] < 40:
                gone = set(deleted)  # deletes finished before this search starts
                vecs, _ = batches[int(rng.integers(len(batches)))]
                q = np.concatenate([vecs[:3], X[rng.integers(0, 300, 2)]])
                st = strategies[int(rng.integers(len(strategies)))]
                if st is None:
                    ids, _ = idx.search(q, 10)
                else:
                    ids, _ = idx.search(q, 10, filter=np.arange(0, N, 2), strategy=st)
                    assert (ids[ids >= 0] % 2 == 0).all() and (ids[ids >= 0] < N).all()
                assert not (set(ids.ravel().tolist()) & gone), "a deleted id came back"
                # A single row too, the same k object every time: the backends'
                # repeat fast paths, which writes must invalidate (added rows carry
                # ids 20 000+, never their positions N..N+600).
                one, _ = idx.search(q[:1], 10)
                got = set(one.ravel().tolist()) - {-1}
                assert not (got & gone), "a deleted id came back (single query)"
                assert all(i < N or i >= 20_000 for i in got), f"a position as an id: {got}"
                searches[0] += 1
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]
    assert idx.ntotal == N + 15 * 40 - (15 * 20 if can_delete else 0)
    last_vecs, last_ids = batches[-1]
    ids, _ = idx.search(last_vecs[20:], 1)
    assert (ids[:, 0] == last_ids[20:]).all()
