"""Shared set-up of the bench files: each file starts with the machine's thread setting.

Gates pin ``ragbench.threads`` to one thread for what they time; a file that
left it pinned would change every later file's measurement (it did: the
cross-encoder file's ``set_threads(1)``, never undone, made the rerank
table's ``parallel=True`` split run on one thread, so the two gates carried by
the split were judged on the one-thread kernel). The setting is put back
after every file, whatever its tests and fixtures did.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragbench import threads


@pytest.fixture(scope="module", autouse=True)
def _threads_restored() -> Iterator[None]:
    """``threads.get_threads()`` as it was before the file, set again after it."""
    before = threads.get_threads()
    yield
    if threads.get_threads() != before:
        threads.set_threads(before)
