"""The package's own metadata: pyproject.toml is read by setuptools without a warning."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

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
