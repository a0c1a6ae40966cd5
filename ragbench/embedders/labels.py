"""How tables name an embedder configuration: ``minilm:torch``, ``minilm:onnx-int8+query-only``, ``model2vec``.

One name for what embedded the queries, made from the embedder's registry
name and its ``describe()`` (a record's ``info.embedder_info``), so a sweep
point and a run row of the same configuration read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["config_label"]


def config_label(name: str, about: Mapping[str, Any] | None) -> str:
    """``minilm:<runtime>`` (``+query-only`` when only the queries use a runtime other than
    torch) for MiniLM; any other embedder by its name (``model2vec``, ``hashing``)."""
    about = about or {}
    runtime = about.get("runtime")
    label = f"{name}:{runtime}" if name == "minilm" and runtime else name
    if about.get("query_only") and runtime not in (None, "torch"):
        label += "+query-only"
    return label
