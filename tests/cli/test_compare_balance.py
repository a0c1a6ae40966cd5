"""``ragbench compare``'s verdicts do not depend on the order the flags were typed in.

The old rotation had every configuration run the same query in turn, so among
configurations sharing an index the first listed met the query's data cold
and the rest found it warm. The balanced design (``ragbench.orders``) gives
every configuration every position equally often and a different query in
each round. These tests drive the command the way a user does (its ``main``,
a registered third-party codec, records read back from ``--out``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench import intervals, orders
from ragbench.cli import main
from ragbench.errors import ConfigError

SYN = ["--dataset", "synthetic", "--n", "3000", "--dim", "64", "--rerank", "numpy"]
# The planted codec spins this fraction of json's own time on top of it. Half: a 10 % plant was
# drowned on a loaded CI machine (p50 ratio 1.18 [0.99-1.64] over 300 queries), and a verdict
# that flips with the flag order (the old rotation's fault) is still caught at this size.
SLOWER_BY = 0.50


class SlowJson:
    """json, then a busy-wait of half the time json itself took (encode and decode)."""

    name = "slow"

    def __init__(self, **params: Any) -> None:
        self._json = rb.codecs.create("json", **params)
        self.shape = getattr(self._json, "shape", None)

    @staticmethod
    def _spin(t0: int) -> None:
        until = perf_counter_ns() + int((perf_counter_ns() - t0) * SLOWER_BY)
        while perf_counter_ns() < until:
            pass

    def encode(self, result: rb.RetrievalResult) -> bytes:
        t0 = perf_counter_ns()
        out: bytes = self._json.encode(result)
        self._spin(t0)
        return out

    def decode(self, payload: bytes) -> rb.RetrievalResult:
        t0 = perf_counter_ns()
        out: rb.RetrievalResult = self._json.decode(payload)
        self._spin(t0)
        return out


@pytest.fixture()
def slow_codec():
    rb.codecs.register("slow", SlowJson)
    yield "slow"
    rb.codecs.registry.unregister("slow")


def compare(tmp_path: Path, capsys, name: str, *argv: str) -> tuple[list[dict], str]:
    out = tmp_path / f"{name}.jsonl"
    code = main(["compare", *SYN, *argv, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [json.loads(line) for line in out.read_text().splitlines()], captured.out


def samples(rec: dict, stages: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    x = np.sum([np.asarray(rec["samples_ns"][s], dtype=np.float64) for s in stages], axis=0)
    reps = rec.get("repetition")
    return x, (np.asarray(reps) if reps is not None else None)


def by_label(records: list[dict]) -> dict[str, dict]:
    return {r["label"]: r for r in records}


CODEC = ("serialize", "deserialize")


def test_a_planted_slower_codec_is_found_slower_in_both_flag_orders(
    tmp_path: Path, capsys, slow_codec: str
) -> None:
    for codecs in ("json,slow", "slow,json"):
        recs, stdout = compare(
            tmp_path, capsys, codecs, "--index", "hnsw", "--codec", codecs, "--queries", "300"
        )
        got = by_label(recs)
        (a, ga), (b, gb) = samples(got["json"], CODEC), samples(got["slow"], CODEC)
        iv = intervals.ratio(a, b, "p50", base_groups=ga, other_groups=gb)
        # slower beyond the noise, and by about what was planted (json's time is part of the stage)
        assert iv.low > 1.0, (codecs, iv)
        assert iv.value < 1.0 + 2 * SLOWER_BY, (codecs, iv)
        # the reading under the table says so
        line = next(x for x in stdout.splitlines() if x.startswith("codec ("))
        assert "json " in line and "× faster than slow [" in line, line
        assert "within noise" not in line


def test_reversing_the_flag_order_moves_no_ratio_outside_the_others_interval(
    tmp_path: Path, capsys
) -> None:
    runs = []
    for codecs in ("json,protobuf", "protobuf,json"):
        recs, _ = compare(
            tmp_path,
            capsys,
            codecs,
            "--index",
            "hnsw,lsh",
            "--codec",
            codecs,
            "--queries",
            "200",
            "--repeat",
            "3",
        )
        runs.append(by_label(recs))
    forward, backward = runs
    for index in ("hnsw", "lsh"):
        for stages in (("retrieve",), CODEC, ("retrieve", "rerank", *CODEC)):
            ivs = []
            for got in (forward, backward):
                (a, ga) = samples(got[f"{index}/json"], stages)
                (b, gb) = samples(got[f"{index}/protobuf"], stages)
                ivs.append(intervals.ratio(a, b, "p50", base_groups=ga, other_groups=gb))
            one, other = ivs
            # two independent runs: their intervals must overlap. (Requiring one's point inside the
            # other's interval fails by chance: run-to-run drift here is 3-4 %, the widths ~±2.5 %.
            # The old same-query rotation gave hnsw retrieve json/protobuf 1.55 in one order and
            # 0.63 in the other, intervals far apart.)
            assert one.low <= other.high and other.low <= one.high, (index, stages, one, other)
    for got in (forward, backward):
        order = got["hnsw/json"]["info"]["order"]
        assert order["design"] == "balanced" and order["seed"] == 0
        assert order["positions"] == [150, 150, 150, 150]  # 3 × 200 rounds over 4 positions


def test_the_footer_says_what_was_balanced_and_same_query_is_still_there(
    tmp_path: Path, capsys
) -> None:
    argv = ("--index", "hnsw", "--codec", "json,protobuf", "--queries", "20")
    chart = tmp_path / "chart.png"
    recs, stdout = compare(tmp_path, capsys, "b", *argv, "--order-seed", "7", "--plot", str(chart))
    assert chart.stat().st_size > 0 and f"wrote {chart}" in stdout
    assert all(r["info"]["order"]["seed"] == 7 for r in recs)
    note = next(x for x in stdout.splitlines() if x.startswith("order: balanced (seed 7)"))
    assert "10 times in each of the 2 positions" in note
    assert "offsets 0, 10" in note
    recs, stdout = compare(tmp_path, capsys, "s", *argv, "--order", "same-query")
    assert all(r["info"]["order"]["design"] == "same-query" for r in recs)
    assert any(x.startswith("order: same-query") for x in stdout.splitlines())


# ---------------------------------------------------------------- the design itself


@pytest.mark.parametrize(
    ("n", "queries", "n_queries", "repeat"),
    [(2, 20, 200, 1), (3, 60, 200, 2), (4, 200, 100, 1), (5, 100, 100, 3), (9, 180, 100, 1)],
)
def test_balanced_design_positions_queries_and_neighbours(
    n: int, queries: int, n_queries: int, repeat: int
) -> None:
    plan = orders.balanced(n, queries, repeat=repeat, n_queries=n_queries, seed=3)
    block = n if n % 2 == 0 else 2 * n  # Williams rows; every case here is whole blocks
    assert (queries * repeat) % block == 0
    # every configuration in every position equally often
    want = queries * repeat // n
    assert plan.positions() == [[want] * n for _ in range(n)]
    # and right after every other configuration equally often
    after = Counter((o[p][0], o[p + 1][0]) for o in plan.rounds for p in range(n - 1))
    assert len(after) == n * (n - 1) and len(set(after.values())) == 1
    for rep in range(repeat):
        rounds = plan.rounds[rep * queries : (rep + 1) * queries]
        # each configuration serves requests 0..queries-1 exactly once per repetition
        for c in range(n):
            served = sorted(r for turns in rounds for cc, r in turns if cc == c)
            assert served == list(range(queries))
        # a different query for each configuration within a round
        assert all(len({r % n_queries for _, r in turns}) == n for turns in rounds)
        # and no two consecutive requests on the same query, across round boundaries too
        flat = [r % n_queries for turns in rounds for _, r in turns]
        assert all(x != y for x, y in zip(flat, flat[1:], strict=False))
    assert orders.consecutive_repeats(plan, n_queries) == 0


def test_balanced_design_is_seeded() -> None:
    a = orders.balanced(4, 40, seed=1)
    assert a == orders.balanced(4, 40, seed=1)
    assert a.rounds != orders.balanced(4, 40, seed=2).rounds
    assert a.seed == 1 and a.design == "balanced"


def test_uneven_rounds_stay_within_one_block_of_balance() -> None:
    plan = orders.balanced(3, 50, n_queries=50)  # 50 rounds, blocks of 6 rows
    counts = [c for row in plan.positions() for c in row]
    assert max(counts) - min(counts) <= 2 and sum(counts) == 150


def test_same_query_design_is_the_rotation() -> None:
    plan = orders.same_query(3, 4)
    assert plan.rounds[0] == ((0, 0), (1, 0), (2, 0))
    assert plan.rounds[1] == ((1, 1), (2, 1), (0, 1))
    assert all(len({r for _, r in turns}) == 1 for turns in plan.rounds)


def test_williams_rows() -> None:
    for n in range(1, 9):
        rows = orders.williams(n)
        assert len(rows) == (n if n % 2 == 0 else 2 * n)
        assert all(sorted(row) == list(range(n)) for row in rows)


def test_bad_designs_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown order 'zigzag'"):
        orders.schedule("zigzag", 2, 10)
    with pytest.raises(ConfigError, match="queries ≥ 1"):
        orders.balanced(2, 0)
