"""The search-thread setting of the indexes in a table, for its header."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NOT_LIMITED", "search_threads_text"]


#: ``search_threads`` of a record whose library's pools cannot be limited.
NOT_LIMITED = "not limited"


def search_threads_text(by_index: Mapping[str, Any]) -> str:
    """``search threads per query: 1`` or ``…: 1, except qdrant-edge 2, lancedb not limited``.

    ``by_index``: index name → the ``search_threads`` its records carry (an
    int, or ``None`` for an engine whose pools cannot be limited); indexes
    whose records predate the field are left out ("" when none is known).
    """
    if not by_index:
        return ""
    counts = [v for v in by_index.values() if v is not None]
    common = max(set(counts), key=counts.count) if counts else None
    odd = [
        f"{name} {NOT_LIMITED if v is None else v}" for name, v in by_index.items() if v != common
    ]
    head = f"search threads per query: {common if common is not None else NOT_LIMITED}"
    return head + (", except " + ", ".join(odd) if odd else "")
