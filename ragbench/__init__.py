"""ragbench: where the time goes between a question and the first token of a RAG service.

The public API is re-exported here. Heavy modules (numpy, faiss, numba, torch,
grpc) load only when something that needs them is used, so ``import ragbench``
stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _deprecated, codecs, embedders, errors, generators, indexes, rerankers, transports
from .types import Hit, RetrievalResult

_deprecated.install()  # the old import paths of moved modules keep working for one release

if TYPE_CHECKING:
    from . import datasets, settings, timing
    from .pipeline import Pipeline
    from .results.report import Report

__version__ = "0.1.0"

__all__ = [
    "Hit",
    "Pipeline",
    "Report",
    "RetrievalResult",
    "__version__",
    "codecs",
    "datasets",
    "embedders",
    "errors",
    "generators",
    "indexes",
    "rerankers",
    "settings",
    "timing",
    "transports",
]

_LAZY = {
    "configs": ("ragbench.configs", None),  # deprecated: ragbench.settings (_deprecated.MOVED)
    "settings": ("ragbench.settings", None),
    "datasets": ("ragbench.datasets", None),
    "timing": ("ragbench.timing", None),
    "Pipeline": ("ragbench.pipeline", "Pipeline"),
    "Report": ("ragbench.results.report", "Report"),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'ragbench' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
