from __future__ import annotations

import subprocess
import sys
import threading

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
