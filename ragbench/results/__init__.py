"""Results: the records a driver writes, their schema, and what is made of them.

Everything here reads records (dicts, one JSON value a line in a results file),
never a live pipeline or index, so a saved file renders, reads and diffs
exactly like the run that wrote it. By concern:

- :mod:`~ragbench.results.records`: record kinds, the environment stamp, JSON-lines
  files (:class:`~ragbench.results.records.RecordWriter`,
  :func:`~ragbench.results.records.read_records`, ...);
- :mod:`~ragbench.results.schema`: each kind's typed schema (msgspec Structs), the
  checks a record passes when it is written or read;
- :mod:`~ragbench.results.report`: :class:`Report`, one pipeline run's samples;
- :mod:`~ragbench.results.tables`: tables in ``table``/``md``/``csv``/``json`` from
  records (:func:`~ragbench.results.tables.render`);
- :mod:`~ragbench.results.reading`: what the numbers mean, in a few sentences
  (:func:`~ragbench.results.reading.reading`);
- :mod:`~ragbench.results.plots`: every chart of records (matplotlib, loaded when one is drawn);
- :mod:`~ragbench.results.rebuilds`: a point measured on several builds of one index, merged
  into one record (``--rebuilds N``);
- :mod:`~ragbench.results.frontier`: the cheapest configuration at a given nDCG@10, read from
  run records (``ragbench frontier``).

Until issue 30 these were top-level modules (``ragbench.records``, ``record_schema``,
``report``, ``rendering``, ``reading``, ``plots``, ``rebuilds``, ``frontier``); the old
names still import, with a DeprecationWarning, for one release
(:data:`ragbench._deprecated.MOVED`).

The names below load their module on first use, so importing this package
costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .records import RecordWriter, append_record, iter_records, read_records
    from .report import Report
    from .tables import render

__all__ = ["RecordWriter", "Report", "append_record", "iter_records", "read_records", "render"]

_LAZY = {
    "RecordWriter": "records",
    "append_record": "records",
    "iter_records": "records",
    "read_records": "records",
    "Report": "report",
    "render": "tables",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
