"""Measure the CI recipe of ``docs/how-to/comparing-runs.md`` on this machine.

The page's CI job (its ``<!-- run -->`` YAML block) is run as written, in a throwaway
git repository holding a copy of this checkout: ``base`` is the copy, ``head`` the same
copy with either nothing changed (an A/A pair: the verdict must be *no difference*, exit 0)
or one stage planted slower by a known fraction (the serialize stage, every call
``1 + SLOWDOWN`` times as long: ``ragbench diff`` must exit 1 with that stage *slower*).
Each trial appends one JSON line to ``--out``; ``--summary FILE`` prints the counts::

    .venv/bin/python tools/recipe_detection.py --trials 10 --out results.jsonl
    .venv/bin/python tools/recipe_detection.py --summary results.jsonl

``--runs/--queries/--repeat`` override the job's ``env`` (the sizes it documents);
``--prefixes 3,4`` also diffs the first 3 and 4 runs of each side of every trial (the same
job with fewer runs, for free). The trials of both kinds alternate, so the machine's load
reaches both alike; each line records the load average before and after. ``--budget-min``
bounds the wall time: no trial starts that the mean trial time says would end past it.
The page's job pins both processes of a pair to one CPU (``taskset``) and starts their timed
phases together (``ragbench compare --start-together``); ``--two-cpus`` and ``--apart`` run the
earlier designs without one or both, measured beside it: each line says its ``design`` and
``start_together``, and the summary counts each design apart.
``tests/project/test_docs_blocks.py`` runs every marked YAML block of the docs, with small sizes,
through :func:`make_origin` and :func:`run_job`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "how-to" / "comparing-runs.md"
YAML_BLOCK = re.compile(r"^<!-- run -->\n```yaml\n(?P<code>.*?)^```$", re.M | re.S)
BASE_SHA = re.compile(r"\$\{\{\s*github\.event\.pull_request\.base\.sha\s*\}\}")
STAGE = "serialize"
# the verdict rule: trials of another diff.py (another last commit) are counted apart; it was
# ragbench/diff.py until it moved under results (the move is a new last commit: a new group)
DIFF_PY = "ragbench/results/diff.py"
SCHEMA = "ragbench.recipe-detection/1"

# Appended to the head copy's ragbench/pipeline/stages.py: every serialize call spins until it
# has taken (1 + SLOWDOWN) times its own time, so the stage is that much slower whatever the load.
PLANT = """

# planted by tools/recipe_detection.py: the serialize stage {factor:.2f} times as slow
def _planted(call):
    from time import perf_counter_ns

    def slowed(self, ctx):
        t0 = perf_counter_ns()
        call(self, ctx)
        end = t0 + int((perf_counter_ns() - t0) * {factor!r})
        while perf_counter_ns() < end:
            pass

    return slowed


SerializeStage.__call__ = _planted(SerializeStage.__call__)
"""


@dataclass(frozen=True)
class Step:
    """One step of the CI job: its name, its ``env`` and its shell script."""

    name: str
    env: dict[str, str]
    script: str


def ci_steps(page: Path = PAGE) -> list[Step]:
    """The steps of the page's one marked YAML block (a GitHub Actions step list)."""
    found = YAML_BLOCK.findall(page.read_text(encoding="utf-8"))
    if len(found) != 1:
        raise ValueError(f"{page}: expected one <!-- run --> yaml block, found {len(found)}")
    return steps_of(found[0])


def design(steps: Sequence[Step]) -> str:
    """How the job runs the two sides: at the same time (a ``&`` job) or one after the other,
    and, when it pins them with ``taskset``, on one CPU (both processes of a pair share it)."""
    script = "\n".join(step.script for step in steps)
    background = re.search(r"(?<![&>|])&(?![&>])", script)  # a lone &, not && or 2>&1
    how = "side by side" if background else "alternated"
    return how + " on one CPU" if re.search(r"\btaskset\b", script) else how


def job_name(steps: Sequence[Step]) -> str:
    """The job as the summary names it: its :func:`design`, and whether pairs start together."""
    together = any(START_TOGETHER in step.script for step in steps)
    return design(steps) + (", started together" if together else "")


#: The page's job starts each pair's timed phases together with this option (``$i``: the pair)
START_TOGETHER = '--start-together "$head/.start-together/$i:2" '
#: ... and pins both processes of a pair to one CPU with this prefix
PINNED = 'taskset -c "$cpu" '


def variant(steps: Sequence[Step], *, pinned: bool = True, together: bool = True) -> list[Step]:
    """The page's job, or an earlier design of it measured beside it.

    ``pinned=False`` drops the ``taskset`` that puts both processes of a pair on one CPU (each
    then runs where the kernel puts it); ``together=False`` drops ``--start-together`` (each
    process times its requests as soon as it is set up). The page's job must hold both, once.
    """
    script = "\n".join(step.script for step in steps)
    for part in (PINNED, START_TOGETHER):
        if script.count(part) != 1:
            raise ValueError(
                f"expected {part.strip()!r} once in the page's job, found {script.count(part)}"
            )
    drop = [part for part, keep in ((PINNED, pinned), (START_TOGETHER, together)) if not keep]
    out = []
    for step in steps:
        text = step.script
        for part in drop:
            text = text.replace(part, "")
        out.append(Step(step.name, step.env, text))
    return out


def steps_of(code: str) -> list[Step]:
    """The steps of a GitHub Actions step list (YAML text): each needs a name and a run script."""
    import yaml

    return [
        Step(s["name"], {k: str(v) for k, v in (s.get("env") or {}).items()}, s["run"])
        for s in yaml.safe_load(code)
    ]


def _git(cwd: Path, *args: str) -> str:
    who = ["-c", "user.name=recipe", "-c", "user.email=recipe@example.invalid"]
    done = subprocess.run(
        ["git", *who, *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


def make_origin(where: Path) -> dict[str, str]:
    """A git repository at ``where``: this checkout's code as ``base``, two heads on it.

    Returns ``{"base": sha, "same": sha, "planted": sha}`` -- ``same`` changes a comment only,
    ``planted`` is made by :func:`plant` later (one per slowdown).
    """
    where.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    shutil.copytree(ROOT / "ragbench", where / "ragbench", ignore=ignore)
    shutil.copytree(ROOT / "bench" / "configs", where / "bench" / "configs", ignore=ignore)
    (where / "datasets").symlink_to(ROOT / "datasets")  # 4.6 MB the runs only read
    _git(where, "init", "-q", "-b", "main")
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "base")
    shas = {"base": _git(where, "rev-parse", "HEAD")}
    init = where / "ragbench" / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + "\n# head: unchanged code\n")
    _git(where, "commit", "-q", "-am", "head: a comment")
    shas["same"] = _git(where, "rev-parse", "HEAD")
    return shas


def plant(origin: Path, base: str, slowdown: float) -> str:
    """A commit on ``base`` whose serialize stage is ``1 + slowdown`` times as slow; its sha."""
    _git(origin, "checkout", "-q", "-B", f"planted-{slowdown}", base)
    stages = origin / "ragbench" / "pipeline" / "stages.py"
    stages.write_text(stages.read_text(encoding="utf-8") + PLANT.format(factor=1 + slowdown))
    _git(origin, "commit", "-q", "-am", f"head: serialize {slowdown:.0%} slower")
    sha = _git(origin, "rev-parse", "HEAD")
    _git(origin, "checkout", "-q", "main")
    return sha


def run_job(
    steps: Sequence[Step],
    origin: Path,
    base: str,
    head: str,
    where: Path,
    env: Mapping[str, str] | None = None,
) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
    """Run the job as CI would: ``where/head`` checked out at ``head``, base at ``base``.

    ``.venv`` in the checkout is this interpreter's environment; ``env`` overrides the
    steps' own. Stops at the first step that exits non-zero. Returns the checkout and
    the finished steps.
    """
    checkout = where / "head"
    _git(where, "clone", "-q", "--no-hardlinks", str(origin), str(checkout))
    _git(checkout, "checkout", "-q", head)
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    done = []
    for step in steps:
        script = BASE_SHA.sub(base, step.script)
        if "${{" in script:
            raise ValueError(f"step {step.name!r}: an expression this runner cannot fill in")
        full_env = {**os.environ, **step.env, **(env or {})}
        full_env.pop("PYTHONPATH", None)  # each checkout runs its own code
        proc = _bash(script, checkout, full_env)
        done.append(proc)
        if proc.returncode != 0:
            break
    return checkout, done


def _bash(script: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``bash -e`` running ``script`` in its own process group, all of it ended if we are."""
    cmd = ["bash", "-e", "-o", "pipefail", "-c", script]
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=3600)
        except BaseException:  # a timeout, Ctrl-C, SIGTERM: no compare left running
            os.killpg(proc.pid, signal.SIGTERM)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _verdicts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _outcome(code: int, rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """What one diff said: exit status, rows read *slower*, the stage's ratios, passed or not."""
    slower = [f"{r['key']}/{r['part']}" for r in rows if r["verdict"] == "slower"]
    stage = {
        r["key"]: [round(r[k], 4) for k in ("ratio", "ratio_low", "ratio_high")]
        for r in rows
        if r["part"] == STAGE
    }
    total = {
        r["key"]: [round(r[k], 4) for k in ("ratio", "ratio_low", "ratio_high")]
        for r in rows
        if r["part"] == "total"
    }
    caught = code == 1 and any(s.endswith(f"/{STAGE}") for s in slower)
    passed = code == 0 if kind == "aa" else caught
    return {
        "exit": code,
        "passed": passed,
        "slower": slower,
        "stage_ratio": stage,
        "total_ratio": total,
    }


def _prefix(diff_step: Step, checkout: Path, runs: int, kind: str) -> dict[str, Any]:
    """The job's own diff step over the first ``runs`` compare processes of each side."""
    script = diff_step.script
    for name in ("base", "head", "diff"):
        script = script.replace(f"{name}.jsonl", f"{name}-{runs}.jsonl")
        if name == "diff":
            break
        lines = (checkout / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        per_run = len({json.loads(line)["label"] for line in lines})
        cut = "\n".join(lines[: runs * per_run]) + "\n"
        (checkout / f"{name}-{runs}.jsonl").write_text(cut, encoding="utf-8")
    proc = _bash(script, checkout, {**os.environ, **diff_step.env})
    return _outcome(proc.returncode, _verdicts(checkout / f"diff-{runs}.jsonl"), kind)


def pair_ratios(checkout: Path) -> dict[str, list[float]]:
    """Each pair's head / base p50 of the planted stage, per index (the i-th run of each side)."""
    import numpy as np

    p50: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    for side, by_label in p50.items():
        for line in (checkout / f"{side}.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            by_label.setdefault(rec["label"], []).append(float(np.median(rec["samples_ns"][STAGE])))
    return {
        label: [round(h / b, 4) for b, h in zip(runs, p50["head"].get(label, []), strict=False)]
        for label, runs in p50["base"].items()
    }


def provenance() -> dict[str, Any]:
    """The code copied (call it when copying): HEAD, diff.py's last commit, whether it had edits."""
    head = _git(ROOT, "rev-parse", "--short", "HEAD")
    diff_commit = _git(ROOT, "log", "-1", "--format=%h", "--", DIFF_PY)
    dirty = bool(_git(ROOT, "status", "--porcelain", "--", DIFF_PY))
    return {"checkout": head, "diff_py_commit": diff_commit, "diff_py_edited": dirty}


def _trial(
    steps: Sequence[Step],
    origin: Path,
    shas: Mapping[str, str],
    kind: str,
    sizes: Mapping[str, str],
    prefixes: Sequence[int],
    copied: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """One job run (A/A or planted) and its records: the job's own, then each prefix's."""
    head = shas["same"] if kind == "aa" else shas["planted"]
    load0, t0 = os.getloadavg(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="recipe-") as tmp:
        checkout, done = run_job(steps, origin, shas["base"], head, Path(tmp), sizes)
        seconds = time.monotonic() - t0
        if len(done) < len(steps) or done[-1].returncode not in (0, 1):  # 1: diff's "slower"
            raise RuntimeError(f"the job failed:\n{done[-1].stderr[-3000:]}")
        code = done[-1].returncode
        own = _outcome(code, _verdicts(checkout / "diff.jsonl"), kind)
        own["pair_ratios"] = pair_ratios(checkout)
        runs = int(sizes["RUNS"])
        derived = [(r, _prefix(steps[-1], checkout, r, kind)) for r in prefixes if r < runs]
    common = {
        "schema": SCHEMA,
        "design": design(steps),
        "start_together": START_TOGETHER in steps[0].script,
        "kind": kind,
        "stage": STAGE,
        "queries": int(sizes["QUERIES"]),
        "repeat": int(sizes["REPEAT"]),
        "load_before": round(load0[0], 2),
        "load_after": round(os.getloadavg()[0], 2),
        "seconds": round(seconds, 1),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **copied,
    }
    out = [{**common, "runs": runs, "prefix_of": None, **own}]
    out += [{**common, "runs": r, "prefix_of": runs, **o} for r, o in derived]
    return out


def measure(args: argparse.Namespace) -> None:
    """Run ``args.trials`` A/A and planted trials alternately, appending to ``args.out``."""
    # SIGTERM unwinds like Ctrl-C: the running job's processes are ended, the folders removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    steps = variant(ci_steps(), pinned=not args.two_cpus, together=not args.apart)
    sizes = {**next(s.env for s in steps if s.env)}
    for key in ("runs", "queries", "repeat"):
        if getattr(args, key) is not None:
            sizes[key.upper()] = str(getattr(args, key))
    start, took = time.monotonic(), list[float]()
    with tempfile.TemporaryDirectory(prefix="recipe-origin-") as tmp:
        origin = Path(tmp) / "origin"
        copied = provenance()  # the working tree as copied: others may be editing diff.py
        shas = make_origin(origin)
        shas["planted"] = plant(origin, shas["base"], args.slowdown)
        for i in range(args.trials):
            for kind in ("aa", "planted") if i % 2 == 0 else ("planted", "aa"):
                mean = sum(took) / len(took) if took else 0.0
                if time.monotonic() - start + mean > args.budget_min * 60:
                    print(f"budget reached after {len(took)} trials", file=sys.stderr)
                    return
                t0 = time.monotonic()
                records = _trial(steps, origin, shas, kind, sizes, args.prefixes, copied)
                for rec in records:
                    rec["slowdown"] = args.slowdown if kind == "planted" else 0.0
                with open(args.out, "a", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r) + "\n" for r in records)
                took.append(time.monotonic() - t0)
                print(f"{kind} runs={sizes['RUNS']}: exit {records[0]['exit']}", file=sys.stderr)


def summary(path: Path) -> list[dict[str, Any]]:
    """Per job (design, runs, queries, repeat) and diff.py: A/A pairs passed, slowdowns caught."""
    groups: dict[tuple[str, int, int, int, int, str], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        diff_py = f"{rec['diff_py_commit']}{'+edits' if rec['diff_py_edited'] else ''}"
        together = ", started together" if rec.get("start_together") else ""
        key = (
            rec["design"] + together,  # --start-together: another job, counted apart
            rec["runs"],
            rec["queries"],
            rec["repeat"],
            rec["prefix_of"] or 0,
            diff_py,  # another diff.py is another verdict rule: counted apart
        )
        g = groups.setdefault(
            key,
            {"aa": [0, 0], "planted": [0, 0], "load": [], "slowdown": 0, "when": [], "s": []},
        )
        # the low end of the planted stage's interval, per index: how near 1 + threshold it came
        lows = [iv[1] for iv in (rec.get("stage_ratio") or {}).values()]
        if lows:
            pick = min if rec["kind"] == "planted" else max
            g.setdefault(f"{rec['kind']}_low", []).append(pick(lows))
        if rec["kind"] == "aa":  # each A/A pair's head / base: how far two equal runs drift
            g.setdefault("aa_pairs", []).extend(
                r for per_index in (rec.get("pair_ratios") or {}).values() for r in per_index
            )
        g["when"].append(rec["when"])
        g["s"].append(rec["seconds"])
        g[rec["kind"]][0] += rec["passed"]
        g[rec["kind"]][1] += 1
        g["load"] += [rec["load_before"], rec["load_after"]]
        g["slowdown"] = max(g["slowdown"], rec["slowdown"])
    return [
        {
            "design": dsg,
            "runs": runs,
            "queries": q,
            "repeat": rep,
            "prefix_of": of or None,
            "aa_passed": g["aa"][0],
            "aa_trials": g["aa"][1],
            "caught": g["planted"][0],
            "planted_trials": g["planted"][1],
            "slowdown": g["slowdown"],
            "load_min": min(g["load"]),
            "load_max": max(g["load"]),
            "median_s": statistics.median(g["s"]),  # the whole job's (a prefix: of its job)
            "planted_low_min": min(g.get("planted_low") or [float("nan")]),
            "aa_low_max": max(g.get("aa_low") or [float("nan")]),
            "aa_pair_min": min(g.get("aa_pairs") or [float("nan")]),
            "aa_pair_max": max(g.get("aa_pairs") or [float("nan")]),
            "first": min(g["when"]),
            "last": max(g["when"]),
            "diff_py": diff_py,
        }
        for (dsg, runs, q, rep, of, diff_py), g in sorted(groups.items())
    ]


def _spread(row: Mapping[str, Any]) -> str:
    """The A/A pair ratios' range, or a dash for trials recorded before pairs were kept."""
    low, high = row["aa_pair_min"], row["aa_pair_max"]
    return "—" if math.isnan(low) else f"{low:.2f}–{high:.2f}"


def summary_markdown(path: Path) -> str:
    """:func:`summary` as a Markdown table (the docs site's ``<!-- gen: detection FILE -->``)."""
    header = "| job | runs per side | queries × repeat | A/A pairs passed | "
    header += "planted slowdown caught | load average (1 min) | job wall time (median) | "
    header += "low end of the stage's interval: lowest planted, highest A/A | "
    header += "A/A pairs' head/base ratios: lowest–highest | "
    header += "measured (UTC) | diff.py | the page's job |"
    lines = [header, "| " + " | ".join("---" for _ in range(12)) + " |"]
    steps = ci_steps()
    sizes = next(s.env for s in steps if s.env)
    page_job = (job_name(steps), *(int(sizes[k]) for k in ("RUNS", "QUERIES", "REPEAT")))
    for r in summary(path):
        of = f" (the first {r['runs']} of {r['prefix_of']})" if r["prefix_of"] else ""
        job = (r["design"], r["runs"], r["queries"], r["repeat"])
        mine = "**this one**" if job == page_job and not r["prefix_of"] else ""
        lines.append(
            f"| {r['design']} | {r['runs']}{of} | {r['queries']} × {r['repeat']} | "
            f"{r['aa_passed']} of {r['aa_trials']} | "
            f"{r['caught']} of {r['planted_trials']} ({r['slowdown']:.0%}) | "
            f"{r['load_min']:.1f}–{r['load_max']:.1f} | {r['median_s'] / 60:.1f} min"
            f"{' (its job)' if r['prefix_of'] else ''} | "
            f"{r['planted_low_min']:.3f} / {r['aa_low_max']:.3f} | {_spread(r)} | "
            f"{r['first'][:16].replace('T', ' ')}–{r['last'][11:16]} | `{r['diff_py']}` | "
            f"{mine} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="Append one JSON line per trial here.")
    p.add_argument("--summary", type=Path, help="Print the counts of a results file and exit.")
    p.add_argument("--markdown", action="store_true", help="--summary as a Markdown table.")
    p.add_argument("--trials", type=int, default=10, help="A/A pairs, and as many planted.")
    p.add_argument("--slowdown", type=float, default=0.2, help="Planted: 0.2 = 20 %% slower.")
    p.add_argument("--runs", type=int, help="Compare processes per side (the job's RUNS).")
    p.add_argument("--queries", type=int, help="The job's QUERIES.")
    p.add_argument("--repeat", type=int, help="The job's REPEAT.")
    p.add_argument(
        "--prefixes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[],
        help="Also diff the first N runs of each side, e.g. 3,4.",
    )
    p.add_argument(
        "--two-cpus",
        action="store_true",
        help="An earlier design: the job without its taskset (the two processes of a pair on "
        "whichever CPUs the kernel picks). Each trial line says its design; counted apart.",
    )
    p.add_argument(
        "--apart",
        action="store_true",
        help="An earlier design: the job without compare --start-together (each process times "
        "its requests as soon as it is set up). Counted apart.",
    )
    p.add_argument("--budget-min", type=float, default=28.0, help="Wall-time bound, minutes.")
    args = p.parse_args(argv)
    if args.summary:
        print(summary_markdown(args.summary) if args.markdown else "")
        if not args.markdown:
            for row in summary(args.summary):
                print(json.dumps(row))
        return 0
    if args.out is None:
        p.error("--out is needed to measure")
    measure(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
