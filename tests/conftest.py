"""Shared test set-up: an isolated cache directory and offline model loading."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test session gets its own ragbench cache unless CI chose one."""
    if "RAGBENCH_CACHE_DIR" not in os.environ:
        os.environ["RAGBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("ragbench-cache"))


@pytest.fixture(scope="session", autouse=True)
def _shared_postgres():  # type: ignore[no-untyped-def]
    """Stop the PostgreSQL server tests/pgshared.py may have started."""
    yield
    import pgshared

    pgshared.stop()
