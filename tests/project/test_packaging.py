"""The package's own metadata: pyproject.toml is read by setuptools without a warning, and `make
test` installs what every embedder runtime needs."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_applies_without_deprecation_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # `license = { text = ... }` made setuptools print a deprecation banner four times per
    # `make run`; an SPDX string is what PEP 639 asks for
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), os.path.join(ROOT, "pyproject.toml"))
    assert dist.metadata.license_expression == "MIT"


def test_make_test_installs_every_embedder_runtimes_extra() -> None:
    """`make test` installs ``.[dev,embed]``: the dev extra must carry the extra of every MiniLM
    runtime (the package each needs, as the missing-package error names it) and the static
    model's, so their tests run in CI instead of skipping."""
    from ragbench.embedders import _runtimes

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    found = re.fullmatch(r"ragbench\[(.*)\]", extras["dev"][0])
    assert found is not None
    dev = set(found.group(1).split(","))
    needed = {extra for needs in _runtimes._NEEDS.values() for _module, extra in needs}
    assert needed == {"onnx", "openvino"}  # a runtime added without an extra is caught here
    assert needed | {"static"} <= dev
    assert any(req.startswith("model2vec") for req in extras["static"])
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "install -q -e '.[dev,embed]'" in make
    assert re.search(r"^test: \$\(VENV\)/\.dev", make, re.MULTILINE)
