"""``bm25`` backend: BM25 in process with the ``bm25s`` package (``ragbench[lexical]``).

Tokenizing is bm25s's own :class:`bm25s.tokenization.Tokenizer`: lower-cased,
words of two or more word characters (``(?u)\\b\\w\\w+\\b``: any script,
so ``café`` and ``東京`` are words), ``stopwords`` removed (``"en"``, any
list name bm25s ships, or ``"none"``), each word stemmed when ``stemmer``
names a PyStemmer algorithm (``"english"``; PyStemmer is in the
``lexical`` extra). bm25s computes every text's BM25 weight per word at
build (``method`` ``lucene`` by default, ``k1`` 1.5, ``b`` 0.75) into a
sparse matrix; a search sums the query words' columns and takes the top k
with its ``backend``: ``numpy`` (argpartition) or ``numba`` (compiled
scoring and selection, compiled at the first build of a process and
recorded as compile time, apart from the build).

Hits: only texts sharing at least one (stemmed) word with the query are
returned; the rest of a row is ``-1`` / ``-inf``. A query of only stop
words, or of words no text holds, returns a row of pads (its recall
against exact dense search is then 0: the record shows it). A corpus text
with no word (empty, or only stop words) is kept in its row and never
returned; a corpus where no text has a word is an :class:`InputError`.

Timed parts of each search (``last_parts()``, in records as the retrieve
split): ``tokenize`` (the query's words to ids), ``score`` (bm25s's
``retrieve``), ``decode`` (dropping non-hits, padding).

Filters: ``search(..., filter=...)`` passes the allow-list to bm25s as its
``weight_mask`` (scores of other texts are multiplied by 0), strategy
``pre``; one call per query when the queries' allow-lists differ.
Writes: bm25s has no insert into a built index, so ``add``/``delete`` and
``ragbench stream`` are refused (the class does not declare
:class:`~ragbench.indexes.contract.WritableIndex`). Saving writes the texts;
loading indexes them again.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, MissingDependencyError
from ..validate import positive_number
from ._arrays import F32, I64
from ._lexical import LexicalIndex, pads

__all__ = ["Bm25Index"]

_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
_BACKENDS = ("numpy", "numba")
_perf = time.perf_counter_ns


def _stemmer(name: str | None) -> Any:
    """A thread-safe ``stem(word) -> str`` of PyStemmer's algorithm ``name``, or None."""
    if name is None:
        return None
    try:
        import Stemmer
    except ImportError:
        raise MissingDependencyError("PyStemmer", "lexical") from None
    if name not in Stemmer.algorithms():
        raise ConfigError(
            f"index 'bm25': stemmer {name!r} is not a PyStemmer algorithm; "
            f"use one of: {', '.join(Stemmer.algorithms())}, or none"
        )
    stemmer = Stemmer.Stemmer(name)
    lock = threading.Lock()  # a PyStemmer object may not be used by two threads at once

    def stem(word: str) -> str:
        with lock:
            return str(stemmer.stemWord(word))

    return stem


class Bm25Index(LexicalIndex):
    """BM25 over texts with bm25s; see the module docstring."""

    name: ClassVar[str] = "bm25"
    library: ClassVar[str] = "bm25s"
    payload_format: ClassVar[str] = "ragbench.lexical-texts-json"
    no_write_reason: ClassVar[str] = "bm25s cannot add texts to a built index"
    build_defaults: ClassVar[dict[str, Any]] = {
        "k1": 1.5,
        "b": 0.75,
        "method": "lucene",
        "backend": "numpy",
        "stopwords": "en",
        "stemmer": None,
    }

    def __init__(
        self, dim: int | None = None, metric: str | None = "bm25", **build_params: Any
    ) -> None:
        super().__init__(dim, metric, **build_params)
        self._retriever: Any = None
        self._tokenizer: Any = None
        self._kwargs = self.retrieve_kwargs()

    def _check_build_params(self, params: dict[str, Any]) -> dict[str, Any]:
        owner = f"index {self.name!r}"
        params["k1"] = positive_number(owner, "k1", params["k1"])
        b = params["b"]
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b <= 1.0:
            raise ConfigError(f"{owner}: b must be a number in [0, 1], got {b!r}")
        params["b"] = float(b)
        for key, allowed in (("method", _METHODS), ("backend", _BACKENDS)):
            if params[key] not in allowed:
                raise ConfigError(
                    f"{owner}: {key} {params[key]!r} is not one of {', '.join(allowed)}"
                )
        stopwords = params["stopwords"]
        if not isinstance(stopwords, str):
            raise ConfigError(f"{owner}: stopwords must be a list name such as 'en', or 'none'")
        if stopwords != "none":
            from bm25s.tokenization import Tokenizer

            try:
                Tokenizer(stopwords=stopwords)
            except ValueError:
                raise ConfigError(
                    f"{owner}: stopwords {stopwords!r} is not a list bm25s ships "
                    "(en, en_plus, de, fr, es, ...), or 'none'"
                ) from None
        if params["stemmer"] == "none":
            params["stemmer"] = None
        if params["stemmer"] is not None and not isinstance(params["stemmer"], str):
            raise ConfigError(f"{owner}: stemmer must be a PyStemmer algorithm name or none")
        _stemmer(params["stemmer"])  # a missing PyStemmer or unknown name: now, not at build
        return params

    def _index(self, texts: list[str]) -> int:
        import bm25s
        from bm25s.tokenization import Tokenizer

        p = self.build_params
        stop = None if p["stopwords"] == "none" else p["stopwords"]
        tokenizer = Tokenizer(stopwords=stop, stemmer=_stemmer(p["stemmer"]))
        ids = tokenizer.tokenize(texts, update_vocab=True, return_as="ids", show_progress=False)
        retriever = bm25s.BM25(k1=p["k1"], b=p["b"], method=p["method"], backend=p["backend"])
        retriever.index(ids, show_progress=False)
        self._tokenizer, self._retriever = tokenizer, retriever
        self.compile_ns = 0
        if p["backend"] == "numba":
            # the first numba search compiles bm25s's kernels (seconds, once per process):
            # set-up, recorded apart as compile time, not the first request's cost
            start = _perf()
            retriever.retrieve([ids[0]], k=1, **self.retrieve_kwargs())
            self.compile_ns = _perf() - start
        vocab = tokenizer.get_vocab_dict()
        return len(vocab) - ("" in vocab)

    def query_tokens(self, texts: list[str]) -> list[list[int]]:
        """The queries' word ids as bm25s's ``retrieve`` takes them (unknown words dropped)."""
        # update_vocab=False: a stemmed word whose stem the corpus holds maps to it (True
        # would grow the vocabulary; "never" would drop it); allow_empty=False: no "" token
        out: list[list[int]] = self._tokenizer.tokenize(
            texts, update_vocab=False, return_as="ids", show_progress=False, allow_empty=False
        )
        return out

    def retrieve_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of every bm25s ``retrieve`` call this index makes."""
        backend = self.build_params["backend"]
        return {"show_progress": False, "n_threads": 0, "backend_selection": backend}

    def _search_parts(
        self, texts: list[str], k: int, masks: list[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        retrieve, kwargs = self._retriever.retrieve, self._kwargs
        t0 = _perf()
        tokens = self.query_tokens(texts)
        t1 = _perf()
        asked = [i for i, t in enumerate(tokens) if t]
        rows: list[tuple[int, np.ndarray, np.ndarray]] = []  # (query row, docs, scores)
        if asked and (masks is None or all(m is masks[0] for m in masks)):
            weight = None if masks is None else masks[0].astype(F32)
            queries = tokens if len(asked) == len(tokens) else [tokens[i] for i in asked]
            docs, scores = retrieve(queries, k=k, weight_mask=weight, **kwargs)
            rows = [(i, docs[j], scores[j]) for j, i in enumerate(asked)]
        elif asked and masks is not None:
            for i in asked:
                docs, scores = retrieve(
                    [tokens[i]], k=k, weight_mask=masks[i].astype(F32), **kwargs
                )
                rows.append((i, docs[0], scores[0]))
        t2 = _perf()
        ids, out = pads(len(texts), k)
        for i, docs, scores in rows:
            _put_hits(ids[i], out[i], docs, scores)
        self._keep_parts(t0, t1, t2, _perf())
        return ids, out

    def _search_one(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_search_parts` of one unfiltered query whose ``k`` is checked, written straight
        through: the fast path of the target "``bm25`` at most 1.05x bm25s's own ``retrieve``"
        (docs/reference/performance-targets.md#lexical, ``bench/test_bench_lexical.py``). When
        all k scores are hits (> 0; bm25s sorts best first, so the k-th is the lowest) bm25s's
        own fresh ``(1, k)`` int64 / float32 arrays are the row: no pads made and filled, no
        count, no copy. Else (fewer hits, no known word) its hits go into a row of pads as in
        the plain path.
        ``tests/indexes/test_lexical.py`` checks, by property-based tests, that it returns
        exactly what :meth:`_search_parts` returns."""
        t0 = _perf()
        tokens = self.query_tokens([text])
        t1 = _perf()
        if not tokens[0]:  # no word the corpus holds: a row of pads
            t2 = t1
            ids, out = pads(1, k)
        else:
            docs, scores = self._retriever.retrieve(tokens, k=k, **self._kwargs)
            t2 = _perf()
            if scores[0, k - 1] > 0 and docs.dtype == I64 and scores.dtype == F32:
                ids, out = docs, scores
            else:
                ids, out = pads(1, k)
                _put_hits(ids[0], out[0], docs[0], scores[0])
        self._local.parts = (t0, t1, t2, _perf())  # the stamps: last_parts() subtracts
        return ids, out

    def memory_bytes(self) -> int:
        """Bytes of bm25s's sparse score matrix plus ~100 per vocabulary word (dict entries)."""
        if self._retriever is None:
            raise self._not_built()
        scores = self._retriever.scores
        arrays = sum(int(v.nbytes) for v in scores.values() if isinstance(v, np.ndarray))
        return arrays + 100 * len(self._tokenizer.get_vocab_dict())

    def extra_info(self) -> dict[str, Any]:
        if self._tokenizer is None:
            return {}
        return {"vocabulary": len(self._tokenizer.get_vocab_dict())}


def _put_hits(ids: np.ndarray, out: np.ndarray, docs: np.ndarray, scores: np.ndarray) -> None:
    """Copy one query's hits (score > 0) from bm25s's row into a row of pads."""
    # bm25s returns the top k sorted best first: the hits are a prefix
    n = int(np.count_nonzero(scores > 0))
    ids[:n] = docs[:n]
    out[:n] = scores[:n]
