"""The five layers of docs/explanation/architecture.md are enforced by import-linter, not only described.

``[tool.importlinter]`` in pyproject.toml holds one ``layers`` contract
(face > drivers > results > stages and data > core, exhaustive); these tests
run ``lint-imports`` on this checkout as CI does (``make layers``), and on
copies of the package with a deliberate violation, to show the contract
really rejects an upward import, an import between independent siblings and
a module given no layer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: The modules docs/explanation/architecture.md names for each layer, top (5) to bottom (1).
NAMED = {
    5: {"cli", "testing"},
    4: {"pipeline", "sweeps", "workers", "traffic", "executors"},
    3: {"results"},
    2: {"indexes", "rerankers", "codecs", "embedders", "transports", "generators", "prompt"}
    | {"datasets"},
    1: {"errors", "types", "validate", "settings", "threads", "timing", "metrics", "env"}
    | {"process"},
}


def _contract() -> dict:
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c for c in contracts["contracts"] if c["type"] == "layers"]
    return layers


def _lint(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with this repository's contract on the ``ragbench`` found in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(PYPROJECT)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp_path: Path) -> Path:
    """A copy of the package under ``tmp_path/src`` (to break on purpose)."""
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "ragbench", src / "ragbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    return src


def test_the_contract_is_the_five_layers_of_the_design() -> None:
    layers = _contract()
    assert layers["containers"] == ["ragbench"] and layers["exhaustive"] is True
    assert len(layers["layers"]) == 5
    for level, spec in zip((5, 4, 3, 2, 1), layers["layers"], strict=True):
        members = {m.strip() for m in spec.replace("|", ":").split(":")}
        assert NAMED[level] <= members, (level, NAMED[level] - members)


def test_this_checkout_keeps_the_layers(tmp_path: Path) -> None:
    assert LINT_IMPORTS.is_file(), "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = _lint(REPO, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "message"),
    [
        # core importing a driver
        ("errors.py", "from .pipeline import Pipeline", "ragbench.errors is not allowed to import ragbench.pipeline"),
        # a stage package importing a result module, inside a function
        ("codecs/__init__.py", "def _late():\n    from ..results.tables import render", "ragbench.codecs is not allowed to import ragbench.results"),
        # the pytest plugin and the command line are independent siblings
        ("testing.py", "from . import cli", "ragbench.testing is not allowed to import ragbench.cli"),
    ],
)  # fmt: skip
def test_a_forbidden_import_breaks_the_contract(
    tmp_path: Path, module: str, line: str, message: str
) -> None:
    src = _copy(tmp_path)
    target = src / "ragbench" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n\n{line}\n", encoding="utf-8")
    done = _lint(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 kept, 1 broken" in done.stdout
    assert message in done.stdout


def test_a_module_without_a_layer_breaks_the_contract(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    (src / "ragbench" / "stray.py").write_text('"""Nobody gave me a layer."""\n', encoding="utf-8")
    done = _lint(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ragbench.stray" in done.stdout
