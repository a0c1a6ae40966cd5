"""Nothing in the repository refers to a file outside it: a fresh clone holds every rule it cites.

The project's rules (the layers, the performance targets, the style habits)
and the structure check live in the repository (docs/explanation/architecture.md,
docs/reference/performance-targets.md, docs/contributing/style.md,
tools/check_structure.py). This test reads every tracked text file and fails on
a reference a fresh clone cannot follow:

- a path into a folder beside the clone (``../<folder>/...``) or into this
  machine's workspace (``/work/...``);
- a project document named in capitals (``NAME.md``, as the rule documents
  outside the repository were named) that is
  not a tracked file;
- a project tool or page (``tools/x.py``, ``docs/x.md``) that does not exist.

Recorded results (``docs/findings/data/``, and the README blocks rendered from
them between ``readme-gen`` markers) are left out: a record keeps the paths of
the machine that measured it, as data, not as a reference. So is this file,
whose examples are the references it looks for.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".proto", ".sh"}
TEXT_NAMES = {"Makefile", "run", ".gitignore"}
RECORDED = "docs/findings/data/"
#: A README block generated from a recorded results file (tools/docs_hooks.py --readme).
GENERATED = re.compile(r"<!-- readme-gen: .*?<!-- /readme-gen -->", re.S)
THIS = "tests/project/test_self_contained.py"

OUTSIDE = re.compile(r"(?:\.\./)+shared\b|(?<![\w.])/work/[\w.-]")
CAPITAL_DOC = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9_-]*\.md)\b")
PROJECT_PATH = re.compile(r"(?<![\w/.-])((?:tools/[\w/-]+\.py)|(?:docs/[\w/.-]+\.md))\b")


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return [p for p in out.splitlines() if (REPO / p).is_file()]


def _texts() -> dict[str, str]:
    texts = {}
    for rel in _tracked():
        path = Path(rel)
        if rel.startswith(RECORDED) or rel == THIS:
            continue
        if not (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES):
            continue
        try:
            text = (REPO / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        # a generated block keeps its lines, emptied, so line numbers stay right
        texts[rel] = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return texts


def outside_references(texts: dict[str, str], tracked: set[str]) -> list[str]:
    """``file:line: reference`` for every reference a fresh clone cannot follow."""
    names = {Path(p).name for p in tracked}
    found = []
    for rel, text in texts.items():
        for number, line in enumerate(text.splitlines(), 1):
            refs = [m.group(0) for m in OUTSIDE.finditer(line)]
            refs += [m.group(1) for m in CAPITAL_DOC.finditer(line) if m.group(1) not in names]
            refs += [
                m.group(1)
                for m in PROJECT_PATH.finditer(line)
                if m.group(1) not in tracked
                and not (REPO / m.group(1)).exists()
                and not Path(m.group(1)).stem.isupper()  # a placeholder: tools/NAME.py
            ]
            found += [f"{rel}:{number}: {ref}" for ref in refs]
    return found


def test_no_tracked_file_refers_outside_the_repository() -> None:
    tracked = set(_tracked())
    found = outside_references(_texts(), tracked)
    assert not found, "references a fresh clone cannot follow:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        # built from parts, so that this file holds none of the references it looks for
        "python3 ../" + "shared/tools/check_" + "layers.py ragbench",
        "# the targets of " + "PERF" + ".md",
        "see /work/shared/" + "DESIGN" + ".md",
        "run tools/check_" + "layers.py",
        "(docs/findings/2026-11-30-json-or-protobuf.md)",
    ],
)
def test_each_kind_of_outside_reference_is_found(line: str) -> None:
    tracked = set(_tracked())
    assert outside_references({"x.py": line}, tracked), line


@pytest.mark.parametrize(
    "line",
    [
        "see README.md and docs/reference/performance-targets.md#rerank",
        "python tools/check_structure.py ragbench",
        "git worktree add ../base HEAD",
    ],
)
def test_references_inside_the_repository_pass(line: str) -> None:
    assert not outside_references({"x.py": line}, set(_tracked())), line
