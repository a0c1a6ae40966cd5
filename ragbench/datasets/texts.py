"""Readers for text corpora a user brings: JSONL, CSV and a folder of text files.

Every reader yields one :class:`Row` per record with ``where`` (``file:line``
or the file itself) for messages; :func:`collect` checks ids and texts and
returns the columns. Files must be UTF-8 (a leading byte-order mark is
accepted): any other byte raises :class:`~ragbench.errors.DatasetError`
naming the file, the line, the byte offset and how to re-encode it. A passage
or query whose text is empty or only whitespace is an error naming its row,
unless the caller asked to drop such rows (``drop_empty``), which logs a
warning and adds a note saying which rows went.

Layouts:

- JSONL: one ``{"id", "text", "metadata"?}`` object per line (BEIR's ``_id``
  and ``title`` are accepted; the title becomes the text's first line).
- CSV: a header row naming ``id`` (or ``_id``) and ``text`` columns, optional
  ``title``; every other column becomes metadata. Quoted fields may span lines.
- a text folder: ``corpus/`` holding one passage per ``.txt`` or ``.md`` file
  (any depth; the id is the path inside ``corpus/``, files sorted by it).
- queries beside a corpus: ``queries.jsonl``, ``queries.csv`` (same schemas) or
  ``queries.txt`` (one query per non-blank line, ids ``q<line>``).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..files import DATA_LIMIT, open_regular, read_regular

__all__ = [
    "QUERY_FILES",
    "TEXT_SUFFIXES",
    "Columns",
    "Row",
    "collect",
    "decode_utf8",
    "find_queries",
    "read_bytes",
    "read_rows",
    "text_folder_rows",
]

log = logging.getLogger("ragbench.datasets")

_BOM = b"\xef\xbb\xbf"
#: Suffixes of the files a text folder's ``corpus/`` contributes, one passage each.
TEXT_SUFFIXES = (".txt", ".md")
#: The queries files looked for beside a corpus, in this order after the corpus's own format.
QUERY_FILES = ("queries.jsonl", "queries.csv", "queries.txt")
_NOUN = {"corpus": "passage", "query": "query"}

Columns = tuple[list[str], list[str], list[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Row:
    """One record as read: where it is (for messages), its id, text and metadata.

    ``fields``: a JSONL record's other top-level fields (not ``id``/``_id``,
    ``text``, ``title``, ``metadata``), as parsed: attributes of a passage,
    a query's ``filter``.
    """

    where: str
    doc_id: str
    text: str
    meta: dict[str, str]
    fields: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- bytes


def read_bytes(path: Path) -> bytes:
    """The whole file, or a DatasetError naming it."""
    return read_regular(path, limit_bytes=DATA_LIMIT, what="dataset file")


def _not_utf8(path: Path, exc: UnicodeDecodeError, offset: int, line: int) -> DatasetError:
    bad = exc.object[exc.start : exc.start + 1].hex()
    return DatasetError(
        f"{path}:{line}: not UTF-8: byte 0x{bad} at byte offset {offset} ({exc.reason}); "
        "ragbench reads UTF-8 only: re-encode the file, e.g. "
        f"`iconv -f latin1 -t utf-8 {path.name} > utf8-{path.name}` if it is Latin-1"
    )


def decode_utf8(
    path: Path, data: bytes, *, base: int = 0, line: int | None = None, bom: bool = True
) -> str:
    """``data`` (from byte offset ``base`` of ``path``) as text; a leading BOM is dropped.

    A byte that is not UTF-8 raises :class:`DatasetError` with its byte offset
    in the file and its line (``line``, or counted in ``data``).
    """
    skip = len(_BOM) if bom and data.startswith(_BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        where = line if line is not None else data.count(b"\n", 0, at) + 1
        raise _not_utf8(path, exc, base + at, where) from None


# --------------------------------------------------------------------------- JSONL


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import orjson

    fh = open_regular(path, limit_bytes=DATA_LIMIT, what="dataset file")
    offset = 0
    with fh:
        for lineno, line in enumerate(fh, start=1):
            base, offset = offset, offset + len(line)
            if lineno == 1 and line.startswith(_BOM):
                line, base = line[len(_BOM) :], len(_BOM)
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                decode_utf8(path, line, base=base, line=lineno, bom=False)  # names a bad byte first
                raise DatasetError(f"{path}:{lineno}: bad JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise DatasetError(
                    f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
                )
            yield lineno, obj


def _id_of(obj: dict[str, Any], where: str) -> str:
    key = "_id" if "_id" in obj else "id"
    value = obj.get(key)
    if value is None:
        raise DatasetError(f"{where}: missing key 'id' (or BEIR '_id')")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DatasetError(f"{where}: {key} must be a string, got {value!r}")
    return str(value)


def _jsonl_rows(path: Path) -> Iterator[Row]:
    for lineno, obj in _json_lines(path):
        where = f"{path}:{lineno}"
        doc_id = _id_of(obj, where)
        if "text" not in obj:
            raise DatasetError(f"{where}: missing key 'text'")
        text = obj["text"]
        if not isinstance(text, str):
            raise DatasetError(f"{where}: text must be a string, got {type(text).__name__}")
        meta: dict[str, str] = {}
        raw_meta = obj.get("metadata")
        if isinstance(raw_meta, dict):
            meta = {str(k): str(v) for k, v in raw_meta.items()}
        elif raw_meta is not None:
            raise DatasetError(f"{where}: metadata must be an object")
        title = obj.get("title")
        if isinstance(title, str) and title:
            # BEIR keeps the title apart; retrievers see it as the passage's first line.
            meta.setdefault("title", title)
            if "_id" in obj:
                text = f"{title}\n{text}"
        other = {k: v for k, v in obj.items() if k not in _OWN_FIELDS}
        yield Row(where, doc_id, text, meta, other)


_OWN_FIELDS = frozenset({"id", "_id", "text", "title", "metadata"})


# --------------------------------------------------------------------------- CSV


def _csv_rows(path: Path) -> Iterator[Row]:
    text = decode_utf8(path, read_bytes(path))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return
        names = [h.strip() for h in header]
        id_col = "_id" if "_id" in names else "id"
        missing = [c for c in (id_col, "text") if c not in names]
        if missing:
            raise DatasetError(
                f"{path}:1: the header names no {' or '.join(repr(m) for m in missing)} column "
                f"(got {', '.join(repr(n) for n in names)}); expected id,text[,title,...]"
            )
        i_id, i_text = names.index(id_col), names.index("text")
        i_title = names.index("title") if "title" in names else None
        meta_cols = [(i, n) for i, n in enumerate(names) if n not in (id_col, "text")]
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise DatasetError(f"{where}: {len(row)} fields, the header has {len(names)}")
            if not row[i_id].strip():
                raise DatasetError(f"{where}: empty {id_col}")
            body = row[i_text]
            if i_title is not None and row[i_title] and id_col == "_id":
                body = f"{row[i_title]}\n{body}"
            meta = {n: row[i] for i, n in meta_cols if row[i] != ""}
            yield Row(where, row[i_id].strip(), body, meta)
    except csv.Error as exc:
        raise DatasetError(f"{path}:{reader.line_num}: bad CSV ({exc})") from None


# --------------------------------------------------------------------------- text files


def text_folder_rows(folder: Path, notes: list[str]) -> Iterator[Row]:
    """One row per ``.txt``/``.md`` file under ``folder`` (hidden ones skipped), by path."""
    files: list[tuple[str, Path]] = []
    others: list[tuple[str, Path]] = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        (files if p.suffix.lower() in TEXT_SUFFIXES else others).append((rel.as_posix(), p))
    if not files:
        raise DatasetError(f"{folder}: no .txt or .md files (one passage per file)")
    if others:
        shown = ", ".join(sorted(r for r, _ in others)[:3])
        notes.append(
            f"{len(others)} file(s) in {folder} are not .txt/.md and were skipped: {shown}"
        )
    for name, file in sorted(files):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a file name in another encoding, kept as surrogates
            raise DatasetError(
                f"{folder}: the file name {name.encode('utf-8', 'surrogateescape')!r} is not "
                "UTF-8; rename it (e.g. `convmv -f latin1 -t utf-8 --notest`)"
            ) from None
        yield Row(str(file), name, decode_utf8(file, read_bytes(file)), {})


def _txt_query_rows(path: Path) -> Iterator[Row]:
    for lineno, line in enumerate(decode_utf8(path, read_bytes(path)).splitlines(), start=1):
        if line.strip():
            yield Row(f"{path}:{lineno}", f"q{lineno}", line.strip(), {})


# --------------------------------------------------------------------------- shared


def read_rows(path: Path) -> Iterator[Row]:
    """The rows of a ``.jsonl``, ``.csv`` or (queries only) ``.txt`` file."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv_rows(path)
    if suffix == ".txt":
        return _txt_query_rows(path)
    return _jsonl_rows(path)


def find_queries(folder: Path, own: str, corpus: Path) -> Path:
    """The queries file beside a corpus: ``queries<own>`` first, then :data:`QUERY_FILES`."""
    order = [f"queries{own}", *[q for q in QUERY_FILES if q != f"queries{own}"]]
    for name in order:
        if (folder / name).is_file():
            return folder / name
    raise DatasetError(
        f"{corpus}: no queries: expected {folder / order[0]} next to it (or "
        f"{' or '.join(order[1:])}; one id and text per record, or one query per line in .txt)"
    )


def collect(
    rows: Iterable[Row],
    path: Path,
    *,
    what: str,
    drop_empty: bool,
    notes: list[str],
    fields: list[dict[str, Any]] | None = None,
    wheres: list[str] | None = None,
) -> Columns:
    """Ids, texts and metadata of ``rows``: unique ids, no empty text (or such rows dropped).

    ``what`` is ``"corpus"`` or ``"query"``; ``path`` names the file or
    folder in messages. Dropped rows are logged and described in ``notes``.
    ``fields``, when given, gets each kept row's :attr:`Row.fields`, and
    ``wheres`` its :attr:`Row.where`.
    """
    noun = _NOUN[what]
    ids: list[str] = []
    texts: list[str] = []
    metadata: list[dict[str, str]] = []
    seen: set[str] = set()
    dropped: list[str] = []
    for row in rows:
        if row.doc_id in seen:
            raise DatasetError(f"{row.where}: duplicate id {row.doc_id!r}")
        seen.add(row.doc_id)
        if not row.text.strip():
            if not drop_empty:
                raise DatasetError(
                    f"{row.where}: empty {noun} (id {row.doc_id!r}): its text is empty or only "
                    "whitespace; fix or remove it, or drop such rows with a warning: "
                    "drop_empty=True in Python, [dataset] drop_empty = true in a config, "
                    "--set dataset.drop_empty=true on the command line"
                )
            dropped.append(row.where)
            continue
        ids.append(row.doc_id)
        texts.append(row.text)
        metadata.append(row.meta)
        if fields is not None:
            fields.append(row.fields)
        if wheres is not None:
            wheres.append(row.where)
    if dropped:
        shown = ", ".join(dropped[:5]) + (", ..." if len(dropped) > 5 else "")
        note = f"dropped {len(dropped)} empty {noun} row(s) (drop_empty): {shown}"
        log.warning("%s", note)
        notes.append(note)
    if not ids:
        left = f" left after dropping {len(dropped)} empty one(s)" if dropped else ""
        raise DatasetError(f"{path}: empty file: no {what} records{left}")
    return ids, texts, metadata
