"""Every code block of the docs that claims to run is run, as a reader would run it.

A page marks such a block with ``<!-- run -->`` on the line before its opening fence:

- a ``python`` block is written to a file in a fresh folder outside the repository and run
  with this interpreter (this checkout first on ``PYTHONPATH``, ``HF_HUB_OFFLINE=1``, the
  test session's ``RAGBENCH_CACHE_DIR``); it must exit 0;
- a ``sh`` block is run line by line in such a folder; every line must be a ``ragbench ...``
  command (comments allowed), run as ``python -m ragbench ...``; each must exit 0. Marked
  shell blocks use small sizes (``--queries`` of a few dozen), so this stays quick.

The README's Python API block and the service of "Timing your own service" are run by
``tests/test_configs_shipped.py`` and ``tests/test_middleware.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARK = "<!-- run -->"
BLOCK = re.compile(r"^<!-- run -->\n```(?P<lang>[a-z]*)[^\n]*\n(?P<code>.*?)^```$", re.M | re.S)


class Block(NamedTuple):
    page: str
    line: int
    lang: str
    code: str


def marked_blocks(root: Path = DOCS) -> list[Block]:
    """Every block of every page under ``root`` that has the run mark before it."""
    out = []
    for page in sorted(root.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        found = list(BLOCK.finditer(text))
        assert len(found) == text.count(MARK), f"{page}: a run mark not right before a ``` fence"
        for m in found:
            line = text.count("\n", 0, m.start()) + 2
            out.append(Block(page.relative_to(root).as_posix(), line, m["lang"], m["code"]))
    return out


BLOCKS = marked_blocks()


def _env(tmp_path: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "RAGBENCH_CACHE_DIR": os.environ.get("RAGBENCH_CACHE_DIR", str(tmp_path / "cache")),
        "HF_HUB_OFFLINE": "1",
    }


def test_the_marked_blocks_are_found() -> None:
    langs = [b.lang for b in BLOCKS]
    assert langs.count("python") >= 1 and langs.count("sh") >= 3, BLOCKS
    assert set(langs) <= {"python", "sh"}, langs


def test_a_mark_without_a_block_is_refused(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# Page\n\n<!-- run -->\nsome text\n```sh\nls\n```\n")
    with pytest.raises(AssertionError, match="run mark not right before"):
        marked_blocks(tmp_path)
    (tmp_path / "page.md").write_text("# Page\n\n<!-- run -->\n```python\nprint(1)\n```\n")
    assert marked_blocks(tmp_path) == [Block("page.md", 4, "python", "print(1)\n")]


def _commands(code: str) -> list[list[str]]:
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "ragbench", f"a marked shell block runs ragbench commands only: {line}"
        commands.append(words[1:])
    assert commands
    return commands


@pytest.mark.integration  # child processes
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_marked_block_runs(block: Block, tmp_path: Path) -> None:
    here = tmp_path / "reader"
    here.mkdir()
    env = _env(tmp_path)
    if block.lang == "python":
        script = here / "example.py"
        script.write_text(block.code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=here,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, f"{block.page}:{block.line}\n{done.stderr[-3000:]}"
        return
    for args in _commands(block.code):
        done = subprocess.run(
            [sys.executable, "-m", "ragbench", *args],
            cwd=here,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, f"ragbench {shlex.join(args)}\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"ragbench {shlex.join(args)} printed nothing"
