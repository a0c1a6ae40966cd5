"""How long Ctrl-C takes on ``ragbench run`` with pgvector, in each phase of its own server.

For each phase -- ``initdb`` running, the server started (its postmaster
listening), ``CREATE INDEX`` running on a 200 000 x 64 corpus -- a
``ragbench run`` is started with ``TMPDIR`` set to a scratch folder, SIGINT
is sent once the phase is seen (``CREATE INDEX``: 1 s into it), and two
times are measured: SIGINT to the process's exit, and SIGINT to nothing being
left (no ``initdb`` or ``postgres`` process naming the scratch folder, no
server folder in it). Whatever is still left 60 s after SIGINT is recorded,
then killed and removed: the script never leaves a server behind. ``--root``
runs another checkout's ragbench (to compare with an older commit, e.g. a
``git archive`` of it; ``--label`` names it in the record, by default the
checkout's git revision).

``--out FILE`` appends one JSON line per interrupted run (schema
``ragbench.pg-interrupt/1``): the phase, the delay after it was seen, the corpus
rows, the config run, both times, the exit status and the command's last line on
stderr, what was left at the end of the wait, the 1-min load average before and
after, the code measured and the machine. ``docs/findings/data/pg-interrupt.jsonl``
is one, shown on ``docs/vectordb.md`` (``<!-- gen: pg-interrupts ... -->``).

Run: ``.venv/bin/python bench/pg_interrupt.py [--repeat 3] [--phases initdb,start,build]
[--root DIR [--label TEXT]] [--out FILE]``. Not part of the test suite; figures are
machine dependent (the 1-min load is recorded with each run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from interrupt_timing import machine, revision  # bench/: the script's own folder

SCHEMA = "ragbench.pg-interrupt/1"
PHASES = ("initdb", "start", "build")
#: Seconds after SIGINT within which everything must be gone; what is left then is recorded.
WAIT_S = 60.0
CONFIG = """[dataset]
name = "synthetic"
n = {n}
dim = 64
n_queries = 10
[run]
queries = 10
warmup = 0
k = 5
k_candidates = 10
[rerank]
backend = "none"
[retrieve]
backend = "pgvector"
"""


def _procs(scratch: str, names: tuple[str, ...]) -> list[psutil.Process]:
    """Processes named ``names`` whose command line mentions ``scratch``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] in names and any(scratch in part for part in cmd):
            found.append(proc)
    return found


def _in_phase(phase: str, scratch: str) -> bool:
    if phase == "initdb":
        return bool(_procs(scratch, ("initdb",)))
    if phase == "start":
        return any("-k" in p.info["cmdline"] for p in _procs(scratch, ("postgres",)))
    servers = {p.pid for p in _procs(scratch, ("postgres",))}
    for proc in psutil.process_iter(["name", "cmdline", "ppid"]):  # a backend shows its statement
        cmd = " ".join(proc.info["cmdline"] or [])
        if (
            proc.info["name"] == "postgres"
            and proc.info["ppid"] in servers
            and "CREATE INDEX" in cmd
        ):
            return True
    return False


def _left(scratch: str) -> list[str]:
    """What is left: server folders in ``scratch``, ``initdb``/``postgres`` processes naming it."""
    folders = sorted(p for p in os.listdir(scratch) if p.startswith("ragbench-pg-"))
    procs = [p.info["name"] for p in _procs(scratch, ("initdb", "postgres"))]
    return [f"folder {f}" for f in folders] + [f"process {name}" for name in procs]


def _kill_left(scratch: str) -> None:
    """Kill what a run left (recorded before): no server outlives this script."""
    left = _procs(scratch, ("initdb", "postgres"))
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(left, timeout=10)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def once(phase: str, root: Path, scratch: str) -> dict[str, Any]:
    """One interrupted run: its times and what was left (a record without code and machine)."""
    n = 200_000 if phase == "build" else 2000
    delay = 1.0 if phase == "build" else 0.0
    cfg = Path(scratch) / "run.toml"
    cfg.write_text(CONFIG.format(n=n))
    env = dict(os.environ, TMPDIR=scratch, PYTHONPATH=str(root))
    env["RAGBENCH_CACHE_DIR"] = os.path.join(scratch, "cache")
    argv = [sys.executable, "-m", "ragbench", "run", "-c", str(cfg)]
    err = Path(scratch) / "stderr.txt"
    load_before = _load()
    with err.open("wb") as out:
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while not _in_phase(phase, scratch):
            if child.poll() is not None or time.monotonic() > deadline:
                tail = err.read_text(errors="replace")[-2000:]
                raise SystemExit(f"{phase}: never seen (exit {child.poll()}): {tail}")
            time.sleep(0.002)
        time.sleep(delay)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        code = child.wait(timeout=WAIT_S)
        exited = time.monotonic() - t0
        while (left := _left(scratch)) and time.monotonic() - t0 < WAIT_S:
            time.sleep(0.005)
        clean = time.monotonic() - t0
        said = err.read_text(errors="replace").strip().splitlines()
        return {
            "phase": phase,
            "delay_s": delay,
            "n": n,
            "seconds_to_exit": round(exited, 3),
            "seconds_to_nothing_left": None if left else round(clean, 3),
            "exit": code,
            "last_line": said[-1] if said else "",
            "left": left,
            "load_before": load_before,
            "load_after": _load(),
            "command": ["ragbench", "run", "-c", "run.toml"],
            "config": CONFIG.format(n=n),
        }
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        _kill_left(scratch)
        for name in os.listdir(scratch):  # the next run starts from an empty folder
            path = os.path.join(scratch, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)


def summary(phase: str, recs: list[dict[str, Any]]) -> str:
    """One phase's runs in one line: the medians and ranges of both times."""
    exits = [r["seconds_to_exit"] for r in recs]
    clean = [r["seconds_to_nothing_left"] for r in recs if r["seconds_to_nothing_left"] is not None]
    line = (
        f"{phase}: SIGINT to exit median {statistics.median(exits):.2f} s "
        f"[{min(exits):.2f}-{max(exits):.2f}]"
    )
    if clean:
        line += (
            f", to nothing left median {statistics.median(clean):.2f} s "
            f"[{min(clean):.2f}-{max(clean):.2f}]"
        )
    if len(clean) < len(recs):
        line += f", {len(recs) - len(clean)} runs left something after {WAIT_S:g} s"
    loads = [x for r in recs for x in (r["load_before"][0], r["load_after"][0])]
    return line + f" ({len(recs)} runs, 1-min load {min(loads):.1f}-{max(loads):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--label", help="the code measured, in the record (default: git rev)")
    parser.add_argument("--out", type=Path, help="append one JSON line per run to this file")
    args = parser.parse_args()
    phases = args.phases.split(",")
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phases {unknown}; known: {', '.join(PHASES)}")
    label = args.label or revision(args.root)
    host = machine()
    scratch = tempfile.mkdtemp(prefix="rb-pg-interrupt-", dir="/tmp")
    os.chmod(scratch, 0o711)  # the server's unprivileged user (as root) must traverse it
    try:
        for phase in phases:
            recs = []
            for _ in range(args.repeat):
                run = once(phase, args.root, scratch)
                rec = {
                    "schema": SCHEMA,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    **run,
                    "code": label,
                    "env": {**host, "load_avg": run["load_after"]},
                }
                recs.append(rec)
                if args.out is not None:
                    with args.out.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec) + "\n")
            print(summary(phase, recs), flush=True)
    finally:
        _kill_left(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
