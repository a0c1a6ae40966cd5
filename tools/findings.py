"""Re-measure the findings: run every command of ``docs/findings/commands.toml``.

``make findings`` runs this; ``python tools/findings.py NAME...`` re-measures only the named
results files, ``--list`` prints the commands without running them. Each finding's results
file (``docs/findings/data/NAME``) is deleted first, since the commands append to it. The
same manifest is read by ``tools/docs_hooks.py``, which prints each finding's commands under
its tables, so every command is written in one place.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the package's own dependency on Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "docs" / "findings" / "commands.toml"
DATA = ROOT / "docs" / "findings" / "data"
#: A measuring script of this repository (``python tools/recipe_detection.py ...``,
#: ``python bench/interrupt_timing.py ...``).
TOOL = re.compile(r"(?:tools|bench)/[a-z_]+\.py")


@dataclass(frozen=True, slots=True)
class Finding:
    """One results file and the commands that write it (in order)."""

    name: str
    commands: tuple[str, ...]
    stdout: bool = False

    def path(self, root: Path = ROOT) -> Path:
        """Where the commands, run from ``root``, write the results file."""
        return root / DATA.relative_to(ROOT) / self.name


def load(manifest: Path = MANIFEST) -> dict[str, Finding]:
    """Every finding of the manifest by results-file name; a malformed entry is a ValueError."""
    doc = tomllib.loads(manifest.read_text(encoding="utf-8"))
    found: dict[str, Finding] = {}
    for entry in doc.get("finding", []):
        name, commands = entry.get("name"), entry.get("commands")
        if not isinstance(name, str) or "/" in name or not name:
            raise ValueError(f"{manifest}: a finding needs a plain file name, got {name!r}")
        if not isinstance(commands, list) or not commands:
            raise ValueError(f"{manifest}: finding {name} has no commands")
        for cmd in commands:
            words = shlex.split(cmd)
            tool = words[:2][-1] if words[0] == "python" else ""
            if words[0] not in ("ragbench", "pytest") and not TOOL.fullmatch(tool):
                raise ValueError(
                    f"{manifest}: {name}: commands start with ragbench, pytest or "
                    "python tools/NAME.py or bench/NAME.py"
                )
            if not entry.get("stdout") and f"docs/findings/data/{name}" not in words:
                raise ValueError(f"{manifest}: {name}: {cmd!r} does not write data/{name}")
        if name in found:
            raise ValueError(f"{manifest}: finding {name} listed twice")
        found[name] = Finding(name, tuple(commands), bool(entry.get("stdout", False)))
    return found


def first_word(command: str) -> str:
    return shlex.split(command)[0]


def argv(command: str) -> list[str]:
    """The command as run: ``ragbench``/``pytest``/``python tools/X.py`` through this interpreter."""
    first, *rest = shlex.split(command)
    return [sys.executable, *rest] if first == "python" else [sys.executable, "-m", first, *rest]


def run(finding: Finding, root: Path = ROOT) -> float:
    """Run one finding's commands from ``root`` (the repository); seconds taken. Fails loudly."""
    target = finding.path(root)
    target.unlink(missing_ok=True)
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    for cmd in finding.commands:
        print(f"$ {cmd}", flush=True)
        out = subprocess.run(
            argv(cmd),
            cwd=root,
            env=env,
            check=False,
            stdout=subprocess.PIPE if finding.stdout else None,
            text=True,
        )
        if out.returncode == 1 and first_word(cmd) == "pytest" and target.is_file():
            # a bench that missed its target still wrote its measurements: keep them, say so
            print(f"findings: {finding.name}: a bench missed its target (kept)", flush=True)
        elif out.returncode != 0:
            raise SystemExit(f"findings: {finding.name}: exit {out.returncode} from: {cmd}")
        if finding.stdout:
            target.write_text(out.stdout, encoding="utf-8")
    if target.suffix == ".json" and first_word(finding.commands[-1]) == "pytest":
        strip_benchmark_samples(target)
    return time.perf_counter() - t0


def strip_benchmark_samples(path: Path) -> None:
    """Drop each benchmark's raw timings (``stats.data``) from a ``--benchmark-json`` file.

    pytest-benchmark writes every round's time into the JSON (megabytes); the statistics it
    computed from them, the machine info and the benches' ``extra_info`` stay.
    """
    doc = json.loads(path.read_text(encoding="utf-8"))
    for entry in doc.get("benchmarks") or []:
        (entry.get("stats") or {}).pop("data", None)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="results files to re-measure (default: all)")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    opts = parser.parse_args(args)
    findings = load()
    unknown = [n for n in opts.names if n not in findings]
    if unknown:
        parser.error(f"unknown findings {unknown}; known: {', '.join(findings)}")
    chosen = [findings[n] for n in opts.names] if opts.names else list(findings.values())
    for f in chosen:
        if opts.list:
            print("\n".join(f.commands))
            continue
        took = run(f)
        size = f.path().stat().st_size
        print(f"findings: {f.name}: {size:,} B in {took:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
