"""How long Ctrl-C takes on ``ragbench run`` with pgvector, in each phase of its own server.

For each phase -- ``initdb`` running, the server started (its postmaster
listening), ``CREATE INDEX`` running on a 200 000 x 64 corpus -- a
``ragbench run`` is started with ``TMPDIR`` set to a scratch folder, SIGINT
is sent once the phase is seen (``CREATE INDEX``: 1 s into it), and two
times are printed: SIGINT to the process's exit, and SIGINT to nothing being
left (no ``initdb`` or ``postgres`` process naming the scratch folder, no
server folder in it). ``--root`` runs another checkout's ragbench (to compare
with an older commit, e.g. a ``git archive`` of it).

Run: ``.venv/bin/python bench/pg_interrupt.py [--repeat 3] [--phases initdb,start,build]``.
Not part of the test suite; figures are machine dependent.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

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


def _procs(scratch: str, names: tuple[str, ...]) -> list[list[str]]:
    """Command lines of processes named ``names`` that mention ``scratch``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["name"] in names and any(scratch in part for part in cmd):
            found.append(cmd)
    return found


def _in_phase(phase: str, scratch: str) -> bool:
    if phase == "initdb":
        return bool(_procs(scratch, ("initdb",)))
    if phase == "start":
        return any("-k" in cmd for cmd in _procs(scratch, ("postgres",)))
    for proc in psutil.process_iter(["name", "cmdline"]):  # a backend shows its statement
        if proc.info["name"] == "postgres" and "CREATE INDEX" in " ".join(
            proc.info["cmdline"] or []
        ):
            return True
    return False


def _left(scratch: str) -> bool:
    folders = [p for p in os.listdir(scratch) if p.startswith("ragbench-pg-")]
    return bool(folders or _procs(scratch, ("initdb", "postgres")))


def once(phase: str, root: Path, scratch: str) -> tuple[float, float]:
    """(SIGINT to exit, SIGINT to nothing left), seconds."""
    cfg = Path(scratch) / "run.toml"
    cfg.write_text(CONFIG.format(n=200_000 if phase == "build" else 2000))
    env = dict(os.environ, TMPDIR=scratch, PYTHONPATH=str(root))
    env["RAGBENCH_CACHE_DIR"] = os.path.join(scratch, "cache")
    argv = [sys.executable, "-m", "ragbench", "run", "-c", str(cfg)]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not _in_phase(phase, scratch):
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{phase}: never seen (exit {child.poll()})")
            time.sleep(0.002)
        if phase == "build":
            time.sleep(1.0)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        exited = time.monotonic() - t0
        while _left(scratch) and time.monotonic() - t0 < 60:
            time.sleep(0.005)
        return exited, time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", default="initdb,start,build")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="rb-pg-interrupt-", dir="/tmp")
    os.chmod(scratch, 0o711)  # the server's unprivileged user (as root) must traverse it
    try:
        for phase in args.phases.split(","):
            runs = [once(phase, args.root, scratch) for _ in range(args.repeat)]
            exits = [r[0] for r in runs]
            clean = [r[1] for r in runs]
            print(
                f"{phase}: SIGINT to exit median {statistics.median(exits):.2f} s "
                f"[{min(exits):.2f}-{max(exits):.2f}], to nothing left median "
                f"{statistics.median(clean):.2f} s [{min(clean):.2f}-{max(clean):.2f}] "
                f"({args.repeat} runs)",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
