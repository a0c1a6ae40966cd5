"""``tantivy`` backend: the Tantivy full-text engine, embedded (``tantivy`` bindings, ``ragbench[lexical]``).

The index lives in a temporary folder made at ``build`` and removed by
``close()`` (or when the index is garbage-collected). Each text is one
document: its row as an unsigned fast field ``pos`` and its words in the
field ``body``, analyzed by Tantivy's own text analyzer: the ``simple``
tokenizer (runs of letters and digits, any script), words longer than 40
bytes dropped, lower-cased, ``stopwords`` removed (a Tantivy list:
``english`` by default, or ``none``) and stemmed when ``stemmer`` names a
Tantivy stemmer language (``english``; none by default). Scoring is
Tantivy's BM25 (k1 1.2, b 0.75, fixed in the engine), over one segment
written by one writer thread (``heap_mb`` of writer memory).

A query text is analyzed by the same analyzer and searched as the OR of
its words (never parsed as Tantivy's query language, so ``AND``, quotes or
a ``:`` in a question are words, not syntax). Only texts sharing a word
with the query are hits; a query of only stop words or unknown words
returns a row of pads.

Timed parts of each search (``last_parts()``): ``tokenize`` (analyzing the
text and making the query), ``score`` (the searcher's ``search``),
``decode`` (the rows of the hits from the ``pos`` fast field, padding).

Filters: an allow-list becomes a zero-score ``Must`` clause on ``pos``
(strategy ``pre``: Tantivy scores only allowed texts). Writes:
``add(texts, ids=None)`` and ``delete(ids)`` (``delete_mode`` ``mark``)
each commit and reload the searcher, so ``ragbench stream`` runs; searches
already under way keep the searcher they started with. Saving writes the
texts (an index changed by writes cannot be saved); loading indexes them
again.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import weakref
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, IndexFileError, MissingDependencyError
from ..validate import positive_int
from ._arrays import F32, I64
from ._lexical import LexicalIndex, pads, texts_of
from ._writes_and_filters import positions_to_delete, space_after_add, space_after_delete

__all__ = ["TantivyIndex"]

_perf = time.perf_counter_ns
_STOPWORDS = (
    "danish", "dutch", "english", "finnish", "french", "german", "hungarian",
    "italian", "norwegian", "portuguese", "russian", "spanish", "swedish",
)  # fmt: skip


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError:
        raise MissingDependencyError("tantivy", "lexical") from None
    return tantivy


class TantivyIndex(LexicalIndex):
    """Tantivy's BM25 over texts, in a temporary folder; see the module docstring."""

    name: ClassVar[str] = "tantivy"
    library: ClassVar[str] = "tantivy"
    payload_format: ClassVar[str] = "ragbench.lexical-texts-json"
    #: deleted texts are deleted in Tantivy; their rows stay unused
    delete_mode: ClassVar[str | None] = "mark"
    build_defaults: ClassVar[dict[str, Any]] = {
        "stopwords": "english",
        "stemmer": None,
        "heap_mb": 64,
    }

    def __init__(
        self, dim: int | None = None, metric: str | None = "bm25", **build_params: Any
    ) -> None:
        super().__init__(dim, metric, **build_params)
        self._engine: Any = None  # (tantivy module, Index, schema, analyzer)
        self._query_calls: Any = None  # (analyze, term_query, boolean_query, schema, Should)
        self._searcher: Any = None
        self._folder: str | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None
        self._write_lock = threading.Lock()

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        if params["stopwords"] not in (*_STOPWORDS, "none"):
            raise ConfigError(
                f"{owner}: stopwords {params['stopwords']!r} is not a Tantivy list; use one of: "
                f"{', '.join(_STOPWORDS)}, or none"
            )
        if params["stemmer"] == "none":
            params["stemmer"] = None
        if params["stemmer"] is not None and params["stemmer"] not in _STOPWORDS:
            raise ConfigError(
                f"{owner}: stemmer {params['stemmer']!r} is not a Tantivy stemmer language; "
                f"use one of: {', '.join(_STOPWORDS)}, or none"
            )
        params["heap_mb"] = positive_int(owner, "heap_mb", params["heap_mb"], lo=15, hi=4096)
        return params

    def _analyzer(self, tv: Any) -> Any:
        p = self.build_params
        builder = tv.TextAnalyzerBuilder(tv.Tokenizer.simple()).filter(tv.Filter.remove_long(40))
        builder = builder.filter(tv.Filter.lowercase())
        if p["stopwords"] != "none":
            builder = builder.filter(tv.Filter.stopword(p["stopwords"]))
        if p["stemmer"] is not None:
            builder = builder.filter(tv.Filter.stemmer(p["stemmer"]))
        return builder.build()

    def _index(self, texts: list[str]) -> int:
        tv = _tantivy()
        self.close()
        folder = tempfile.mkdtemp(prefix="ragbench-tantivy-")
        self._folder = folder
        self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)
        builder = tv.SchemaBuilder()
        builder.add_unsigned_field("pos", stored=False, indexed=True, fast=True)
        builder.add_text_field("body", stored=False, tokenizer_name="ragbench", index_option="freq")
        schema = builder.build()
        index = tv.Index(schema, path=folder)
        analyzer = self._analyzer(tv)
        index.register_tokenizer("ragbench", analyzer)
        self._engine = (tv, index, schema, analyzer)
        # what a query is made of, looked up once (not per query or per word): ~50 ns each
        self._query_calls = (
            analyzer.analyze,
            tv.Query.term_query,
            tv.Query.boolean_query,
            schema,
            tv.Occur.Should,
        )
        self._write(tv, texts, 0)
        words = sum(1 for t in texts if analyzer.analyze(t))
        return words

    def _write(self, tv: Any, texts: list[str], start: int, delete: Any = ()) -> None:
        """Add ``texts`` at rows ``start...``, delete rows ``delete``, commit, reload the searcher."""
        index = self._engine[1]
        writer = index.writer(heap_size=self.build_params["heap_mb"] * 2**20, num_threads=1)
        schema = self._engine[2]
        for row in delete:
            # by query: delete_documents_by_term with a Python int deletes nothing on a u64 field
            writer.delete_documents_by_query(tv.Query.term_query(schema, "pos", int(row)))
        for i, text in enumerate(texts):
            doc = tv.Document()
            doc.add_unsigned("pos", start + i)
            doc.add_text("body", text)
            writer.add_document(doc)
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        self._searcher = index.searcher()

    def query_of(self, text: str) -> Any:
        """The Tantivy query of one text: the OR of its analyzed words, or ``None`` (no word)."""
        analyze, term, any_of, schema, should = self._query_calls
        words = analyze(text)
        if not words:
            return None
        if len(words) == 1:
            return term(schema, "body", words[0])
        return any_of([(should, term(schema, "body", w)) for w in words])

    def _allowed(self, query: Any, mask: np.ndarray) -> Any:
        tv, _, schema, _ = self._engine
        rows = np.flatnonzero(mask).tolist()
        allow = tv.Query.const_score_query(tv.Query.term_set_query(schema, "pos", rows), 0.0)
        return tv.Query.boolean_query([(tv.Occur.Must, query), (tv.Occur.Must, allow)])

    def _search_parts(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if len(texts) == 1 and masks is None:  # a request's usual search
            return self._search_one(texts[0], k)
        return self._search_each(texts, k, masks)

    def _search_one(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_search_each` of one unfiltered query whose ``k`` is checked, written straight
        through: the measured fast path of the target "``tantivy`` at most 1.05x its own
        searcher call" (docs/reference/performance-targets.md#lexical,
        ``bench/test_bench_lexical.py``). When the k hits fill the row (a request's usual
        case) the row is the hits' arrays, given their (1, k) shape in place: no list of
        per-query arrays, no running sums of the parts, no ``_arrays``/``_padded`` calls.
        ``tests/indexes/test_lexical.py`` checks, by property-based tests, that it returns
        exactly what :meth:`_search_each` returns."""
        t0 = _perf()
        query = self.query_of(text)
        t1 = _perf()
        searcher = self._searcher
        hits = [] if query is None else searcher.search(query, k, count=False).hits
        t2 = _perf()
        if len(hits) == k:  # nothing to pad: the arrays are the row
            hit_scores, addresses = zip(*hits, strict=True)
            ids = np.fromiter(searcher.fast_field_values("pos", addresses), I64, k)
            scores = np.fromiter(hit_scores, F32, k)
            ids.shape = scores.shape = (1, k)
        else:
            ids, scores = _padded([_arrays(searcher, hits)], k)
        self._local.parts = (t0, t1, t2, _perf())  # the stamps: last_parts() subtracts
        return ids, scores

    def _search_each(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each query in turn (the plain path): its hits as arrays, then one padded row each."""
        searcher = self._searcher
        found = []  # each query's hits as (rows, scores) arrays
        t_tok = t_score = t_decode = 0
        for row, text in enumerate(texts):
            t0 = _perf()
            query = self.query_of(text)
            if query is not None and masks is not None:
                query = self._allowed(query, masks[row])
            t1 = _perf()
            hits = [] if query is None else searcher.search(query, k, count=False).hits
            t2 = _perf()
            found.append(_arrays(searcher, hits))
            t3 = _perf()
            t_tok, t_score, t_decode = t_tok + t1 - t0, t_score + t2 - t1, t_decode + t3 - t2
        t4 = _perf()
        ids, scores = _padded(found, k)
        t_decode += _perf() - t4
        self._keep_parts(0, t_tok, t_tok + t_score, t_tok + t_score + t_decode)
        return ids, scores

    # -- writes --------------------------------------------------------------------

    def add(self, data: Any, ids: Any = None) -> np.ndarray:
        """Index more texts; returns their ids (int64 ``(m,)``), the next ids unless ``ids`` given."""
        if self._space is None or self._engine is None:
            raise self._not_built()
        texts = texts_of(data, "texts")
        with self._write_lock:
            space, new_ids = space_after_add(self._space, len(texts), ids)
            self._write(self._engine[0], texts, self._space.n_pos)
            self._space, self._n, self._written = space, space.live, True
        return new_ids

    def delete(self, ids: Any) -> None:
        """Delete the texts with these ids (each must be in the index); never returned again."""
        if self._space is None or self._engine is None:
            raise self._not_built()
        with self._write_lock:
            pos = positions_to_delete(self._space, ids)
            self._write(self._engine[0], [], 0, delete=pos.tolist())
            space = space_after_delete(self._space, pos, "mark")
            self._space, self._n, self._written = space, space.live, True

    # -- resources -----------------------------------------------------------------

    def close(self) -> None:
        """Drop the engine and remove its temporary folder (a later ``build`` makes a new one);
        a search until then is refused as on an index never built."""
        self._engine = self._searcher = self._query_calls = self._space = None
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None

    def memory_bytes(self) -> int:
        """Bytes of the index folder (Tantivy memory-maps its files)."""
        if self._folder is None or self._engine is None:
            raise self._not_built()
        from pathlib import Path

        return sum(f.stat().st_size for f in Path(self._folder).rglob("*") if f.is_file())

    def extra_info(self) -> dict[str, Any]:
        return {"scoring": "tantivy BM25 (k1 1.2, b 0.75)"}

    def _attach(self, payload: memoryview, header: dict[str, Any]) -> None:
        if self._engine is not None:
            raise IndexFileError(f"{self.name}: restore into a built index")
        super()._attach(payload, header)


def _arrays(searcher: Any, hits: list[tuple[float, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The hits' rows (the ``pos`` fast field) and scores, int64 and float32, best first.

    One zip splits the (score, address) pairs in C (no per-hit indexing in Python); fromiter
    with a count is the cheapest way from Python numbers to an array (timeit, 100 hits: ~2.3 us
    each, ~3 us with np.array of a list).
    """
    n = len(hits)
    if n == 0:
        return np.empty(0, dtype=I64), np.empty(0, dtype=F32)
    hit_scores, addresses = zip(*hits, strict=True)
    rows = np.fromiter(searcher.fast_field_values("pos", addresses), I64, n)
    return rows, np.fromiter(hit_scores, F32, n)


def _padded(found: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """One row per query: its hits, then ``-1`` / ``-inf``. A single query with ``k`` hits (a
    request's usual case) is its own arrays, reshaped: nothing to pad, nothing copied."""
    if len(found) == 1 and found[0][0].size == k:
        return found[0][0].reshape(1, k), found[0][1].reshape(1, k)
    ids, scores = pads(len(found), k)
    for row, (rows, hit_scores) in enumerate(found):
        ids[row, : rows.size] = rows
        scores[row, : hit_scores.size] = hit_scores
    return ids, scores
