"""Rebuild ``corpus.jsonl`` of the bundled ``pydocs`` dataset.

The corpus is made only of documentation that ships with CPython itself:

1. ``pydoc_data.topics``: the language-reference topic texts that ``help()``
   shows (statements, expressions, data model, ...);
2. docstrings of the built-in functions and types (``builtins``: already
   loaded in every interpreter, read through ``__doc__``);
3. docstrings of stdlib modules, classes and functions read with ``ast`` from
   the installed ``Lib/`` sources; no stdlib module is imported.

Texts are split on paragraph boundaries into passages of about 300-1000
characters, whitespace-normalised, deduplicated, and near-empty passages are
dropped. The output depends only on the Python installation that runs this
script, so the result is reproducible for a given CPython version (recorded in
``meta.json``)::

    python datasets/pydocs/build.py            # rewrites corpus.jsonl and meta.json

``queries.jsonl`` is hand-written and is not touched by this script.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import json
import platform
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIN_CHARS = 200  # passages shorter than this say too little to be retrieved on their own
TARGET_CHARS = 600  # paragraphs are packed up to about this size ...
MAX_CHARS = 1000  # ... and never beyond this one
MIN_DOCSTRING = 120  # shorter docstrings are one-liners ("Return self==value.")

# Stdlib packages left out: test suites, GUI demos, deprecated trees and
# generated tables whose docstrings are not documentation a developer reads.
SKIP_TOP = {
    "test",
    "idlelib",
    "turtledemo",
    "lib2to3",
    "ensurepip",
    "site-packages",
    "__phello__",
    "distutils",
    "encodings",
    "pydoc_data",
    "tkinter",
    "config-3.11-x86_64-linux-gnu",
    "lib-dynload",
    "__pycache__",
    "this.py",
    "antigravity.py",
    "sre_compile.py",
    "sre_constants.py",
    "sre_parse.py",
}
# Private modules that hold the pure-Python twin, and so the docstrings, of a
# public C module (decimal, io, collections.abc).
PRIVATE_OK = {"_pydecimal": "decimal", "_pyio": "io", "_collections_abc": "collections.abc"}
SKIP_PARTS = {"tests", "test", "__pycache__", "idle_test"}

BUILTIN_TYPES = [
    str,
    bytes,
    bytearray,
    list,
    tuple,
    dict,
    set,
    frozenset,
    int,
    float,
    complex,
    bool,
    range,
    slice,
    memoryview,
    object,
    type,
    property,
    staticmethod,
    classmethod,
    enumerate,
    zip,
    map,
    filter,
    reversed,
    super,
]


def normalise(text: str) -> str:
    """Strip trailing spaces and collapse runs of blank lines (keeps indentation)."""
    lines = [line.rstrip() for line in inspect.cleandoc(text).splitlines()]
    out = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", out).strip()


def split_long(paragraph: str) -> list[str]:
    """Cut a paragraph longer than MAX_CHARS at line, then sentence, then space boundaries."""
    if len(paragraph) <= MAX_CHARS:
        return [paragraph]
    units = paragraph.split("\n")
    if len(units) == 1:
        units = re.split(r"(?<=[.;:])\s+", paragraph)
    if len(units) == 1:
        words = paragraph.split(" ")
        units, cur = [], ""
        for w in words:
            if cur and len(cur) + 1 + len(w) > TARGET_CHARS:
                units.append(cur)
                cur = w
            else:
                cur = f"{cur} {w}" if cur else w
        units.append(cur)
        return [u[:MAX_CHARS] for u in units]
    joiner = "\n" if "\n" in paragraph else " "
    parts: list[str] = []
    cur = ""
    for unit in units:
        for piece in split_long(unit) if len(unit) > MAX_CHARS else [unit]:
            if cur and len(cur) + 1 + len(piece) > TARGET_CHARS:
                parts.append(cur)
                cur = piece
            else:
                cur = f"{cur}{joiner}{piece}" if cur else piece
    if cur:
        parts.append(cur)
    return parts


def chunk(title: str, text: str) -> Iterator[str]:
    """Pack the paragraphs of ``text`` into passages that each start with ``title``."""
    paragraphs: list[str] = []
    for para in normalise(text).split("\n\n"):
        if para.strip():
            paragraphs.extend(split_long(para))
    budget = MAX_CHARS - len(title) - 1
    cur = ""
    for para in paragraphs:
        if cur and len(cur) + 2 + len(para) > min(TARGET_CHARS, budget):
            yield f"{title}\n{cur}"
            cur = para[:budget]
        else:
            cur = f"{cur}\n\n{para}"[:budget] if cur else para[:budget]
    if cur:
        # A short tail is still worth keeping when it is a whole short document.
        yield f"{title}\n{cur}"


def topic_docs() -> Iterator[tuple[str, str, str]]:
    """(source, title, text) for every pydoc topic."""
    from pydoc_data.topics import topics

    for key in sorted(topics):
        text = topics[key]
        heading = text.strip().splitlines()[0].strip() if text.strip() else key
        yield f"pydoc_data.topics:{key}", heading, text


def builtin_docs() -> Iterator[tuple[str, str, str]]:
    """Docstrings of built-in functions, and of built-in types with their methods."""
    for name in sorted(dir(builtins)):
        obj = getattr(builtins, name)
        if name.startswith("_") or isinstance(obj, type):
            continue
        doc = getattr(obj, "__doc__", None)
        if callable(obj) and doc and len(doc) >= 80:
            yield f"builtins.{name}", f"builtins.{name}", doc
    for cls in BUILTIN_TYPES:
        pieces = [cls.__doc__ or ""]
        for attr in sorted(vars(cls)):
            if attr.startswith("_"):
                continue
            doc = getattr(vars(cls)[attr], "__doc__", None)
            if doc and not doc.startswith(f"{type(vars(cls)[attr]).__name__}("):
                pieces.append(f"{cls.__name__}.{attr}: {normalise(doc)}")
        yield f"builtins.{cls.__name__}", f"built-in type {cls.__name__}", "\n\n".join(pieces)


def stdlib_files(lib: Path) -> list[Path]:
    files = []
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib)
        if rel.parts[0] in SKIP_TOP or SKIP_PARTS & set(rel.parts[:-1]):
            continue
        if rel.name.startswith("test_"):
            continue
        files.append(path)
    return files


def module_name(lib: Path, path: Path) -> str:
    rel = path.relative_to(lib).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        return f"({ast.unparse(node.args)})"
    except (ValueError, TypeError):  # pragma: no cover - ast.unparse handles every args node
        return "(...)"


def stdlib_docs(lib: Path) -> Iterator[tuple[str, str, str]]:
    """Docstrings of public modules, classes, functions and methods, read with ``ast``."""
    for path in stdlib_files(lib):
        modname = module_name(lib, path)
        modname = PRIVATE_OK.get(modname, modname)
        if any(part.startswith("_") for part in modname.split(".")):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        src = f"Lib/{path.relative_to(lib).as_posix()}"
        doc = ast.get_docstring(tree)
        if doc and len(doc) >= MIN_DOCSTRING:
            yield src, f"module {modname}", doc
        yield from _walk(tree.body, modname, src)


def _walk(body: list[ast.stmt], prefix: str, src: str) -> Iterator[tuple[str, str, str]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_"):
                continue
            qual = f"{prefix}.{node.name}"
            doc = ast.get_docstring(node)
            if isinstance(node, ast.ClassDef):
                if doc and len(doc) >= MIN_DOCSTRING:
                    yield src, f"class {qual}", doc
                yield from _walk(node.body, qual, src)
            elif doc and len(doc) >= MIN_DOCSTRING:
                yield src, f"{qual}{signature(node)}", doc


def build() -> tuple[list[dict[str, object]], dict[str, object]]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    docs = list(topic_docs()) + list(builtin_docs()) + list(stdlib_docs(lib))
    seen: set[str] = set()
    records: list[dict[str, object]] = []
    per_source = {"pydoc_data.topics": 0, "builtins": 0, "stdlib docstrings": 0}
    for source, title, text in docs:
        for passage in chunk(title, text):
            body = passage.split("\n", 1)[1] if "\n" in passage else passage
            if len(passage) < MIN_CHARS or len(body.split()) < 20:
                continue
            key = re.sub(r"\s+", " ", body).strip().lower()
            if key in seen:
                continue
            seen.add(key)
            records.append(
                {
                    "id": f"pd{len(records):05d}",
                    "text": passage,
                    "metadata": {"source": source, "title": title},
                }
            )
            kind = (
                "pydoc_data.topics"
                if source.startswith("pydoc_data")
                else "builtins"
                if source.startswith("builtins")
                else "stdlib docstrings"
            )
            per_source[kind] += 1
    lengths = sorted(len(str(r["text"])) for r in records)
    meta: dict[str, object] = {
        "name": "pydocs",
        "description": "Python documentation passages (language reference topics, "
        "built-in and stdlib docstrings) with hand-written developer questions",
        "source": "CPython's own documentation: pydoc_data.topics, builtins docstrings, "
        "stdlib Lib/ docstrings (via ast)",
        "licence": "PSF License Agreement (Python documentation and docstrings)",
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "n_corpus": len(records),
        "corpus_by_source": per_source,
        "corpus_chars": sum(lengths),
        "median_chars": lengths[len(lengths) // 2] if lengths else 0,
    }
    return records, meta


def main() -> int:
    records, meta = build()
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in records]
    corpus_bytes = ("\n".join(lines) + "\n").encode("utf-8")
    (HERE / "corpus.jsonl").write_bytes(corpus_bytes)
    queries = (HERE / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    meta["n_queries"] = sum(1 for q in queries if q.strip())
    meta["corpus_sha256"] = hashlib.sha256(corpus_bytes).hexdigest()
    (HERE / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(
        f"wrote {len(records)} passages ({meta['corpus_chars']} chars) from Python "
        f"{meta['python_version']} to {HERE / 'corpus.jsonl'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
