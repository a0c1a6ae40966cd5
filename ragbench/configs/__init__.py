"""The example pipeline configurations shipped in the package, by name.

::

    import ragbench as rb

    rb.configs.names()                  # ['default', 'hashing', 'stub-llm', 'transformers']
    rb.configs.path("hashing")          # .../site-packages/ragbench/configs/hashing.toml
    cfg = rb.configs.load("default")    # the normalized config dict
    rb.Pipeline.from_config("hashing")  # names work wherever a config file does

``default`` (MiniLM, HNSW, numba, Protobuf in process), ``hashing`` (the same
with the model-free hashing embedder), ``stub-llm`` (http transport and the
stub LLM server), ``transformers`` (a real prefill of SmolLM2-135M's
architecture with random weights). The repository's ``bench/configs/`` links
to these files. A name that is neither a file nor a shipped config raises
:class:`~ragbench.errors.ConfigError` listing the shipped names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import load_config, shipped_names, shipped_path

__all__ = ["load", "names", "path"]


def names() -> list[str]:
    """The shipped config names, sorted."""
    return shipped_names()


def path(name: str) -> Path:
    """The TOML file of shipped config ``name``."""
    return shipped_path(name)


def load(name: str) -> dict[str, Any]:
    """Shipped config ``name``, normalized (defaults filled in, every key checked)."""
    return load_config(shipped_path(name))
