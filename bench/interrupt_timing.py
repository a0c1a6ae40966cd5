"""How long Ctrl-C takes on a user's command inside a step that runs long C calls.

Phases:

- ``onnx-export``: ``ragbench run`` with the MiniLM embedder on ``runtime = "onnx"`` and an
  empty ``RAGBENCH_CACHE_DIR``, interrupted during its first ONNX export (seen as the
  export's temporary file in the cache), ``--delays`` seconds after it appears;
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
and (``onnx-export``) files in the ONNX cache. ``--root`` runs another checkout's ragbench
(an older commit, e.g. a ``git archive`` of it, to compare).

Run: ``.venv/bin/python bench/interrupt_timing.py [--phases onnx-export,scale-build,cross-encoder,
cross-encoder-build]
[--delays 0.5,2,4] [--root DIR]``. Not part of the test suite; figures are machine dependent
(the 1-min load is printed with each run).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SCALE = ["scale", "--n", "20k", "--dim", "256", "--index", "hnsw", "--queries", "50"]
SCALE += ["--build", "hnsw.M=32", "--build", "hnsw.ef_construction=400"]
EXPORT = ["run", "-c", "hashing", "--queries", "4", "--set", "embed.backend=minilm"]
EXPORT += ["--set", "embed.runtime=onnx", "--set", "embed.query_only=true"]
RERANK = ["run", "-c", "hashing", "--queries", "50", "--set", "rerank.backend=cross-encoder"]
COMMANDS = {
    "onnx-export": EXPORT,
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
        return any(scratch.glob("cache/onnx/*.tmp.onnx"))
    if phase == "cross-encoder-build":
        return (scratch / "building").exists()
    if phase == "cross-encoder":
        return "ragbench: requests " in err.read_text(errors="replace")
    return bool(re.search(r"building hnsw [0-9 ]*/20 000", err.read_text(errors="replace")))


def once(phase: str, root: Path, delay: float) -> str:
    """One interrupted run: a line of what it took and what was left."""
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
        group = [p.pid for p in psutil.Process(child.pid).children(recursive=True)]
        t0 = time.monotonic()
        os.killpg(child.pid, signal.SIGINT)
        code = child.wait(timeout=120)
        took = time.monotonic() - t0
        time.sleep(0.5)
        alive = [pid for pid in group if psutil.pid_exists(pid)]
        files = sorted(p.name for p in scratch.glob("cache/onnx*/*"))
        load = os.getloadavg()[0]
        return (
            f"{phase} +{delay:g} s: SIGINT to exit {took:.2f} s, exit {code}, "
            f"processes left {alive}, cache files left {files} (1-min load {load:.1f})"
        )
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phases", default="onnx-export,scale-build")
    parser.add_argument("--delays", default="0.5,2,4")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    for phase in args.phases.split(","):
        for delay in (float(d) for d in args.delays.split(",")):
            print(once(phase, args.root, delay), flush=True)


if __name__ == "__main__":
    main()
