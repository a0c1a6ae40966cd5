"""The query cache: an LRU with a time to live, and the ``cache`` stage that consults it.

The rerank stage (:mod:`ragbench.pipeline.stages`) fills the cache with each
request's final hits; the cache stage answers a repeated query from it, and
every later stage up to ``serialize`` then skips its work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from time import perf_counter_ns

import numpy as np

from .context import RequestContext

__all__ = ["CacheStage", "LruTtlCache"]


class LruTtlCache:
    """Query text → final (ids, scores), least recently used evicted, entries expire after ``ttl_s``.

    Safe to share between request threads (one lock around each lookup and insert).
    """

    def __init__(self, size: int, ttl_s: float) -> None:
        self.size = size
        self.ttl_ns = int(ttl_s * 1e9)
        self._data: OrderedDict[str, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None or perf_counter_ns() - entry[0] > self.ttl_ns:
                if entry is not None:
                    del self._data[key]
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[1], entry[2]

    def clear(self) -> None:
        """Forget every entry (the hit and miss counts stay)."""
        with self._lock:
            self._data.clear()

    def put(self, key: str, ids: np.ndarray, scores: np.ndarray) -> None:
        with self._lock:
            self._data[key] = (perf_counter_ns(), ids, scores)
            self._data.move_to_end(key)
            if len(self._data) > self.size:
                self._data.popitem(last=False)


class CacheStage:
    name = "cache"

    def __init__(self, cache: LruTtlCache) -> None:
        self.cache = cache

    def __call__(self, ctx: RequestContext) -> None:
        found = self.cache.get(ctx.cache_key)
        if found is not None:
            ctx.cached = True
            ctx.hit_ids, ctx.hit_scores = found
