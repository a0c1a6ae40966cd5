"""How long Ctrl-C takes on a user's command inside a step that runs long C calls.

Phases:

- ``onnx-export``: ``ragbench run`` with the MiniLM embedder on ``runtime = "onnx"`` and an
  empty ``RAGBENCH_CACHE_DIR``, interrupted during its first ONNX export (seen as the
  export's temporary file in the cache), ``--delays`` seconds after it appears;
- ``onnx-quantize``: the same on ``runtime = "onnx-int8"``, interrupted ``--delays`` seconds
  after the int8 quantization's temporary file appears (the export done);
- ``scale-build``: ``ragbench scale --n 20k --dim 256 --index hnsw`` with ``M = 32`` and
  ``ef_construction = 400`` (one build thread), interrupted ``--delays`` seconds after the
  20 000-row build's first progress line;
- ``cross-encoder``: ``ragbench run -c hashing --set rerank.backend=cross-encoder`` (torch,
  random weights, 100 candidates a request), interrupted ``--delays`` seconds after its first
  ``requests`` progress line (set-up done, the reranker scoring);
- ``cross-encoder-build``: the same command, interrupted ``--delays`` seconds after
  ``start()`` begins building the random-weight model (seen as a file a ``sitecustomize``
  hook in the scratch folder touches when ``random_weights`` is entered; the build and the
  weights' initialisation take seconds, the warm-up forward follows).

SIGINT goes to the command's process group, as a terminal sends it. Each run prints the
seconds from SIGINT to exit, the exit status, and what was left: processes of the group,
and files in the ONNX cache. ``--root`` runs another checkout's ragbench (``--label`` names
it in the record, by default the checkout's git revision); ``--commit REV`` runs a
``git archive`` of an older commit of this repository (the commit before a fix, to
compare), made in a temporary folder and removed after.

``--out FILE`` appends one JSON line per interrupted run (schema
``ragbench.interrupt-timing/1``): the phase, the delay, the seconds to exit, the exit status
and the command's last line on stderr, the processes and cache files left, the 1-min load
average before and after, the code measured (``code``; ``code_ref`` the ``--commit`` as
given) and the machine. ``docs/findings/data/interrupt-timing.jsonl`` is one, shown on the
findings page ``docs/findings/2026-12-02-interrupt-timing.md``.

Run: ``.venv/bin/python bench/interrupt_timing.py [--phases onnx-export,onnx-quantize,
scale-build,cross-encoder,cross-encoder-build] [--delays 0.5,2,4] [--root DIR [--label
TEXT] | --commit REV] [--out FILE]``. Not part of the test suite; figures are machine
dependent (the 1-min load is recorded with each run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "ragbench.interrupt-timing/1"
SCALE = ["scale", "--n", "20k", "--dim", "256", "--index", "hnsw", "--queries", "50"]
SCALE += ["--build", "hnsw.M=32", "--build", "hnsw.ef_construction=400"]
EXPORT = ["run", "-c", "hashing", "--queries", "4", "--set", "embed.backend=minilm"]
EXPORT += ["--set", "embed.query_only=true"]
RERANK = ["run", "-c", "hashing", "--queries", "50", "--set", "rerank.backend=cross-encoder"]
COMMANDS = {
    "onnx-export": [*EXPORT, "--set", "embed.runtime=onnx"],
    "onnx-quantize": [*EXPORT, "--set", "embed.runtime=onnx-int8"],
    "scale-build": SCALE,
    "cross-encoder": RERANK,
    "cross-encoder-build": RERANK,
}
BUILDING = """
import os
from ragbench.rerankers import cross_encoder

_random_weights = cross_encoder.random_weights

def building(*args):
    open(os.environ["RB_BUILDING"], "w").close()
    return _random_weights(*args)

cross_encoder.random_weights = building
"""


def _seen(phase: str, scratch: Path, err: Path) -> bool:
    if phase == "onnx-export":
        return any(p for p in scratch.glob("cache/onnx/*.tmp.onnx") if "-int8" not in p.name)
    if phase == "onnx-quantize":
        return any(scratch.glob("cache/onnx/*-int8*.tmp.onnx"))
    if phase == "cross-encoder-build":
        return (scratch / "building").exists()
    if phase == "cross-encoder":
        return "ragbench: requests " in err.read_text(errors="replace")
    return bool(re.search(r"building hnsw [0-9 ]*/20 000", err.read_text(errors="replace")))


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def once(phase: str, root: Path, delay: float) -> dict[str, Any]:
    """One interrupted run: what it took and what was left (a record without the code label)."""
    scratch = Path(tempfile.mkdtemp(prefix="rb-interrupt-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=str(root), RAGBENCH_CACHE_DIR=str(scratch / "cache"))
    env["RAGBENCH_PROGRESS_INTERVAL_S"] = "0.1"
    if phase == "cross-encoder-build":
        (scratch / "site").mkdir()
        (scratch / "site" / "sitecustomize.py").write_text(BUILDING)
        env["PYTHONPATH"] = f"{scratch / 'site'}{os.pathsep}{root}"
        env["RB_BUILDING"] = str(scratch / "building")
    argv = [sys.executable, "-m", "ragbench", *COMMANDS[phase]]
    err = scratch / "stderr.txt"
    load_before = _load()
    with err.open("wb") as out:
        child = subprocess.Popen(
            argv, env=env, cwd=scratch, stdout=subprocess.DEVNULL, stderr=out,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not _seen(phase, scratch, err):
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{phase}: never seen (exit {child.poll()}): {err.read_text()}")
            time.sleep(0.01)
        time.sleep(delay)
        in_phase = _seen(phase, scratch, err)
        group = [p.pid for p in psutil.Process(child.pid).children(recursive=True)]
        t0 = time.monotonic()
        os.killpg(child.pid, signal.SIGINT)
        code = child.wait(timeout=120)
        took = time.monotonic() - t0
        time.sleep(0.5)
        said = err.read_text(errors="replace").strip().splitlines()
        return {
            "phase": phase,
            "delay_s": delay,
            "seconds_to_exit": round(took, 3),
            "exit": code,
            "last_line": said[-1] if said else "",
            "in_phase_at_signal": in_phase,
            "processes_left": [pid for pid in group if psutil.pid_exists(pid)],
            "cache_files_left": sorted(p.name for p in scratch.glob("cache/onnx*/*")),
            "load_before": load_before,
            "load_after": _load(),
            "command": ["ragbench", *COMMANDS[phase]],
        }
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def revision(root: Path) -> str:
    """``root``'s git revision (``+dirty`` if modified), or its folder's name outside git."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return root.name
    return rev + ("+dirty" if dirty else "")


def archive(rev: str, into: Path) -> str:
    """``git archive`` of this repository's ``rev`` unpacked into ``into``; its short hash."""
    short = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout.strip()  # fmt: skip
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", short],
        capture_output=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, timeout=120, check=True)
    return short


def machine() -> dict[str, Any]:
    """The CPU model, its vector flags and the usable cores (``ragbench.env``'s own fields)."""
    sys.path.insert(0, str(ROOT))
    from ragbench.env import environment

    env = environment()
    return {k: env[k] for k in ("cpu", "cpu_flags", "cores", "python")}


def line(rec: dict[str, Any]) -> str:
    """The one line printed for a run."""
    return (
        f"{rec['phase']} +{rec['delay_s']:g} s ({rec['code']}): SIGINT to exit "
        f"{rec['seconds_to_exit']:.2f} s, exit {rec['exit']}, processes left "
        f"{rec['processes_left']}, cache files left {rec['cache_files_left']} "
        f"(1-min load {rec['load_before'][0]:.1f} -> {rec['load_after'][0]:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--phases", default="onnx-export,scale-build")
    parser.add_argument("--delays", default="0.5,2,4")
    code = parser.add_mutually_exclusive_group()
    code.add_argument("--root", type=Path, default=ROOT, help="the checkout to run")
    code.add_argument("--commit", help="run a git archive of this commit of the repository")
    parser.add_argument("--label", help="the code measured, in the record (default: git rev)")
    parser.add_argument("--out", type=Path, help="append one JSON line per run to this file")
    args = parser.parse_args()
    unknown = [p for p in args.phases.split(",") if p not in COMMANDS]
    if unknown:
        parser.error(f"unknown phases {unknown}; known: {', '.join(COMMANDS)}")
    with tempfile.TemporaryDirectory(prefix="rb-interrupt-code-") as tmp:
        root = Path(tmp) if args.commit else args.root
        label = args.label or (archive(args.commit, root) if args.commit else revision(root))
        host = machine()
        for phase in args.phases.split(","):
            for delay in (float(d) for d in args.delays.split(",")):
                run = once(phase, root, delay)
                rec = {
                    "schema": SCHEMA,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    **run,
                    "code": label,
                    "code_ref": args.commit,
                    "env": {**host, "load_avg": run["load_after"]},
                }
                print(line(rec), flush=True)
                if args.out is not None:
                    with args.out.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
