"""tools/check_structure.py: the repository's own structure check (``make layers`` runs it).

Run as CI runs it, on this checkout, and on a small package built to break
each rule once, so every rule is seen to fire and to let the allowed
patterns through.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "check_structure.py"


def _run(package: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), str(package), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=package.parent,
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_this_checkout_keeps_the_structure_rules() -> None:
    res = _run(REPO / "ragbench")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1].startswith("0 import cycles, 0 underscore names")


def test_each_rule_fires_once_on_a_package_built_to_break_it(tmp_path: Path) -> None:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(85))
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\n",  # the face: re-exports, no cycle
            # a -> b at module level, b -> a inside a function: still a cycle
            "pkg/a.py": "from .b import helper\nA = 1\n",
            "pkg/b.py": "def helper():\n    from .a import A\n    return A\n",
            # an underscore name taken from a public module
            "pkg/c.py": "from .d import _secret\n",
            "pkg/d.py": "_secret = 1\n",
            # allowed: a private module's names, and the package's own private submodule
            "pkg/sub/__init__.py": "from . import _impl\nfrom ._impl import _shared\n",
            "pkg/sub/_impl.py": "__all__ = ['_shared']\n_shared = 2\n",
            # a private submodule reached from outside its package
            "pkg/e.py": "from .sub import _impl\n",
            "pkg/f.py": "def long():\n" + long_body,
            "pkg/_pb/gen.py": "from ..d import _secret\n",  # generated code: skipped
        },
    )
    res = _run(tmp_path / "pkg")
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    found = sorted(line.split(" ", 2)[1] for line in lines[:-1])
    assert found == ["cycle:", "exports:", "long:", "private:", "private:"], res.stdout
    text = res.stdout
    assert "cycle: pkg.a -> pkg.b" in text
    assert "pkg/c.py:1 private: takes _secret from pkg.d" in text
    assert "pkg/e.py:1 private: imports pkg.sub._impl from outside pkg.sub" in text
    assert "pkg/sub/_impl.py:1 exports: a private module declares __all__" in text
    assert "pkg/f.py:1 long: long is 86 lines (limit 80)" in text
    assert lines[-1] == (
        "1 import cycles, 2 underscore names or modules taken across packages, "
        "1 private modules with __all__, 1 functions over 80 lines"
    )
    assert _run(tmp_path / "pkg", "--max-lines", "90").stdout.count(" long: ") == 0


def test_make_layers_runs_the_structure_check() -> None:
    res = subprocess.run(
        ["make", "-n", "--no-print-directory", "layers"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert "tools/check_structure.py ragbench" in res.stdout
