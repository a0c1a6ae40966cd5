"""The tests mirror the package: every folder under ``tests/`` is named after a ragbench package.

Two folders are not packages and are named here: ``faults`` (attacks across components) and
``project`` (the repository's own checks). docs/contributing/style.md says so.
"""

from __future__ import annotations

from pathlib import Path

import ragbench

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = Path(ragbench.__file__).resolve().parent
NOT_PACKAGES = {"faults", "project"}


def _folders(root: Path) -> set[str]:
    return {
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and p.name != "__pycache__"
    }


def test_every_test_folder_is_named_after_a_package() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    strays = _folders(TESTS) - packages - NOT_PACKAGES
    assert not strays, f"tests/ folders named after no ragbench package: {sorted(strays)}"


def test_test_files_sit_in_folders_not_all_at_the_root() -> None:
    nested = [p for p in TESTS.rglob("test_*.py") if p.parent != TESTS]
    at_root = list(TESTS.glob("test_*.py"))
    # the package's subpackages hold most of the code, so most tests are in folders
    assert len(nested) > 3 * len(at_root), (len(nested), len(at_root))


def test_no_folder_has_an_init_module() -> None:
    """Test folders are not packages: their files import as top-level modules, so names are unique."""
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert not list(TESTS.rglob("__init__.py"))
