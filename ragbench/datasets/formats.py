"""Readers for the dataset file formats found in the field.

Each reader returns a :class:`RawDataset`; :func:`ragbench.datasets.load`
turns it into a :class:`~ragbench.datasets.Dataset`. Every problem with a file
(bad JSON on line N, a missing key, a wrong dimension, NaN, truncation, an
empty file) raises :class:`~ragbench.errors.DatasetError` naming the file.

Formats, picked by extension or folder layout:

- ann-benchmarks HDF5 (``.hdf5``/``.h5``): ``train``, ``test``, ``neighbors``
  (``distances`` is ignored); attribute ``distance`` maps angular→cosine,
  euclidean→l2, ip/dot→ip. Texts are placeholders (``"vector 17"``,
  ``"query 17"``) because the format has none.
- texmex ``.fvecs``/``.ivecs``/``.bvecs`` (SIFT/GIST layout):
  ``<p>_base.fvecs``, ``<p>_query.fvecs``, optional ``<p>_groundtruth.ivecs``;
  metric l2. ``.bvecs`` bytes become float32.
- BEIR folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``),
  ``queries.jsonl`` (``_id``, ``text``) and ``qrels/*.tsv``, the judged answers
  (graded) that nDCG@10, MRR@10 and recall@100 are measured against (see
  :mod:`ragbench.datasets.qrels`; recall@k stays against exact search).
- ``.npy``: a corpus matrix with queries in ``<stem>_queries.npy`` or
  ``queries.npy`` next to it; placeholder texts.
- JSONL (``.jsonl``): one ``{"id", "text", "metadata"?}`` object per line for
  the corpus, with the queries in ``queries.jsonl`` (same schema) next to it.
- CSV (``.csv``, or ``corpus.csv`` in a folder): a header with ``id`` and
  ``text`` (other columns become metadata), queries in ``queries.csv``.
- a text folder: ``corpus/`` with one passage per ``.txt``/``.md`` file, and
  ``queries.txt`` (one per line), ``queries.jsonl`` or ``queries.csv``.

Any text layout takes judged answers beside its corpus: ``qrels.tsv``,
``qrels.csv``, BEIR's ``qrels/`` or ``relevant`` fields on the queries
(:mod:`ragbench.datasets.qrels`); they land in :attr:`RawDataset.qrels`.

Text files must be UTF-8 and no passage or query may be empty or only
whitespace (``drop_empty=True`` drops such rows instead); see
:mod:`ragbench.datasets.texts`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import DatasetError, MissingDependencyError
from ..files import DATA_LIMIT, open_regular
from ..validate import load_npy
from . import qrels as judged
from .texts import QUERY_FILES, Columns, collect, find_queries, read_rows, text_folder_rows

__all__ = ["RawDataset", "read_path", "read_jsonl_folder", "read_vecs"]

METRIC_NAMES = {
    "angular": "cosine",
    "cosine": "cosine",
    "euclidean": "l2",
    "l2": "l2",
    "ip": "ip",
    "dot": "ip",
    "inner_product": "ip",
}


@dataclass
class RawDataset:
    """Everything a reader found, before it becomes a Dataset."""

    name: str
    source: str
    corpus_ids: list[str]
    corpus_texts: list[str]
    corpus_metadata: list[dict[str, str]]
    query_ids: list[str]
    query_texts: list[str]
    metric: str = "ip"
    vectors: np.ndarray | None = None
    query_vectors: np.ndarray | None = None
    ground_truth: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    #: per-row JSONL fields other than id/text (attributes), None when no row has any
    corpus_fields: list[dict[str, Any]] | None = None
    #: attribute columns a reader derived itself (pydocs' module)
    corpus_attributes: dict[str, np.ndarray] = field(default_factory=dict)
    #: each query's ``filter`` field, None when no query has one
    query_filters: list[dict[str, Any] | None] | None = None
    #: judged answers, ``{query id: {corpus id: grade}}`` and their file; None without any
    qrels: judged.QrelsFound | None = None


def read_path(path: Path, *, drop_empty: bool = False, qrels: str | None = None) -> RawDataset:
    """Read a dataset file or folder, choosing the format by extension or layout.

    ``drop_empty`` drops passages and queries whose text is empty or only
    whitespace (with a note) instead of refusing the file. ``qrels`` names the
    judged answers of a text dataset (a ``.tsv``/``.csv`` file or a BEIR split,
    see :func:`ragbench.datasets.qrels.find_qrels`) instead of the ones found beside it.
    """
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    if path.is_dir():
        return _read_dir(path, drop_empty, qrels)
    if qrels is not None and path.suffix.lower() not in (".jsonl", ".csv"):
        raise DatasetError(f"{path}: qrels apply to text datasets (JSONL, CSV, a text folder)")
    suffix = path.suffix.lower()
    if suffix in (".hdf5", ".h5"):
        return read_hdf5(path)
    if suffix in (".fvecs", ".bvecs"):
        return _read_texmex_base(path)
    if suffix == ".ivecs":
        raise DatasetError(
            f"{path}: an .ivecs file holds ground truth only; load the *_base.fvecs file "
            "or the folder that holds it"
        )
    if suffix == ".npy":
        return _read_npy(path)
    if suffix in (".jsonl", ".csv"):
        if path.name.lower() in QUERY_FILES:
            raise DatasetError(f"{path}: this is a queries file; load the corpus file or folder")
        return _read_text_pair(path, path.stem, drop_empty=drop_empty, qrels=qrels)
    raise DatasetError(
        f"{path}: unknown dataset format {suffix or '(no extension)'!r}; expected .hdf5/.h5, "
        ".fvecs/.bvecs, .npy, .jsonl, .csv, or a folder with corpus.jsonl/corpus.csv + queries, "
        "a corpus/ folder of .txt/.md files + queries, or a *_base.fvecs/*_query.fvecs pair"
    )


def _read_dir(path: Path, drop_empty: bool = False, qrels: str | None = None) -> RawDataset:
    for corpus in ("corpus.jsonl", "corpus.csv"):
        if (path / corpus).is_file():
            return _read_text_pair(path / corpus, path.name, drop_empty=drop_empty, qrels=qrels)
    if (path / "corpus").is_dir():
        return _read_text_folder(path, drop_empty=drop_empty, qrels=qrels)
    if qrels is not None:
        raise DatasetError(f"{path}: qrels apply to text datasets (JSONL, CSV, a text folder)")
    for ext in ("fvecs", "bvecs"):
        bases = sorted(path.glob(f"*_base.{ext}"))
        if len(bases) == 1:
            return _read_texmex_base(bases[0], name=path.name)
        if len(bases) > 1:
            raise DatasetError(
                f"{path}: several *_base.{ext} files ({', '.join(b.name for b in bases)}); "
                "load one of them by path"
            )
    raise DatasetError(
        f"{path}: folder holds no dataset: expected corpus.jsonl + queries.jsonl (BEIR or "
        "ragbench JSONL), corpus.csv + queries.csv, a corpus/ folder of .txt/.md files + "
        "queries.txt (or .jsonl/.csv), or <prefix>_base.fvecs + <prefix>_query.fvecs (texmex)"
    )


# --------------------------------------------------------------------------- texts


def _read_text_pair(
    corpus: Path, name: str, *, drop_empty: bool = False, qrels: str | None = None
) -> RawDataset:
    """A JSONL or CSV corpus file and the queries file beside it (:mod:`ragbench.datasets.texts`)."""
    queries = find_queries(corpus.parent, corpus.suffix.lower(), corpus)
    notes: list[str] = []
    rows = read_rows(corpus)
    fields: list[dict[str, Any]] = []
    ids, texts, metadata = collect(
        rows, corpus, what="corpus", drop_empty=drop_empty, notes=notes, fields=fields
    )
    raw = _text_dataset(name, corpus, (ids, texts, metadata), queries, drop_empty, notes, qrels)
    if any(fields):
        raw.corpus_fields = fields
    return raw


def _open_data(path: Path) -> BinaryIO:
    """A dataset file opened for reading, refused (naming it) unless it is a regular file."""
    return open_regular(path, limit_bytes=DATA_LIMIT, what="dataset file")


def _read_text_folder(
    path: Path, *, drop_empty: bool = False, qrels: str | None = None
) -> RawDataset:
    """A folder whose ``corpus/`` holds one passage per text file, with queries beside it."""
    corpus = path / "corpus"
    queries = find_queries(path, ".txt", corpus)
    notes: list[str] = []
    rows = text_folder_rows(corpus, notes)
    columns = collect(rows, corpus, what="corpus", drop_empty=drop_empty, notes=notes)
    return _text_dataset(path.name, corpus, columns, queries, drop_empty, notes, qrels)


def _text_dataset(
    name: str,
    corpus: Path,
    columns: Columns,
    queries: Path,
    drop_empty: bool,
    notes: list[str],
    qrels: str | None = None,
) -> RawDataset:
    qfields: list[dict[str, Any]] = []
    qwheres: list[str] = []
    qids, qtexts, _ = collect(
        read_rows(queries),
        queries,
        what="query",
        drop_empty=drop_empty,
        notes=notes,
        fields=qfields,
        wheres=qwheres,
    )
    filters = [f.get("filter") for f in qfields]
    for f, qid in zip(filters, qids, strict=True):
        if f is not None and (not isinstance(f, dict) or not f):
            raise DatasetError(f"{queries}: query {qid!r}: filter must be a non-empty object")
    relevant = any("relevant" in f for f in qfields)
    found = judged.find_qrels(corpus.parent, relevant=relevant, choice=qrels)
    if found is not None:
        rows = judged.read_qrels(found)
        source = str(found)
    else:
        rows = judged.from_relevant_fields(qfields, qids, qwheres)
        source = f"{queries} (relevant)"
    return RawDataset(
        name=name,
        source=str(corpus),
        corpus_ids=columns[0],
        corpus_texts=columns[1],
        corpus_metadata=columns[2],
        query_ids=qids,
        query_texts=qtexts,
        notes=notes,
        query_filters=filters if any(f is not None for f in filters) else None,
        qrels=judged.check_ids(rows, columns[0], qids, source) if rows else None,
    )


def read_jsonl_folder(path: Path, *, drop_empty: bool = False) -> RawDataset:
    """A folder with ``corpus.jsonl`` and ``queries.jsonl`` (ragbench or BEIR)."""
    return _read_text_pair(path / "corpus.jsonl", path.name, drop_empty=drop_empty)


# --------------------------------------------------------------------------- vectors


def _check_finite(arr: np.ndarray, path: Path, what: str) -> None:
    if arr.size and not np.isfinite(arr).all():
        row = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise DatasetError(f"{path}: {what} row {row} holds NaN or inf")


def _placeholders(prefix: str, word: str, n: int) -> tuple[list[str], list[str]]:
    return [f"{prefix}{i}" for i in range(n)], [f"{word} {i}" for i in range(n)]


def _vector_dataset(
    name: str,
    source: str,
    vectors: np.ndarray,
    query_vectors: np.ndarray,
    metric: str,
    ground_truth: np.ndarray | None,
    path: Path,
) -> RawDataset:
    if vectors.shape[0] == 0:
        raise DatasetError(f"{path}: the corpus has no vectors")
    if query_vectors.shape[0] == 0:
        raise DatasetError(f"{path}: there are no query vectors")
    if vectors.shape[1] != query_vectors.shape[1]:
        raise DatasetError(
            f"{path}: corpus vectors have dimension {vectors.shape[1]} but queries "
            f"have {query_vectors.shape[1]}"
        )
    if ground_truth is not None:
        ground_truth = _check_ground_truth(
            ground_truth, vectors.shape[0], query_vectors.shape[0], path
        )
    ids, texts = _placeholders("v", "vector", vectors.shape[0])
    qids, qtexts = _placeholders("q", "query", query_vectors.shape[0])
    return RawDataset(
        name=name,
        source=source,
        corpus_ids=ids,
        corpus_texts=texts,
        corpus_metadata=[{} for _ in range(len(ids))],
        query_ids=qids,
        query_texts=qtexts,
        metric=metric,
        vectors=vectors,
        query_vectors=query_vectors,
        ground_truth=ground_truth,
        notes=['texts are placeholders ("vector 17"): the format ships vectors only'],
    )


def _check_ground_truth(gt: np.ndarray, n: int, nq: int, path: Path) -> np.ndarray:
    if gt.ndim != 2 or gt.dtype.kind not in "iu":
        raise DatasetError(
            f"{path}: ground truth must be a 2-D integer array, got {gt.dtype}{gt.shape}"
        )
    if gt.shape[0] != nq:
        raise DatasetError(f"{path}: ground truth has {gt.shape[0]} rows for {nq} queries")
    gt = np.ascontiguousarray(gt, dtype=np.int64)
    if gt.size and (int(gt.min()) < 0 or int(gt.max()) >= n):
        raise DatasetError(
            f"{path}: ground truth holds ids outside [0, {n}) "
            f"(min {int(gt.min())}, max {int(gt.max())})"
        )
    return gt


def read_hdf5(path: Path) -> RawDataset:
    """An ann-benchmarks HDF5 file."""
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError("h5py", "formats") from None
    with _open_data(path):
        pass  # a FIFO or a device is refused before HDF5 opens it
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path}: not a readable HDF5 file ({exc})") from None
    with fh:
        missing = [key for key in ("train", "test") if key not in fh]
        if missing:
            raise DatasetError(
                f"{path}: missing HDF5 dataset(s) {', '.join(missing)}; ann-benchmarks files "
                "hold train, test and neighbors"
            )
        raw = fh.attrs.get("distance", "angular")
        distance = raw.decode() if isinstance(raw, bytes) else str(raw)
        metric = METRIC_NAMES.get(distance.lower())
        if metric is None:
            raise DatasetError(
                f"{path}: distance {distance!r} is not supported; expected angular, "
                "euclidean or ip/dot"
            )
        arrays = {}
        for key in ("train", "test"):
            arr = np.asarray(fh[key])
            if arr.ndim != 2 or arr.dtype.kind not in "fiu":
                raise DatasetError(
                    f"{path}: {key} must be a 2-D numeric array, got {arr.dtype}{arr.shape}"
                )
            arrays[key] = np.ascontiguousarray(arr, dtype=np.float32)
            _check_finite(arrays[key], path, key)
        gt = np.asarray(fh["neighbors"]) if "neighbors" in fh else None
    return _vector_dataset(path.stem, str(path), arrays["train"], arrays["test"], metric, gt, path)


def read_vecs(path: Path) -> np.ndarray:
    """Read a texmex ``.fvecs`` (float32), ``.ivecs`` (int32) or ``.bvecs`` (uint8) file.

    Every record is a little-endian int32 dimension followed by that many
    values; every record must carry the same dimension. Returns float32
    ``(n, d)`` for fvecs/bvecs and int32 ``(n, d)`` for ivecs.
    """
    suffix = path.suffix.lower()
    item = {".fvecs": 4, ".ivecs": 4, ".bvecs": 1}.get(suffix)
    if item is None:
        raise DatasetError(f"{path}: not a .fvecs/.ivecs/.bvecs file")
    try:
        with _open_data(path) as fh:
            raw = np.fromfile(fh, dtype=np.uint8)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    if raw.size == 0:
        raise DatasetError(f"{path}: empty file")
    if raw.size < 4:
        raise DatasetError(f"{path}: truncated: {raw.size} bytes, not even one record header")
    dim = int(raw[:4].view("<i4")[0])
    if dim <= 0 or dim > 1 << 20:
        raise DatasetError(f"{path}: record 0 declares dimension {dim}; not a texmex vector file")
    record = 4 + dim * item
    if raw.size % record:
        n_full = raw.size // record
        raise DatasetError(
            f"{path}: truncated or mixed dimensions: {raw.size} bytes is not a whole number "
            f"of {record}-byte records of dimension {dim} (record {n_full} is incomplete "
            "or a record declares another dimension)"
        )
    rows = raw.reshape(-1, record)
    dims = np.ascontiguousarray(rows[:, :4]).view("<i4").ravel()
    bad = np.flatnonzero(dims != dim)
    if bad.size:
        raise DatasetError(
            f"{path}: record {int(bad[0])} declares dimension {int(dims[bad[0]])}, "
            f"record 0 declares {dim}"
        )
    body = np.ascontiguousarray(rows[:, 4:])
    if suffix == ".fvecs":
        out = body.view("<f4").astype(np.float32, copy=False)
        _check_finite(out, path, "vector")
        return out
    if suffix == ".ivecs":
        return body.view("<i4").astype(np.int32, copy=False)
    return body.astype(np.float32)


def _read_texmex_base(path: Path, name: str | None = None) -> RawDataset:
    stem = path.stem
    if not stem.endswith("_base"):
        raise DatasetError(
            f"{path}: expected the texmex layout <prefix>_base{path.suffix} with "
            f"<prefix>_query{path.suffix} (and optionally <prefix>_groundtruth.ivecs) next to it"
        )
    prefix = stem[: -len("_base")]
    query = path.with_name(f"{prefix}_query{path.suffix}")
    if not query.is_file():
        raise DatasetError(f"{path}: no queries: expected {query} next to it")
    vectors = read_vecs(path)
    query_vectors = read_vecs(query)
    gt_path = path.with_name(f"{prefix}_groundtruth.ivecs")
    gt = read_vecs(gt_path) if gt_path.is_file() else None
    return _vector_dataset(
        name or prefix or path.parent.name, str(path), vectors, query_vectors, "l2", gt, path
    )


def _read_npy(path: Path) -> RawDataset:
    if path.stem == "queries" or path.stem.endswith("_queries"):
        raise DatasetError(f"{path}: this is a queries file; load the corpus .npy next to it")
    candidates = [path.with_name(f"{path.stem}_queries.npy"), path.with_name("queries.npy")]
    query = next((c for c in candidates if c.is_file()), None)
    if query is None:
        raise DatasetError(
            f"{path}: no queries: expected {candidates[0].name} or {candidates[1].name} "
            "(a float (nq, d) matrix) next to it"
        )
    return _vector_dataset(
        path.stem, str(path), _load_matrix(path), _load_matrix(query), "ip", None, path
    )


def _load_matrix(path: Path) -> np.ndarray:
    try:
        # the header's shape is checked against the file size before anything is allocated
        arr = load_npy(path, "dataset matrix", DatasetError)
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot read .npy file ({exc})") from None
    if arr.ndim != 2 or arr.dtype.kind not in "fiu":
        raise DatasetError(f"{path}: expected a 2-D float matrix, got {arr.dtype}{arr.shape}")
    out = np.ascontiguousarray(arr, dtype=np.float32)
    _check_finite(out, path, "vector")
    return out


def is_dataset_path(value: str | os.PathLike[str]) -> bool:
    """Whether ``value`` looks like a path rather than a dataset name."""
    text = os.fspath(value)
    return os.sep in text or "/" in text or Path(text).suffix != "" or Path(text).exists()
