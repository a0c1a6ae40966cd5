"""The cache state a table's latencies were measured in, for its header: a declared condition.

Two conditions, named in every record that times a search (``cache_state``):

- ``hot``: the searches run back to back, one query after the other with
  nothing between them (``sweep``, ``scale``): the index's pages, the CPU
  caches and the branch predictors hold what the previous search left;
- ``after-stages``: each search runs inside a request, right after the
  request's other stages (embedding, ...) and interleaved with the other
  configurations (``run``, ``compare``): what those stages evicted is read
  again.

The same engine at the same parameters is slower after stages than hot
(issue 27), so a table says which it is and a reader never
sets one beside the other. Records from before the field are read by their
kind (``sweep``/``scale``: hot; ``run``: after-stages) and the header says
"inferred".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AFTER_STAGES", "CACHE_STATES", "HOT", "cache_state_of", "cache_state_text"]

HOT = "hot"
AFTER_STAGES = "after-stages"

#: Each condition and what it means, as a header says it.
CACHE_STATES = {
    HOT: "searches back to back",
    AFTER_STAGES: "each search right after its request's other stages",
}

#: The condition a record of each kind was measured in, for records without ``cache_state``.
_BY_KIND = {"sweep": HOT, "scale": HOT, "run": AFTER_STAGES}


def cache_state_of(rec: Mapping[str, Any] | Any) -> tuple[str | None, bool]:
    """(the record's cache state, whether it was inferred from its kind); (None, False) if unknown.

    ``rec``: a stored record (a dict) or a record Struct.
    """
    if isinstance(rec, Mapping):
        state, kind = rec.get("cache_state"), rec.get("kind")
    else:
        state, kind = getattr(rec, "cache_state", None), getattr(rec, "kind", None)
    if state is not None:
        return str(state), False
    inferred = _BY_KIND.get(str(kind))
    return inferred, inferred is not None


def cache_state_text(records: Iterable[Mapping[str, Any] | Any]) -> str:
    """``cache state: hot (searches back to back)``, ``…, inferred from the record kind`` or mixed.

    "" when no record says or implies one.
    """
    seen: dict[str, bool] = {}
    for rec in records:
        state, inferred = cache_state_of(rec)
        if state is not None:
            seen[state] = seen.get(state, False) or inferred
    if not seen:
        return ""
    parts = [
        f"{s} ({CACHE_STATES.get(s, 'as recorded')}"
        + (", inferred from the record kind)" if seen[s] else ")")
        for s in sorted(seen)
    ]
    head = "cache state: " if len(parts) == 1 else "cache states MIXED, do not compare rows: "
    return head + "; ".join(parts)
