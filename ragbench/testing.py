"""pytest fixtures for benchmark authors (a pytest plugin, loaded through ``pytest11``).

Installing ragbench makes these fixtures available in any pytest session::

    def test_protobuf_encode(benchmark, rb_result):
        codec = rb.codecs.create("protobuf")
        result = rb_result(n_hits=10, text_bytes=1000)
        benchmark(codec.encode, result)

- ``rb_result(n_hits=10, text_bytes=1000, metadata=3, dim=None, seed=0)``: a
  deterministic :class:`ragbench.RetrievalResult` payload;
- ``rb_synthetic(n=10_000, dim=384, n_queries=200, seed=0)``: a synthetic
  dataset, cached for the session;
- ``rb_index(name, dataset, **build_params)``: a built index, cached for the
  session and, when its build took 10 s or more, on disk across sessions
  (ragbench's built-index cache, as ``ragbench compare`` and ``sweep`` use it;
  ``cache=False`` or ``pytest --rb-no-index-cache`` builds anyway);
- ``rb_pipeline(config, embed_runtime=None)``: a set-up :class:`ragbench.Pipeline`, closed (its
  servers stopped) at teardown; ``embed_runtime="onnx-int8"`` (``torch``, ``onnx``,
  ``openvino``) runs the MiniLM query embedder on that runtime;
- ``rb_bench(config, requests=200, warmup=20, embed_runtime=None)`` (with pytest-benchmark): times
  whole requests of a pipeline with the ``benchmark`` fixture and puts
  ragbench's per-stage figures -- p50/p99 per stage, recall, and the raw
  per-stage samples ``ragbench diff`` reads -- into ``benchmark.extra_info["ragbench"]``;
  returns the :class:`ragbench.results.report.Report` of the timed requests (its repr
  is one line: ``<Report flat/numba/json/inproc: 200 requests, p50 total ...>``).

Nothing heavy is imported until a fixture is used.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .types import Hit, RetrievalResult

if TYPE_CHECKING:
    from .datasets import Dataset
    from .pipeline import Pipeline
    from .settings import ConfigSource

__all__ = ["sample_result", "stage_info", "with_embed_runtime"]

_WORDS = [
    "index",
    "vector",
    "query",
    "token",
    "latency",
    "payload",
    "chunk",
    "embedding",
    "server",
    "stream",
    "cache",
    "graph",
    "python",
    "numpy",
    "sort",
    "score",
    "recall",
    "network",
    "codec",
    "encode",
    "decode",
    "batch",
    "thread",
    "memory",
]


def sample_result(
    n_hits: int = 10,
    text_bytes: int = 1000,
    metadata: int = 3,
    dim: int | None = None,
    seed: int = 0,
) -> RetrievalResult:
    """A deterministic result: ``n_hits`` chunks of ~``text_bytes`` ASCII text each.

    ``metadata`` string entries per hit; ``dim`` adds float32 embeddings.
    """
    rng = random.Random(seed)
    hits = []
    for i in range(n_hits):
        words: list[str] = []
        size = 0
        while size < text_bytes:
            w = rng.choice(_WORDS)
            words.append(w)
            size += len(w) + 1
        text = " ".join(words)[:text_bytes]
        meta = {f"key{j}": f"value-{rng.randrange(10**6)}" for j in range(metadata)}
        emb = None
        if dim is not None:
            import numpy as np

            v = np.random.default_rng(seed * 1000 + i).standard_normal(dim).astype(np.float32)
            emb = (v / np.linalg.norm(v)).astype("<f4").tobytes()
        hits.append(
            Hit(
                doc_id=f"doc-{seed}-{i}",
                score=1.0 - i / (n_hits + 1),
                text=text,
                metadata=meta,
                embedding=emb,
            )
        )
    return RetrievalResult(
        query_id=f"q{seed}", query="where does the time go before the first token?", hits=hits
    )


@pytest.fixture
def rb_result() -> Callable[..., RetrievalResult]:
    """Factory for deterministic payloads (see :func:`sample_result`)."""
    return sample_result


@pytest.fixture(scope="session")
def rb_synthetic() -> Callable[..., Dataset]:
    """Factory for synthetic datasets, cached per parameter set for the session."""
    cache: dict[tuple[Any, ...], Dataset] = {}

    def make(n: int = 10_000, dim: int = 384, n_queries: int = 200, seed: int = 0) -> Dataset:
        from . import datasets

        key = (n, dim, n_queries, seed)
        if key not in cache:
            cache[key] = datasets.load("synthetic", n=n, dim=dim, n_queries=n_queries, seed=seed)
        return cache[key]

    return make


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ragbench")
    group.addoption(
        "--rb-no-index-cache",
        action="store_true",
        default=False,
        help="rb_index: build every index, neither loading nor saving ragbench's built-index "
        "cache ($RAGBENCH_CACHE_DIR/indexes)",
    )


@pytest.fixture(scope="session")
def rb_index(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Factory for built indexes over a dataset's vectors (or texts), cached for the session.

    ``rb_index(name, dataset, metric=None, *, cache=True, **build_params)``.
    With ``cache`` (and no ``--rb-no-index-cache``) the build is ragbench's
    reproducible one (one thread, seeded) through the built-index cache the
    CLI uses: a build of 10 s or more (``$RAGBENCH_INDEX_CACHE_MIN_S``) is
    saved under ``$RAGBENCH_CACHE_DIR/indexes``, keyed by backend, metric,
    dimension, rows, build parameters and library version plus the data's
    fingerprint, and the next session loads it (its ``build_record`` says
    ``"cached": true``). ``--rb-no-index-cache`` builds that same reproducible
    index every time, neither loading nor saving it. ``cache=False`` builds
    in place with every pinned thread, as :meth:`Index.build` does.
    """
    session: dict[tuple[Any, ...], Any] = {}
    disk = not request.config.getoption("rb_no_index_cache")

    def make(
        name: str, dataset: Dataset, metric: str | None = None, *, cache: bool = True, **build: Any
    ) -> Any:
        from . import indexes

        metric = metric or dataset.metric
        key = (name, dataset.content_hash, metric, json.dumps(build, sort_keys=True))
        if key not in session:
            texts = getattr(indexes.registry.factory(name), "input_kind", "vectors") == "texts"
            # a text index needs no vectors: embedding a corpus can take minutes
            vectors = None if texts else dataset.corpus_vectors(dataset.default_embedder)
            dim = None if vectors is None else int(vectors.shape[1])
            index = indexes.create(name, dim=dim, metric=metric, **build)
            data = dataset.corpus.texts if vectors is None else vectors
            if cache:
                from .indexes import builds

                # --rb-no-index-cache keeps the reproducible build, only off the disk
                source = f"rb_index {dataset.name}"
                index = builds.build(index, data, source=source, cache=disk).index
            else:
                index.build(data)
            session[key] = index
        return session[key]

    return make


@pytest.fixture
def rb_pipeline() -> Iterator[Callable[..., Pipeline]]:
    """Factory for set-up pipelines; every one is closed (servers stopped) at teardown."""
    from .pipeline import Pipeline

    made: list[Pipeline] = []

    def make(config: ConfigSource, *, embed_runtime: str | None = None) -> Pipeline:
        pipe = Pipeline.from_config(with_embed_runtime(config, embed_runtime))
        made.append(pipe)
        pipe.setup()
        return pipe

    yield make
    for pipe in made:
        pipe.close()


def with_embed_runtime(config: ConfigSource, runtime: str | None) -> ConfigSource:
    """``config`` (a file, a shipped name, a dict or a typed Config) with the MiniLM embedder
    on ``runtime`` (``[embed] backend = "minilm"``, ``runtime = ...``); unchanged when
    ``runtime`` is ``None``."""
    if runtime is None:
        return config
    from .settings import Config, read_config

    out = config.to_dict() if isinstance(config, Config) else read_config(config)
    out["embed"] = {**(out.get("embed") or {}), "backend": "minilm", "runtime": runtime}
    return out


def stage_info(report: Any) -> dict[str, Any]:
    """What ``rb_bench`` puts in ``benchmark.extra_info["ragbench"]`` for a report."""
    return {
        "label": report.label,
        "stages": list(report.stage_names),
        "p50_us": {n: report.stage(n).p50_ns / 1e3 for n in report.stage_names},
        "p99_us": {n: report.stage(n).p99_ns / 1e3 for n in report.stage_names},
        "total_p50_us": report.total().p50_ns / 1e3,
        "recall_at_k": report.mean_recall,
        # the embedder's runtime, sessions, ... and its tokenize/forward/pool split when it has one
        "embedder": (report.info or {}).get("embedder_info"),
        "embed_parts": (report.info or {}).get("embed_parts"),
        "samples_ns": {
            "total": report.totals_ns.tolist(),
            **{n: report.samples_ns[:, j].tolist() for j, n in enumerate(report.stage_names)},
        },
    }


@pytest.fixture
def rb_bench(benchmark: Any, rb_pipeline: Callable[..., Pipeline]) -> Callable[..., Any]:
    """Benchmark a pipeline's whole requests; per-stage figures land in ``benchmark.extra_info``.

    ``rb_bench(config, requests=200, warmup=20, embed_runtime=None)`` returns the
    :class:`~ragbench.results.report.Report` of the timed requests (as many as
    pytest-benchmark ran: one with ``--benchmark-disable``).
    """

    def run(
        config: ConfigSource,
        *,
        requests: int = 200,
        warmup: int = 20,
        embed_runtime: str | None = None,
    ) -> Any:
        pipe = rb_pipeline(config, embed_runtime=embed_runtime)
        pipe.begin()
        pipe.start_repetition(warmup)
        counter = iter(range(10**12))
        benchmark.pedantic(lambda: pipe.request(next(counter)), rounds=requests, iterations=1)
        report = pipe.report()
        benchmark.extra_info["ragbench"] = stage_info(report)
        return report

    return run
