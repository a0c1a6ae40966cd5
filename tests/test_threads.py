from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from ragbench import threads
from ragbench.hf import torch_threads


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


# ---------------------------------------------------------------- torch's count is per thread


@pytest.fixture()
def torch_at_two():
    try:
        import torch
    except ImportError:
        pytest.fail("torch is not installed; install it with: pip install 'ragbench[embed]'")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield torch
    torch.set_num_threads(before)


def test_overlapping_torch_pins_in_two_threads_each_run_on_their_own_count(torch_at_two) -> None:
    """The embedder, cross-encoder and generator pin torch per call and restore what they found.

    That is right in a thread pool only because torch's OpenMP backend keeps the count per
    thread (``omp_set_num_threads``): A pins 1, B pins 2 while A runs, A leaves first, and
    neither block's count nor the caller's moves under another.
    """
    torch = torch_at_two
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, list[int]] = {"a": [], "b": []}

    def a() -> None:
        with torch_threads(torch, 1):
            seen["a"].append(torch.get_num_threads())
            a_in.set()
            b_in.wait(10)
            seen["a"].append(torch.get_num_threads())  # B has pinned 2 meanwhile
        seen["a"].append(torch.get_num_threads())
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with torch_threads(torch, 2):
            seen["b"].append(torch.get_num_threads())
            b_in.set()
            a_out.wait(10)
            seen["b"].append(torch.get_num_threads())  # A has restored meanwhile

    ts = [threading.Thread(target=f) for f in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert seen["a"][:2] == [1, 1] and seen["b"] == [2, 2]
    assert torch.get_num_threads() == 2  # the calling thread never moved


def test_thread_counts_above_the_cap_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RAGBENCH_THREADS=1000000000`` was accepted (and passed to every library)."""
    from ragbench.errors import ConfigError

    monkeypatch.setattr(threads, "_threads", None)
    monkeypatch.setenv("RAGBENCH_THREADS", "1000000000")
    with pytest.raises(
        ConfigError, match=rf"RAGBENCH_THREADS must be in \[1, {threads.MAX_THREADS}\]"
    ):
        threads.get_threads()
    monkeypatch.setenv("RAGBENCH_THREADS", str(threads.MAX_THREADS))
    assert threads.get_threads() == threads.MAX_THREADS
    monkeypatch.setattr(threads, "_threads", None)
    monkeypatch.delenv("RAGBENCH_THREADS")
    for call in (threads.set_threads, threads.pin_thread):
        with pytest.raises(ConfigError, match=str(threads.MAX_THREADS)):
            call(threads.MAX_THREADS + 1)
