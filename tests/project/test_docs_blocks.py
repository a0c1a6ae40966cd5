"""Every code block of the docs that claims to run is run, as a reader would run it.

A page marks such a block with ``<!-- run -->`` on the line before its opening fence:

- a ``python`` block is written to a file in a fresh folder outside the repository and run
  with this interpreter (this checkout first on ``PYTHONPATH``, ``HF_HUB_OFFLINE=1``, the
  test session's ``RAGBENCH_CACHE_DIR``); it must exit 0;
- a ``sh`` block is run line by line in such a folder; every line must be a ``ragbench ...``
  command (comments allowed), run as ``python -m ragbench ...``; each must exit 0. Marked
  shell blocks use small sizes (``--queries`` of a few dozen), so this stays quick.

- a ``yaml`` block is a CI job (a GitHub Actions step list): its steps run as CI would run
  them, in a throwaway git repository holding a copy of this checkout as the pull request's
  base and a head commit on it (``tools/recipe_detection.py``, which also measures the job),
  with the small sizes ``CI_SIZES`` in place of the job's ``env``; the job must pass, and
  each side's records must come from its own commit.

The README's Python API block and the service of "Timing your own service" are run by
``tests/settings/test_configs_shipped.py`` and ``tests/timing/test_middleware.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOOL = ROOT / "tools" / "recipe_detection.py"
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
    assert langs.count("yaml") >= 1, BLOCKS
    assert set(langs) <= {"python", "sh", "yaml"}, langs


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
    if block.lang == "yaml":
        _run_ci_job(block, tmp_path)
        return
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


#: The sizes a marked CI job runs with here (its own ``env`` sets the measured ones).
CI_SIZES = {"RUNS": "2", "QUERIES": "20", "REPEAT": "2"}


def _recipe_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recipe_detection", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recipe_detection"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run_ci_job(block: Block, tmp_path: Path) -> None:
    """The job's steps on a base commit and a head commit of this checkout's code."""
    tool = _recipe_tool()
    steps = tool.steps_of(block.code)
    shas = tool.make_origin(tmp_path / "origin")
    env = {**_env(tmp_path), **CI_SIZES}
    del env["PYTHONPATH"]  # each checkout runs its own code, as in CI
    checkout, done = tool.run_job(
        steps, tmp_path / "origin", shas["base"], shas["same"], tmp_path, env
    )
    where = f"{block.page}:{block.line}"
    assert len(done) == len(steps), f"{where}: {done[-1].args}\n{done[-1].stderr[-3000:]}"
    assert all(p.returncode == 0 for p in done[:-1]), f"{where}\n{done[-1].stderr[-3000:]}"
    # the last step is the diff: 0, or 1 when 20 requests read a change beyond 5 %
    assert done[-1].returncode in (0, 1) and "B / A" in done[-1].stdout, done[-1].stderr[-3000:]
    for side, sha in (("base", shas["base"]), ("head", shas["same"])):
        records = [
            json.loads(line) for line in (checkout / f"{side}.jsonl").read_text().splitlines()
        ]
        assert len(records) == 2 * int(CI_SIZES["RUNS"]), f"{side}: one record per index per run"
        assert {r["env"]["git_revision"] for r in records} == {sha}, f"{side} ran other code"
