"""Which registered index backends a contract test runs, by what each one declares.

The contract tests (``test_index_filters.py``, ``test_index_writes.py``,
``test_indexes.py``) take their cases from here: every registered backend
(the built-ins, any installed plugin, and the how-to's example backend
``docs/how-to/examples/sq_index.py``, registered as :data:`EXAMPLE`), each
one a case of a test when it declares the capability the test needs
(:mod:`ragbench.indexes.contract`) and a skipped case naming the capability
when it does not. A backend written from the ``Index`` Protocol alone is
collected and skipped, never an error.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench._registry import BUILTIN_INDEXES

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "examples"
#: The how-to's example backend, run through the contract tests like a built-in one.
EXAMPLE = "sq8-example"


def register_example() -> None:
    """Register the how-to's example backend (once), as its page tells a user to."""
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))
    if EXAMPLE not in rb.indexes.registry:
        rb.indexes.register(EXAMPLE, "sq_index:ScalarQuantizerIndex")


register_example()


@cache
def probe(name: str) -> Any:
    """An unbuilt index of backend ``name`` (``dim=PROBE_DIM``), to read what it declares."""
    return rb.indexes.create(name, dim=rb.indexes.PROBE_DIM)


@cache
def installed(name: str) -> bool:
    """Whether backend ``name``'s library imports here (an optional extra may be missing)."""
    try:
        rb.indexes.registry.factory(name)
    except ImportError:
        return False
    return True


def dense() -> list[str]:
    """Every registered backend over vectors (a text index such as minhash-lsh is not)."""
    names = [n for n in rb.indexes.names() if installed(n)]
    return [n for n in names if probe(n).input_kind == "vectors"]


def builtin(names: list[str]) -> list[str]:
    """The backends ragbench ships, of ``names``."""
    return [n for n in names if n in BUILTIN_INDEXES]


def declaring(capability: type, names: list[str] | None = None) -> list[Any]:
    """Cases of ``names`` (default: :func:`dense`): a skip naming ``capability`` where undeclared."""
    out: list[Any] = []
    for name in dense() if names is None else names:
        if rb.indexes.declares(probe(name), capability):
            out.append(name)
        else:
            reason = f"{name} does not declare {capability.__name__}"
            out.append(pytest.param(name, marks=pytest.mark.skip(reason=reason)))
    return out


def deleting(names: list[str] | None = None) -> list[Any]:
    """Cases of the backends that declare ``delete`` (WritableIndex with a ``delete_mode``)."""
    out: list[Any] = []
    for case in declaring(rb.indexes.WritableIndex, names):
        name = case if isinstance(case, str) else None
        if name is None or rb.indexes.can_delete(probe(name)):
            out.append(case)
        else:
            reason = f"{name} declares WritableIndex without delete (delete_mode None)"
            out.append(pytest.param(name, marks=pytest.mark.skip(reason=reason)))
    return out


def names_of(cases: list[Any]) -> list[str]:
    """The backend names of the cases that run (skipped ones left out)."""
    return [c for c in cases if isinstance(c, str)]


def strategies(index: Any) -> tuple[str, ...]:
    """The filter strategies ``index`` declares (none unless it is a FilteredIndex)."""
    return index.filter_strategies if isinstance(index, rb.indexes.FilteredIndex) else ()
