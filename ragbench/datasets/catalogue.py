"""The catalogue: bundled datasets, ``synthetic``, datasets loaded from paths before, and loading.

``load(name_or_path, **params)`` finds a dataset by name (bundled, ``"synthetic"``,
or remembered from an earlier path) or reads a path in one of the field
formats (:mod:`ragbench.datasets.formats`); :func:`from_table` does the same
for a ``[dataset]`` config table.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import attributes
from .._registry import check_params
from ..errors import ConfigError, DatasetError, RagbenchError
from ..files import SIDECAR_LIMIT, open_regular, read_regular
from ..validate import bool_param, json_loads
from . import formats
from .cache import cache_dir
from .dataset import Corpus, Dataset, Queries
from .synthetic_data import SYNTHETIC_DEFAULTS, synthetic

__all__ = ["datasets_dir", "describe", "from_table", "load", "names", "spec_table"]

log = logging.getLogger("ragbench.datasets")

_KNOWN_FILE = "known_datasets.json"


def datasets_dir() -> Path:
    """Where bundled datasets live: ``$RAGBENCH_DATASETS_DIR`` or the repository's ``datasets/``."""
    env = os.environ.get("RAGBENCH_DATASETS_DIR")
    if env:
        return Path(env).expanduser()
    source_tree = Path(__file__).resolve().parents[2] / "datasets"
    if source_tree.is_dir():
        return source_tree
    # a wheel install carries the bundled corpora as data files under <prefix>/share
    import sys

    return Path(sys.prefix) / "share" / "ragbench" / "datasets"


def _bundled() -> dict[str, Path]:
    root = datasets_dir()
    if not root.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(root.iterdir())
        if p.is_dir() and (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file()
    }


def _known_path() -> Path:
    return cache_dir() / _KNOWN_FILE


def _read_known() -> dict[str, dict[str, Any]]:
    """The datasets loaded from paths before; {} without a file.

    A file that exists but cannot be read as one JSON table (a FIFO,
    damaged or too deeply nested JSON) raises :class:`DatasetError`.
    """
    path = _known_path()
    fix = f"delete {path} (it only lists datasets loaded from paths before)"
    try:
        with open_regular(
            path, limit_bytes=SIDECAR_LIMIT, what="dataset list", error=DatasetError, os_errors=True
        ) as fh:
            data = json_loads(fh.read(), str(path), DatasetError)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror}); {fix}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text; {fix}") from None
    except DatasetError as exc:
        raise DatasetError(f"{exc}; {fix}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: not a JSON object of dataset entries; {fix}")
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise DatasetError(
                f'{path}: entry {name!r} is not an object with a "path" string '
                f"(got {json.dumps(entry)[:80]}); {fix}"
            )
    return data


def _remember(ds: Dataset, path: Path) -> None:
    """Record a dataset loaded from a path so ``names()`` lists it and ``load(name)`` finds it."""
    known = _read_known()
    entry = {"path": str(path), "n": len(ds.corpus), "n_queries": len(ds.queries)}
    if known.get(ds.name) == entry:
        return
    known[ds.name] = entry
    target = _known_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        log.warning("could not record dataset %s in %s: %s", ds.name, target, exc)


def names() -> list[str]:
    """Bundled dataset names, ``"synthetic"``, then datasets loaded from paths before."""
    out = list(_bundled()) + ["synthetic"]
    for name, entry in sorted(_read_known().items()):
        if name not in out and isinstance(entry, dict) and Path(str(entry.get("path"))).exists():
            out.append(name)
    return out


def describe() -> list[dict[str, Any]]:
    """One dict per bundled dataset: ``name``, ``size``, ``source``, ``description`` (+ extras)."""
    out: list[dict[str, Any]] = []
    for name, path in _bundled().items():
        info: dict[str, Any] = {"name": name, "path": str(path)}
        try:
            raw = read_regular(path / "meta.json", limit_bytes=SIDECAR_LIMIT, what="meta.json")
            meta = json.loads(raw.decode("utf-8"))
        except (RagbenchError, OSError, ValueError, RecursionError):
            meta = {}
        n_corpus = meta.get("n_corpus")
        n_queries = meta.get("n_queries")
        info["size"] = (
            f"{n_corpus} passages, {n_queries} queries" if n_corpus else "see corpus.jsonl"
        )
        info["source"] = meta.get("source", str(path))
        info["description"] = meta.get("description", "")
        for extra in ("licence", "python_version", "corpus_chars"):
            if extra in meta:
                info[extra] = meta[extra]
        out.append(info)
    d = SYNTHETIC_DEFAULTS
    out.append(
        {
            "name": "synthetic",
            "path": "",
            "size": f"parametric (default n={d['n']}, dim={d['dim']}, n_queries={d['n_queries']})",
            "source": "generated by ragbench from a seed",
            "description": "L2-normalized float32 vectors modelled on sentence embeddings "
            "(power-law topics, documents, low-rank passages; calibrated on pydocs-MiniLM) "
            "and topic-vocabulary texts; ships its own vectors",
        }
    )
    return out


def load(name_or_path: str | os.PathLike[str], **params: Any) -> Dataset:
    """Load a dataset by name or path.

    Names: ``"pydocs"`` (bundled, no parameters), ``"synthetic"`` (``n``,
    ``dim``, ``n_queries``, ``seed``), or a dataset loaded from a path earlier.
    Paths: see the module docstring; they accept ``metric`` to override what
    the file says, and ``drop_empty=True`` to drop passages and queries whose
    text is empty or only whitespace (logged, and listed in :attr:`Dataset.notes`)
    instead of raising :class:`DatasetError` naming the first one, and ``qrels``
    to name the judged answers (a ``.tsv``/``.csv`` file or a BEIR split such as
    ``"dev"``) instead of those found beside the corpus (:mod:`ragbench.datasets.qrels`). Unknown names raise :class:`DatasetError` listing the known
    ones; unknown parameters raise :class:`ConfigError` naming them.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise DatasetError(f"dataset must be a name or a path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if text == "synthetic":
        check_params("dataset 'synthetic'", params, set(SYNTHETIC_DEFAULTS))
        return synthetic(**{**SYNTHETIC_DEFAULTS, **params})
    bundled = _bundled()
    if text in bundled:
        check_params(f"dataset {text!r}", params, set())
        raw = formats.read_jsonl_folder(bundled[text])
        if text == "pydocs" and raw.corpus_fields is None:
            raw.corpus_attributes = {"category": attributes.pydocs_categories(raw.corpus_metadata)}
        ds = _from_raw(raw, source=f"bundled: {bundled[text]}")
        ds.shipped_dir = bundled[text]
        return ds
    known = _read_known()
    if text in known and not formats.is_dataset_path(text):
        return _load_path(Path(str(known[text].get("path"))), params)
    if formats.is_dataset_path(text):
        return _load_path(Path(text).expanduser(), params)
    raise DatasetError(
        f"unknown dataset {text!r}; known: {', '.join(names())}; or pass a path to an .hdf5, "
        ".fvecs/.bvecs, .npy or .jsonl file or a BEIR/texmex folder"
    )


def _load_path(path: Path, params: dict[str, Any]) -> Dataset:
    check_params(f"dataset {str(path)!r}", params, {"metric", "drop_empty", "qrels"})
    drop_empty = bool_param(f"dataset {str(path)!r}", "drop_empty", params.get("drop_empty", False))
    qrels = params.get("qrels")
    if qrels is not None and not isinstance(qrels, str):
        raise ConfigError(f"dataset qrels must be a file path or a BEIR split name, got {qrels!r}")
    raw = formats.read_path(path, drop_empty=drop_empty, qrels=qrels)
    if "metric" in params:
        metric = params["metric"]
        if metric not in formats.METRIC_NAMES:
            raise ConfigError(
                f"metric must be one of ip, cosine, l2 (or angular/euclidean/dot), got {metric!r}"
            )
        chosen = formats.METRIC_NAMES[metric]
        if chosen != raw.metric and raw.ground_truth is not None:
            # Shipped neighbours were ranked under the file's metric, not this one.
            raw.ground_truth = None
            raw.notes.append(f"shipped ground truth dropped: metric overridden to {chosen}")
        raw.metric = chosen
    ds = _from_raw(raw, source=str(path))
    _remember(ds, path.resolve())
    return ds


def _from_raw(raw: formats.RawDataset, source: str) -> Dataset:
    return Dataset(
        raw.name,
        Corpus(raw.corpus_ids, raw.corpus_texts, raw.corpus_metadata, _raw_attributes(raw)),
        Queries(raw.query_ids, raw.query_texts, raw.query_filters),
        metric=raw.metric,
        vectors=raw.vectors,
        query_vectors_precomputed=raw.query_vectors,
        ground_truth=raw.ground_truth,
        source=source,
        notes=raw.notes,
        qrels=None if raw.qrels is None else raw.qrels.qrels,
        qrels_source="" if raw.qrels is None else raw.qrels.source,
    )


def _raw_attributes(raw: formats.RawDataset) -> dict[str, np.ndarray]:
    out = dict(raw.corpus_attributes)
    if raw.corpus_fields is not None:
        out.update(attributes.from_fields(raw.corpus_fields))
    return out


def spec_table(spec: str, **params: Any) -> dict[str, Any]:
    """The ``[dataset]`` config table for a name or path given on a command line.

    ``spec`` is a path when it looks like one (a separator, a suffix, or an
    existing file), else a dataset name; ``params`` that are not ``None``
    (``n``, ``dim``, ``n_queries``, ``seed``, ``metric``) are added.
    """
    table: dict[str, Any] = {"path" if formats.is_dataset_path(spec) else "name": spec}
    table.update({k: v for k, v in params.items() if v is not None})
    return table


def from_table(table: Mapping[str, Any]) -> Dataset:
    """Load the dataset a ``[dataset]`` config table describes (``name`` or ``path``, plus parameters)."""
    params = dict(table)
    if "path" in params:
        params.pop("name", None)
        return load(params.pop("path"), **params)
    if "name" not in params:
        raise ConfigError("[dataset] needs a name (pydocs, synthetic, ...) or a path")
    return load(params.pop("name"), **params)
