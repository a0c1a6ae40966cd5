"""The quiet-machine judging of bench/_quick.py, on made-up attempts: a gate still fails.

- every quiet attempt over the bound: the gate fails (a real regression);
- no quiet attempt: skipped as "machine busy", or failed with
  ``RAGBENCH_BENCH_REQUIRE_QUIET=1``;
- quiet and busy attempts mixed: judged on the quiet ones only (a busy one
  meeting the bound does not save the gate, a busy one missing it does not
  sink it);
- :func:`_quick.attempts` stops at the first quiet attempt meeting the bound
  and measures again while attempts are busy, within its cap;
- a host floor only weakens an attempt's bound to what inline code reached in
  that attempt: a wrapper slower than the floor still fails, and a floor under
  the target leaves the target as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import _quick
import pytest
from _quick import QUIET_CORES, Attempt, Watch, attempts, judge, until_met

QUIET, BUSY = 0.0, 1.5  # cores other processes used


@pytest.fixture(autouse=True)
def _no_recorded_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judging is tested on made-up gates, with no recorded spread unless a test sets one."""
    monkeypatch.setattr(_quick, "_MARGINS", {})


def _runs(*pairs: tuple[float, float]) -> list[Attempt[float]]:
    return [Attempt(value, others, "0.00", 0.01) for value, others in pairs]


def test_quiet_attempts_over_the_bound_fail() -> None:
    with pytest.raises(AssertionError, match="best of 2 quiet attempts"):
        judge("x", _runs((2.5, QUIET), (2.2, QUIET)), float, bound=2.0, higher_is_better=False)
    with pytest.raises(AssertionError):
        judge("speed-up", _runs((2.9, QUIET)), float, bound=3.0, higher_is_better=True)


def test_busy_attempts_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_quick, "REQUIRE_QUIET", False)
    with pytest.raises(pytest.skip.Exception, match="machine busy"):
        judge("x", _runs((9.0, BUSY), (1.0, BUSY)), float, bound=2.0, higher_is_better=False)


def test_busy_attempts_fail_when_quiet_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_quick, "REQUIRE_QUIET", True)
    with pytest.raises(pytest.fail.Exception, match="RAGBENCH_BENCH_REQUIRE_QUIET"):
        judge("x", _runs((1.0, BUSY)), float, bound=2.0, higher_is_better=False)


def test_mixed_attempts_are_judged_on_the_quiet_ones() -> None:
    # the busy attempt meets the bound: it does not count, the quiet one misses -> fail
    with pytest.raises(AssertionError):
        judge("x", _runs((1.0, BUSY), (2.5, QUIET)), float, bound=2.0, higher_is_better=False)
    # the busy attempt misses: it does not count, the best quiet one meets it -> pass
    got = judge(
        "x", _runs((9.0, BUSY), (2.4, QUIET), (1.9, QUIET)), float, bound=2.0,
        higher_is_better=False,
    )  # fmt: skip
    assert got == 1.9
    assert judge("s", _runs((3.5, QUIET), (2.0, BUSY)), float, bound=3.0, higher_is_better=True)
    # strict bounds stay strict
    with pytest.raises(AssertionError):
        judge("s", _runs((1.0, QUIET)), float, bound=1.0, higher_is_better=False, strict=True)


def test_a_host_floor_weakens_the_bound_only_to_the_inline_code() -> None:
    # (wrapper ratio, inline code's ratio) per attempt
    def runs(*values: tuple[float, float]) -> list[Attempt[tuple[float, float]]]:
        return [Attempt(v, QUIET, "0.00", 0.01) for v in values]

    def wrapper(v: tuple[float, float]) -> float:
        return v[0]

    def inline(v: tuple[float, float]) -> float:
        return v[1]

    kw = {"bound": 1.03, "higher_is_better": False, "floor": inline, "floor_label": "inline"}
    # the host makes inline code cost 1.09x: a wrapper at 1.07 is within it
    assert judge("x", runs((1.07, 1.09)), wrapper, **kw) == 1.07
    # ...a wrapper slower than the inline code fails
    with pytest.raises(AssertionError, match="target ≤ 1.09"):
        judge("x", runs((1.10, 1.09)), wrapper, **kw)
    # inline code under the target: the target is asserted unchanged
    with pytest.raises(AssertionError, match="target ≤ 1.03"):
        judge("x", runs((1.04, 1.01)), wrapper, **kw)
    # each attempt has its own floor: the one with room under its own bound passes
    assert judge("x", runs((1.05, 1.01), (1.07, 1.09)), wrapper, **kw) == 1.07
    # higher is better: the floor can only lower the bound
    up = {"bound": 3.0, "higher_is_better": True, "floor": inline, "floor_label": "inline"}
    assert judge("x", runs((2.6, 2.5)), wrapper, **up) == 2.6
    with pytest.raises(AssertionError):
        judge("x", runs((2.9, 3.5)), wrapper, **up)
    done = until_met((wrapper, 1.03, False, inline))
    assert done([(1.07, 1.09)]) and not done([(1.10, 1.09)]) and not done([(1.04, 1.01)])


def _spread_file(
    tmp_path: Path, gate: str, op: str, target: float, runs: list[list[tuple[float, bool]]]
) -> Path:
    """A results file as tools/quick_gate_spread.py writes it: one line per run of ``gate``."""
    import json

    path = tmp_path / "spread.jsonl"
    lines = [
        {
            "run": i,
            "gate": gate,
            "op": op,
            "target": target,
            "attempts": [
                {"value": v, "quiet": q, "others": 0.0, "load": 1.0} for v, q in attempts_
            ],
            "started": f"2026-12-02T08:0{i}:00Z",
        }
        for i, attempts_ in enumerate(runs, 1)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_margins_come_from_the_recorded_spread(tmp_path: Path) -> None:
    # three runs' best quiet attempts 1.00, 1.02, 1.05 (a busy 1.50 is no run's judged value)
    path = _spread_file(
        tmp_path, "w / raw", "≤", 1.10,
        [[(1.00, True), (1.50, False)], [(1.02, True)], [(1.09, True), (1.05, True)]],
    )  # fmt: skip
    m = _quick.margins(path)["w / raw"]
    assert m.source == "quiet" and m.judged == (1.00, 1.02, 1.05)
    assert m.spread == pytest.approx(0.05) and m.margin == pytest.approx(0.10)
    assert m.bound(1.10) == pytest.approx(1.10 * 1.10)
    # a lower bound is divided; a wide spread gives a wide margin
    up = _spread_file(tmp_path, "speed-up", "≥", 2.0, [[(3.0, True)], [(2.4, True)]])
    m = _quick.margins(up)["speed-up"]
    assert m.margin == pytest.approx(0.5) and m.bound(2.0) == pytest.approx(2.0 / 1.5)
    # a host slower than the target: the tripwire still lets every recorded run pass, with 10 %
    slow = _spread_file(tmp_path, "slow", "≤", 2500.0, [[(3000.0, True)], [(3100.0, True)]])
    m = _quick.margins(slow)["slow"]
    assert m.bound(2500.0) == pytest.approx(3100.0 * 1.10)
    up_slow = _spread_file(tmp_path, "up", "≥", 0.9, [[(0.80, True)], [(0.82, True)]])
    assert _quick.margins(up_slow)["up"].bound(0.9) == pytest.approx(0.80 / 1.10)
    # a spread wider than half the target is capped: a tripwire still catches 2x the target
    wide = _spread_file(tmp_path, "wide", "≤", 1.0, [[(1.0, True)], [(1.9, True)]])
    assert _quick.margins(wide)["wide"].margin == _quick.MAX_MARGIN
    # fewer than two quiet runs: every run's best attempt, busy ones too
    busy = _spread_file(tmp_path, "b", "≤", 1.0, [[(1.2, False)], [(0.8, True)]])
    assert _quick.margins(busy)["b"].source == "all"
    # values that can be zero or negative: the margin is added in the gate's unit
    ns = _spread_file(tmp_path, "ns", "≤", 2000.0, [[(-100.0, True)], [(300.0, True)]])
    m = _quick.margins(ns)["ns"]
    assert not m.relative and m.margin == pytest.approx(800.0) and m.bound(2000.0) == 2800.0


def test_quick_mode_asserts_the_tripwire_and_full_mode_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _spread_file(tmp_path, "w / raw", "≤", 1.03, [[(0.95, True)], [(1.00, True)]])
    monkeypatch.setattr(_quick, "_MARGINS", _quick.margins(path))
    runs = _runs((1.10, QUIET))  # over the target, inside the tripwire 1.03 x (1 + 2 x 5.3 %)
    monkeypatch.setattr(_quick, "TRIPWIRES", True)
    assert judge("w / raw", runs, float, bound=1.03, higher_is_better=False) == 1.10
    # a real regression still trips it
    with pytest.raises(AssertionError, match="target ≤ 1.14"):
        judge("w / raw", _runs((1.5, QUIET)), float, bound=1.03, higher_is_better=False)
    # a gate with no recorded spread keeps its target
    with pytest.raises(AssertionError, match="target ≤ 1.03"):
        judge("other", runs, float, bound=1.03, higher_is_better=False)
    monkeypatch.setattr(_quick, "TRIPWIRES", False)  # make bench, or RAGBENCH_BENCH_TRIPWIRES=0
    with pytest.raises(AssertionError, match="target ≤ 1.03"):
        judge("w / raw", runs, float, bound=1.03, higher_is_better=False)


def test_the_committed_spread_file_gives_every_recorded_gate_a_margin() -> None:
    found = _quick.margins()
    assert found, f"no gate with two recorded runs in {_quick.SPREAD_FILE}"
    for gate, m in found.items():
        scale = 1 if m.relative else abs(m.target)
        assert _quick.MIN_MARGIN * scale <= m.margin <= _quick.MAX_MARGIN * scale, gate
        assert m.source in ("quiet", "all") and len(m.judged) >= 2, gate


def test_attempts_stop_when_met_and_retry_while_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    others = iter([BUSY, BUSY, QUIET, QUIET, QUIET])

    class FakeWatch(Watch):
        def __exit__(self, *exc: object) -> None:
            super().__exit__(*exc)
            self.others = next(others)

    monkeypatch.setattr(_quick, "Watch", FakeWatch)
    monkeypatch.setattr(_quick, "_extra_spent", [0.0])  # the session's budget, whatever ran before
    values = iter([1.0, 1.0, 2.5, 1.5, 1.0])
    runs = attempts(
        lambda: next(values), until_met((float, 2.0, False)), max_attempts=5, budget_s=60
    )
    # two busy (not judged), a quiet miss, then a quiet hit: stop there
    assert [(a.value, a.quiet) for a in runs] == [
        (1.0, False), (1.0, False), (2.5, True), (1.5, True)
    ]  # fmt: skip
    others = iter([BUSY] * 10)
    capped = attempts(lambda: 0.0, until_met((float, 2.0, False)), max_attempts=3, budget_s=60)
    assert len(capped) == 3 and not any(a.quiet for a in capped)


def test_watch_sees_another_process_and_not_our_children(tmp_path: Path) -> None:
    """A CPU hog outside this process's tree makes the block busy; the same hog as our child does not."""
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass\n"
    # started through a shell that exits: the hog is re-parented, no longer our descendant
    outside = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c {_sh(spin)} >/dev/null 2>&1 & echo $!"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid = int(outside.communicate()[0].strip())
    try:
        with Watch() as w:
            _sleep(1.0)
        assert w.others > QUIET_CORES, w.others
    finally:
        _wait_gone(pid)
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        with Watch() as mine:
            _sleep(1.0)
        assert child.pid in mine.ours
        assert mine.own_s[child.pid] > 0.05  # its CPU is counted as ours, not as others
    finally:
        child.wait(timeout=10)


def _sh(code: str) -> str:
    return "'" + code.replace("'", "'\\''") + "'"


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def _wait_gone(pid: int) -> None:
    import time

    end = time.monotonic() + 10
    while time.monotonic() < end and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)


def test_a_regressed_gate_fails_end_to_end(tmp_path: Path) -> None:
    """A gate file using attempts/judge, measuring a real slowdown, run by pytest: it fails (or busy-skips)."""
    gate = tmp_path / "test_gate.py"
    gate.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from _quick import attempts, judge, until_met

            def slow():  # a "regression": 3x the work of fast
                t0 = time.perf_counter_ns()
                for _ in range(3):
                    sum(range(20_000))
                return time.perf_counter_ns() - t0

            def fast():
                t0 = time.perf_counter_ns()
                sum(range(20_000))
                return time.perf_counter_ns() - t0

            def test_gate():
                def measure():
                    f, s = sorted(fast() for _ in range(21))[10], sorted(slow() for _ in range(21))[10]
                    return s / f
                runs = attempts(measure, until_met((float, 1.5, False)), max_attempts=3)
                judge("slow / fast", runs, float, bound=1.5, higher_is_better=False)
            """
        )
    )
    env = {**os.environ, "RAGBENCH_BENCH_REQUIRE_QUIET": ""}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(gate), "-q", "-p", "no:cacheprovider", "-rs"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    out = done.stdout
    assert ("1 failed" in out and "slow / fast" in out) or "machine busy" in out, out
    assert "1 passed" not in out, out
