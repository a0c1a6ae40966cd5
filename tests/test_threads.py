from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from ragbench import threads


def test_pinning_never_starts_numbas_thread_pool() -> None:
    # Started before torch loads, numba's OpenMP runtime is the one torch's parallel code
    # then uses, and sentence embedding ran 11x slower: pinning must not start it.
    code = (
        "import numba, numpy, faiss\n"
        "from numba.np.ufunc import parallel\n"
        "from ragbench import threads\n"
        "threads.set_threads(2)\n"
        "threads.pin_thread(1)\n"
        "print(parallel._is_initialized)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pin_thread_reaches_faiss_in_the_calling_thread_only() -> None:
    import faiss

    before = threads.get_threads()
    seen: dict[str, int] = {}

    def worker() -> None:
        seen["fresh"] = faiss.omp_get_max_threads()
        threads.pin_thread(1)
        seen["pinned"] = faiss.omp_get_max_threads()

    threads.set_threads(2)
    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert seen["pinned"] == 1
        assert faiss.omp_get_max_threads() == 2  # the main thread keeps its own count
    finally:
        threads.set_threads(before)


def test_thread_connections_keeps_one_entry_per_thread() -> None:
    conns: threads.ThreadConnections[str] = threads.ThreadConnections()
    assert conns.current() is None and len(conns) == 0
    assert conns.register("main") == []
    seen: dict[str, object] = {}

    def worker() -> None:
        seen["before"] = conns.current()
        seen["stale"] = conns.register("worker")
        seen["after"] = conns.current()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == {"before": None, "stale": [], "after": "worker"}
    assert conns.current() == "main"
    assert len(conns) == 2


def test_thread_connections_returns_ended_threads_connections_for_closing() -> None:
    conns: threads.ThreadConnections[str] = threads.ThreadConnections()
    t = threading.Thread(target=conns.register, args=("ended",))
    t.start()
    t.join()
    assert len(conns) == 1
    assert conns.register("main") == ["ended"]  # removed: the caller closes it
    assert len(conns) == 1 and conns.current() == "main"
    assert conns.register_if("refused", lambda: False) is None
    assert conns.current() == "main" and len(conns) == 1


def test_thread_connections_drop_current_and_take_all() -> None:
    conns: threads.ThreadConnections[str] = threads.ThreadConnections()
    assert conns.drop_current() is None
    conns.register("a")
    assert conns.drop_current() == "a"
    assert conns.current() is None and len(conns) == 0
    conns.register("b")
    done = threading.Event()
    release = threading.Event()

    def worker() -> None:
        conns.register("c")
        done.set()
        release.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert done.wait(5)
        assert sorted(conns.take_all()) == ["b", "c"]
        assert len(conns) == 0 and conns.current() is None
        assert conns.take_all() == []
    finally:
        release.set()
        t.join()


def test_settings_record_the_openmp_wait_policy_and_noted_torch_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    monkeypatch.setattr(threads, "_torch_used", {})  # this test's notes go with it
    threads.note("caller under test", 3)
    threads.note("caller under test", 1)
    threads.note("caller under test", 3)
    out = threads.settings()
    assert out["OMP_WAIT_POLICY"] == "PASSIVE" and "KMP_BLOCKTIME" not in out
    assert out["torch_threads_by_caller"]["caller under test"] == [1, 3]
