"""The order in which side-by-side configurations take their turns (``ragbench compare``).

Configurations that share a built index also share the CPU caches it sits
in: whoever runs a query first pays for bringing the graph nodes and chunk
texts in, whoever runs the same query right after finds them warm. A plain
rotation with every configuration running query ``i`` in turn hands that
warmth from one configuration to the next, so the verdict depends on the
order the flags were typed in (measured: ``--codec json,protobuf`` made hnsw
retrieve 1.3× slower for json, ``--codec protobuf,json`` 1.4× slower for protobuf).

:func:`balanced` fixes both halves of that:

- **positions**: round ``g`` runs the configurations in row ``g`` of a
  Williams design (a Latin square whose rows also balance who runs right
  after whom; ``2n`` rows for an odd count ``n``), rows taken in a seeded
  random order within each block of rows and the configurations assigned to
  the square's symbols afresh each block, from the same seed (so the
  orderings the square does not balance, two turns back and more, even out). Over a whole number of blocks every
  configuration runs in every position equally often and directly after every
  other configuration equally often; otherwise counts differ by at most one
  block's worth.
- **queries**: in one round each configuration serves a different query.
  Configuration ``c`` serves request ``(i + offset[c]) mod queries`` in round
  ``i``, so over a repetition it still serves requests ``0 .. queries-1``,
  each exactly once -- the same queries, the same number of times, as every
  other configuration (a hard query costs everyone alike). The offsets are
  spaced ``step`` apart (``step`` ≈ distinct queries / configurations), so the
  configurations meet a given query ``step`` rounds apart, with many other
  requests between, instead of back to back; ``step`` is chosen so no two
  consecutive requests (within a round, or across a round boundary) are on
  the same query, whenever that is possible.

:func:`same_query` is the old design (rotation, every configuration on the
same query in turn), kept for who wants exactly that (``--order same-query``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import ConfigError

__all__ = [
    "DESIGNS",
    "Schedule",
    "balanced",
    "consecutive_repeats",
    "same_query",
    "schedule",
    "williams",
]

#: The designs :func:`schedule` knows.
DESIGNS = ("balanced", "same-query")

#: Query spacings tried before settling for one with consecutive repeats.
STEP_TRIES = 64


@dataclass(frozen=True, slots=True)
class Schedule:
    """Who serves which request when: ``rounds[g]`` lists ``(configuration, request)`` in run order.

    ``repeat * queries`` rounds, ``queries`` per repetition; ``offsets[c]`` is
    how far configuration ``c``'s requests are shifted from the round number.
    """

    design: str
    seed: int | None
    configurations: int
    queries: int
    repeat: int
    offsets: tuple[int, ...]
    rounds: tuple[tuple[tuple[int, int], ...], ...]

    def positions(self) -> list[list[int]]:
        """``[c][p]``: how many rounds configuration ``c`` runs in position ``p``."""
        n = self.configurations
        counts = [[0] * n for _ in range(n)]
        for order in self.rounds:
            for p, (c, _) in enumerate(order):
                counts[c][p] += 1
        return counts


def williams(n: int) -> list[list[int]]:
    """The rows of a Williams design for ``n`` symbols (``n`` rows if even, ``2n`` if odd).

    Each symbol is in each position equally often, and each ordered pair of
    different symbols is adjacent (one right after the other) equally often.
    """
    if n < 1:
        raise ConfigError(f"a design needs at least one configuration, got {n}")
    first = [0]
    lo, hi = 1, n - 1
    for j in range(1, n):
        if j % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(s + r) % n for s in first] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def _orders(n: int, rounds: int, seed: int) -> list[list[int]]:
    """``rounds`` orders of ``n`` configurations: Williams rows, relabelled and shuffled per block.

    A fresh relabelling each block keeps each block's balance (positions, and
    who runs right after whom) and spreads what the square does not balance
    -- who ran two or three turns before -- evenly over the configurations.
    """
    rng = random.Random(seed)
    rows = williams(n)
    out: list[list[int]] = []
    while len(out) < rounds:
        label = list(range(n))
        rng.shuffle(label)
        block = list(rows)
        rng.shuffle(block)
        out += [[label[s] for s in row] for row in block]
    return out[:rounds]


def _rounds(
    orders: list[list[int]], offsets: list[int], queries: int
) -> tuple[tuple[tuple[int, int], ...], ...]:
    return tuple(
        tuple((c, (g % queries + offsets[c]) % queries) for c in order)
        for g, order in enumerate(orders)
    )


def consecutive_repeats(sched: Schedule, n_queries: int) -> int:
    """How many pairs of consecutive requests of one repetition are on the same query.

    Request ``r`` runs query ``r mod n_queries`` (:meth:`ragbench.Pipeline.serve`).
    """
    found = 0
    for rep in range(sched.repeat):
        flat = [
            r % n_queries
            for order in sched.rounds[rep * sched.queries : (rep + 1) * sched.queries]
            for _, r in order
        ]
        found += sum(a == b for a, b in zip(flat, flat[1:], strict=False))
    return found


def balanced(
    n: int, queries: int, *, repeat: int = 1, n_queries: int | None = None, seed: int = 0
) -> Schedule:
    """The balanced design (see the module docstring) for ``n`` configurations.

    ``n_queries`` is the dataset's count of distinct queries (default: ``queries``).
    """
    _check(n, queries, repeat)
    distinct = min(queries, n_queries or queries)
    orders = _orders(n, repeat * queries, seed)
    base = max(1, distinct // n)
    tries = [base - d for d in range(base)] + list(range(base + 1, distinct))
    best: Schedule | None = None
    for step in tries[:STEP_TRIES]:
        if (n - 1) * step >= queries and best is not None:
            continue  # offsets would wrap onto each other
        offsets = [c * step % queries for c in range(n)]
        sched = Schedule(
            "balanced", seed, n, queries, repeat, tuple(offsets), _rounds(orders, offsets, queries)
        )
        if best is None:
            best = sched
        if consecutive_repeats(sched, n_queries or queries) == 0:
            return sched
    if best is None:  # no step to try: a single query
        offsets = [0] * n
        best = Schedule(
            "balanced", seed, n, queries, repeat, tuple(offsets), _rounds(orders, offsets, queries)
        )
    return best


def same_query(n: int, queries: int, *, repeat: int = 1) -> Schedule:
    """The rotation: round ``i`` runs request ``i`` on every configuration, the order shifted by one."""
    _check(n, queries, repeat)
    rounds = tuple(
        tuple(((i + j) % n, i) for j in range(n)) for _ in range(repeat) for i in range(queries)
    )
    return Schedule("same-query", None, n, queries, repeat, (0,) * n, rounds)


def schedule(
    design: str,
    n: int,
    queries: int,
    *,
    repeat: int = 1,
    n_queries: int | None = None,
    seed: int = 0,
) -> Schedule:
    """:func:`balanced` or :func:`same_query` by name (one of :data:`DESIGNS`)."""
    if design == "balanced":
        return balanced(n, queries, repeat=repeat, n_queries=n_queries, seed=seed)
    if design == "same-query":
        return same_query(n, queries, repeat=repeat)
    raise ConfigError(f"unknown order {design!r}; use one of {', '.join(DESIGNS)}")


def _check(n: int, queries: int, repeat: int) -> None:
    for what, value in (("configurations", n), ("queries", queries), ("repeat", repeat)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"a design needs {what} ≥ 1, got {value!r}")
