from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_fixtures_are_available_to_any_pytest_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import ragbench as rb

        def test_payload(rb_result):
            r = rb_result(n_hits=4, text_bytes=200, metadata=2, dim=8)
            assert len(r.hits) == 4
            assert all(len(h.text) == 200 and len(h.metadata) == 2 for h in r.hits)
            assert r.hits[0].vector().shape == (8,)
            assert rb_result(n_hits=4, text_bytes=200, metadata=2, dim=8) == r

        def test_index_and_pipeline(rb_synthetic, rb_index, rb_pipeline):
            ds = rb_synthetic(n=500, dim=16, n_queries=10)
            idx = rb_index("flat", ds)
            ids, scores = idx.search(ds.query_vectors_precomputed[:2], k=3)
            assert ids.shape == (2, 3)
            assert rb_index("flat", ds) is idx
            pipe = rb_pipeline({"dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
                                "retrieve": {"backend": "flat"}, "serialize": {"backend": "json"}})
            report = pipe.run(queries=5, warmup=0)
            assert report.requests == 5
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_rb_bench_returns_the_report_with_a_one_line_repr(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import re

        CONFIG = {"dataset": {"name": "synthetic", "n": 500, "dim": 16, "n_queries": 10},
                  "retrieve": {"backend": "flat"}, "serialize": {"backend": "json"}}

        def test_fields(rb_bench):
            report = rb_bench(CONFIG, requests=20, warmup=2)
            assert report.requests == 20 and report.k == 10
            assert report.samples_ns.shape == (20, len(report.stage_names))
            assert report.total().p50_ns > 0 and report.mean_recall == 1.0
            text = repr(report)
            assert re.fullmatch(
                r"<Report flat/numba/json/inproc: 20 requests, p50 total [\\d.]+ (µs|ms), "
                r"p99 [\\d.]+ (µs|ms|s), recall@10 1\\.000>", text), text

        def test_failure_shows_the_short_repr(rb_bench):
            report = rb_bench(CONFIG, requests=5, warmup=0)
            assert report.mean_recall < 0.5
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    failure = result.stdout.str()
    assert "<Report flat/numba/json/inproc: 5 requests, p50 total" in failure
    assert "samples_ns=array" not in failure and "config={" not in failure
