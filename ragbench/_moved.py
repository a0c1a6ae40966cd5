"""Modules that moved, kept importable under their old names for one release.

Issue 30 moved ``ragbench.records``, ``record_schema``, ``report``,
``rendering`` and ``reading`` into :mod:`ragbench.results`, and
``ragbench.streaming`` (live inserts and deletes, not token streaming) to
:mod:`ragbench.live_writes`. Each old module calls
:func:`warn_moved`: importing it warns (DeprecationWarning); an old module is the
new one itself, an old package re-exports the names it exported; its submodules
(``ragbench.rendering.cells``) are the new ones under their old names, so a
class imported either way is the same class.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from types import ModuleType


def warn_moved(old: str, new: str) -> ModuleType:
    """Warn that ``old`` moved to ``new``; the new module, its submodules registered as ``old``'s."""
    warnings.warn(
        f"{old} is deprecated: import {new} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)
    for sub in pkgutil.iter_modules(getattr(module, "__path__", [])):
        submodule = importlib.import_module(f"{new}.{sub.name}")
        sys.modules[f"{old}.{sub.name}"] = submodule
        setattr(sys.modules[old], sub.name, submodule)
    return module
