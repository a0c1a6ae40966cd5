"""Judged answers (qrels) read beside a text corpus: which passages answer which query, and how well.

Sources, looked for beside the corpus file (or a text folder's ``corpus/``):

- BEIR's ``qrels/`` folder: ``test.tsv`` when it is there, else its only
  ``.tsv`` file (several and no ``test.tsv``: name one with the dataset's
  ``qrels`` parameter);
- ``qrels.tsv`` (as pydocs ships it) or ``qrels.csv`` beside the corpus;
- a ``relevant`` field on the queries in ``queries.jsonl``:
  ``["doc-id", ...]`` (grade 1 each) or ``{"doc-id": grade, ...}``;
- the ``qrels`` parameter of a dataset loaded from a path (a ``.tsv`` or
  ``.csv`` file, or a BEIR split name such as ``dev``), which overrides the rest.

TSV: BEIR's ``query-id<TAB>corpus-id<TAB>score`` with a header line (a first
line whose score is not an integer is read as the header), or TREC's
``query-id 0 corpus-id grade`` (four fields split on white space). CSV: a
header naming the query column (``query-id``, ``query_id``, ``qid``), the
passage column (``corpus-id``, ``corpus_id``, ``doc-id``, ``doc_id``,
``docid``) and optionally the grade (``score``, ``grade``, ``relevance``;
without it every line is grade 1).

Each problem is a :class:`~ragbench.errors.DatasetError` naming the file and
line: a grade that is not an integer or is negative, a query or passage id
that is not in the dataset, the same (query, passage) judged twice with
different grades, a byte that is not UTF-8. The same pair judged twice with
the same grade is read once. Two sources at once (a ``qrels/`` folder and a
``relevant`` field, say) are refused rather than merged.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from .texts import decode_utf8, read_bytes

__all__ = [
    "Judgment",
    "QrelsFound",
    "check_ids",
    "find_qrels",
    "from_relevant_fields",
    "read_qrels",
]

_QUERY_COLS = ("query-id", "query_id", "qid")
_DOC_COLS = ("corpus-id", "corpus_id", "doc-id", "doc_id", "docid")
_GRADE_COLS = ("score", "grade", "relevance")


@dataclass(frozen=True, slots=True)
class Judgment:
    """One judged (query, passage) pair and where it was written (``file:line``)."""

    where: str
    query_id: str
    doc_id: str
    grade: int


@dataclass(frozen=True, slots=True)
class QrelsFound:
    """The judgments of a dataset: ``qrels[query_id][doc_id] = grade`` and where they came from."""

    qrels: dict[str, dict[str, int]]
    source: str


def _grade(text: Any, where: str) -> int:
    """An integer grade >= 0 (``"2"``, ``2``, ``"1.0"``), else a DatasetError naming ``where``."""
    value: Any = text
    if isinstance(text, str):
        try:
            value = float(text.strip()) if "." in text else int(text.strip())
        except ValueError:
            raise DatasetError(f"{where}: grade {text!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise DatasetError(f"{where}: grade {text!r} is not an integer")
    if value < 0:
        raise DatasetError(
            f"{where}: negative grade {int(value)}: grades are 0 (not relevant), 1, 2, ... "
            "(remove the line, or use 0)"
        )
    return int(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _tsv_judgments(path: Path) -> Iterable[Judgment]:
    text = decode_utf8(path, read_bytes(path))
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [p.strip() for p in parts]
        if len(parts) == 4:  # TREC: query-id iteration corpus-id grade
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise DatasetError(
                f"{where}: {len(parts)} fields; expected query-id<TAB>corpus-id<TAB>score "
                "(BEIR) or query-id 0 corpus-id grade (TREC)"
            )
        if lineno == 1 and not _is_number(parts[2]):
            continue  # the header (BEIR: query-id corpus-id score)
        if not parts[0] or not parts[1]:
            raise DatasetError(f"{where}: empty query or corpus id")
        yield Judgment(where, parts[0], parts[1], _grade(parts[2], where))


def _column(names: Sequence[str], choices: Sequence[str]) -> int | None:
    for c in choices:
        if c in names:
            return names.index(c)
    return None


def _csv_judgments(path: Path) -> Iterable[Judgment]:
    reader = csv.reader(io.StringIO(decode_utf8(path, read_bytes(path)), newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return
        names = [h.strip().lower() for h in header]
        q, d, g = (
            _column(names, _QUERY_COLS),
            _column(names, _DOC_COLS),
            _column(names, _GRADE_COLS),
        )
        if q is None or d is None:
            raise DatasetError(
                f"{path}:1: the header names no query column ({', '.join(_QUERY_COLS)}) or no "
                f"passage column ({', '.join(_DOC_COLS)}); got {', '.join(names)}"
            )
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise DatasetError(f"{where}: {len(row)} fields, the header has {len(names)}")
            if not row[q].strip() or not row[d].strip():
                raise DatasetError(f"{where}: empty query or corpus id")
            grade = 1 if g is None else _grade(row[g], where)
            yield Judgment(where, row[q].strip(), row[d].strip(), grade)
    except csv.Error as exc:
        raise DatasetError(f"{path}:{reader.line_num}: bad CSV ({exc})") from None


def read_qrels(path: Path) -> list[Judgment]:
    """The judgments of a ``.tsv`` (BEIR or TREC) or ``.csv`` qrels file, in file order."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such qrels file")
    reader = _csv_judgments if path.suffix.lower() == ".csv" else _tsv_judgments
    found = list(reader(path))
    if not found:
        raise DatasetError(f"{path}: empty qrels file: no judgments")
    return found


def from_relevant_fields(
    fields: Sequence[dict[str, Any]], query_ids: Sequence[str], wheres: Sequence[str]
) -> list[Judgment]:
    """Judgments from the queries' ``relevant`` fields (``[ids]`` or ``{id: grade}``)."""
    out: list[Judgment] = []
    for f, qid, where in zip(fields, query_ids, wheres, strict=True):
        rel = f.get("relevant")
        if rel is None:
            continue
        if isinstance(rel, list):
            pairs: list[tuple[Any, Any]] = [(d, 1) for d in rel]
        elif isinstance(rel, dict):
            pairs = list(rel.items())
        else:
            raise DatasetError(
                f"{where}: relevant must be a list of passage ids or an object "
                f'{{"id": grade}}, got {type(rel).__name__}'
            )
        for doc, grade in pairs:
            if isinstance(doc, bool) or not isinstance(doc, (str, int)) or str(doc) == "":
                raise DatasetError(f"{where}: relevant holds {doc!r}, not a passage id")
            out.append(Judgment(where, qid, str(doc), _grade(grade, where)))
    return out


def find_qrels(folder: Path, *, relevant: bool, choice: str | None = None) -> Path | None:
    """The qrels file beside a corpus in ``folder`` (None: none, or only ``relevant`` fields).

    ``relevant``: whether the queries carry ``relevant`` fields (then no file
    may be there too); ``choice``: the dataset's ``qrels`` parameter.
    """
    if choice is not None:
        given = Path(choice).expanduser()
        if given.suffix.lower() in (".tsv", ".csv"):
            return given if given.is_absolute() or given.exists() else folder / given
        split = folder / "qrels" / f"{choice}.tsv"
        if not split.is_file():
            raise DatasetError(f"{split}: no such qrels split (qrels={choice!r})")
        return split
    files = [folder / n for n in ("qrels.tsv", "qrels.csv") if (folder / n).is_file()]
    beir = folder / "qrels"
    if beir.is_dir():
        tsvs = sorted(beir.glob("*.tsv"))
        if (beir / "test.tsv").is_file():
            files.append(beir / "test.tsv")
        elif len(tsvs) == 1:
            files.append(tsvs[0])
        elif tsvs:
            raise DatasetError(
                f"{beir}: several qrels files ({', '.join(t.name for t in tsvs)}) and no test.tsv: "
                'choose one with the dataset\'s qrels parameter (qrels = "dev" in [dataset], '
                "--set dataset.qrels=dev)"
            )
    sources = [str(f) for f in files] + (["the queries' relevant fields"] if relevant else [])
    if len(sources) > 1:
        raise DatasetError(
            f"{folder}: judged answers in {' and in '.join(sources)}: keep one source "
            "(they are not merged)"
        )
    return files[0] if files else None


def check_ids(
    judgments: Sequence[Judgment], corpus_ids: Sequence[str], query_ids: Sequence[str], source: str
) -> QrelsFound:
    """``qrels[query][doc] = grade``: every id known, each pair judged once (or alike)."""
    docs, queries = set(corpus_ids), set(query_ids)
    out: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], str] = {}
    for j in judgments:
        if j.query_id not in queries:
            raise DatasetError(f"{j.where}: query id {j.query_id!r} is not in the queries")
        if j.doc_id not in docs:
            raise DatasetError(f"{j.where}: corpus id {j.doc_id!r} is not in the corpus")
        grades = out.setdefault(j.query_id, {})
        before = grades.get(j.doc_id)
        if before is not None and before != j.grade:
            raise DatasetError(
                f"{j.where}: ({j.query_id!r}, {j.doc_id!r}) judged {j.grade} here and {before} at "
                f"{first[(j.query_id, j.doc_id)]}: keep one grade"
            )
        first.setdefault((j.query_id, j.doc_id), j.where)
        grades[j.doc_id] = j.grade
    return QrelsFound(out, source)
