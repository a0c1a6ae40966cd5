"""What the embedders that time their parts share: the texts' check and the three timed parts.

The embed stage of MiniLM (every runtime) and of the static ``model2vec``
model is timed in the same three parts, in this order (:data:`PARTS`):
``tokenize`` (text to token ids), ``forward`` (the model: a runtime's forward
pass, or a static table's look-up and mean) and ``pool`` (to unit float32
rows). :class:`PartClock` runs the three as given, times each and keeps the
calling thread's last split for the stage (``last_parts()``, a
:class:`~ragbench.timing.Parts` as an index's split search is), so two
embedders cannot name or order them differently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ..errors import InputError
from ..timing import Parts

#: The embed stage's parts, in order (``last_parts()``).
PARTS: tuple[str, str, str] = ("tokenize", "forward", "pool")

T = TypeVar("T")  # what tokenizing returns
H = TypeVar("H")  # what the forward part returns


def checked_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, each a string; :class:`InputError` for one bare string or a non-string."""
    if isinstance(texts, str):
        raise InputError("embed() takes a sequence of texts, not one string; wrap it in a list")
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InputError(f"texts[{i}] must be a string, got {type(text).__name__}")
    return batch


class PartClock:
    """Runs an embed call's three parts, timed; keeps each thread's last split (a load test's
    worker threads each read their own)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def last(self) -> Parts | None:
        """This thread's last :meth:`run` as :class:`Parts` ``tokenize``, ``forward``, ``pool``
        (ns), or ``None`` before one."""
        ns: tuple[int, int, int] | None = getattr(self._local, "ns", None)
        return None if ns is None else Parts(PARTS, ns)

    def run(
        self,
        tokenize: Callable[[], T],
        forward: Callable[[T], H],
        pool: Callable[[T, H], np.ndarray],
    ) -> np.ndarray:
        """``pool(tokens, forward(tokens))`` of ``tokens = tokenize()``, each part timed."""
        t0 = time.perf_counter_ns()
        tokens = tokenize()
        t1 = time.perf_counter_ns()
        hidden = forward(tokens)
        t2 = time.perf_counter_ns()
        out = pool(tokens, hidden)
        t3 = time.perf_counter_ns()
        self._local.ns = (t1 - t0, t2 - t1, t3 - t2)
        return out
