"""LanceDB search errors that come from query parameters, as one-line ConfigErrors.

:func:`check_ef` applies LanceDB's HNSW rule and a bound on the refine
candidates before the call;
:func:`search_error` turns any other error LanceDB raises during a search
into a :class:`~ragbench.errors.ConfigError` naming the parameters sent.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

#: At most this many refine candidates (``k × refine_factor``): LanceDB allocates
#: them up front (16 bytes each), and ``refine_factor=2**31-1`` aborts the process.
MAX_REFINE_ROWS = 10_000_000


def check_ef(compiled: tuple[tuple[str, int], ...], k: int) -> None:
    """LanceDB's rules, before the call: ``ef >= k × max(1, refine_factor)`` (HNSW),
    ``k × refine_factor <= MAX_REFINE_ROWS``."""
    calls = dict(compiled)
    ef = calls.get("ef")
    refine = calls.get("refine_factor", 0)
    need = k * max(1, refine)
    if need > MAX_REFINE_ROWS:
        raise ConfigError(
            f"index 'lancedb': k × refine_factor = {k} × {refine} = {need} candidates is more "
            f"than {MAX_REFINE_ROWS} (LanceDB allocates them up front); use a smaller refine_factor"
        )
    if ef is None:
        return
    if ef < need:
        how = f"k × refine_factor = {k} × {refine} = {need}" if refine > 1 else f"k = {k}"
        fix = f"ef >= {need}" + (" or a smaller refine_factor" if refine > 1 else "")
        raise ConfigError(
            f"index 'lancedb': ef={ef} is below {how}, the candidates LanceDB's HNSW "
            f"must return (it refuses ef < that); use {fix}"
        )


def search_error(exc: BaseException, compiled: tuple[tuple[str, int], ...], k: int) -> ConfigError:
    """A LanceDB search error as one line naming the query parameters sent."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = re.sub(r",\s*/\S+\.rs:\d+(:\d+)?", "", text)  # lance's Rust source location
    sent = ", ".join(f"{name}={value}" for name, value in compiled) or "no query parameters"
    return ConfigError(f"index 'lancedb': LanceDB refused the search (k={k}, {sent}): {text}")
