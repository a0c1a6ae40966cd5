"""Transport round trips, side by side: inproc vs http vs grpc vs asgi, per codec.

Gate: docs/reference/performance-targets.md#transports.

One send = near side writes the payload, the far side (a child process for
http/grpc/asgi) decodes it and builds the prompt, and the reply comes back. The
table splits each round trip into wire time (round trip minus the far side's
own decode and prompt times) and the far side's work, per codec, for a
10-chunk payload of ~1 KB chunks with 3 metadata entries. Interleaved, medians.

Run: ``.venv/bin/pytest bench/test_bench_transports.py --benchmark-only -s``

``test_tls_and_gzip_ratios`` puts TLS beside plaintext, HTTP/2 beside HTTP/1.1 and gzip
beside no compression, interleaved, at two payload sizes, and prints the ratios.
"""

from __future__ import annotations

import statistics
from time import perf_counter_ns

import pytest
from _quick import attempts, judge, pick

import ragbench as rb
from ragbench.testing import sample_result

TRANSPORTS = ("inproc", "http", "grpc", "asgi")
CODECS = ("orjson", "msgpack", "protobuf")
ROUNDS = pick(400, 100)


@pytest.fixture(scope="module")
def started():
    made = {}
    try:
        for t in TRANSPORTS:
            for c in CODECS:
                tr = rb.transports.create(t)
                tr.start(c, {}, {"max_tokens": 4096})
                made[(t, c)] = tr
        yield made
    finally:
        for tr in made.values():
            tr.close()


def test_transport_round_trips(benchmark, started) -> None:
    result = sample_result(n_hits=10, text_bytes=1000, metadata=3)
    payloads = {c: rb.codecs.create(c).encode(result) for c in CODECS}
    rtt: dict[tuple[str, str], list[int]] = {k: [] for k in started}
    wire: dict[tuple[str, str], list[int]] = {k: [] for k in started}
    far: dict[tuple[str, str], list[int]] = {k: [] for k in started}
    nbytes: dict[tuple[str, str], int] = {}
    keys = list(started)
    for r in range(ROUNDS):
        order = keys if r % 2 == 0 else keys[::-1]
        for key in order:
            t0 = perf_counter_ns()
            reply = started[key].send(payloads[key[1]], result.query)
            dt = perf_counter_ns() - t0
            rtt[key].append(dt)
            far[key].append(reply.decode_ns + reply.prompt_ns)
            wire[key].append(dt - reply.decode_ns - reply.prompt_ns)
            nbytes[key] = reply.wire_bytes_sent + reply.wire_bytes_received
    base = {c: statistics.median(wire[("inproc", c)]) for c in CODECS}
    print(
        f"\n{'transport':9} {'codec':9} {'round trip µs':>14} {'wire µs':>9} {'far side µs':>12} "
        f"{'wire bytes':>11} {'wire × inproc':>14}"
    )
    for key in keys:
        t, c = key
        w = statistics.median(wire[key])
        print(
            f"{t:9} {c:9} {statistics.median(rtt[key]) / 1e3:14.1f} {w / 1e3:9.1f} "
            f"{statistics.median(far[key]) / 1e3:12.1f} {nbytes[key]:11,d} {w / base[c]:14.1f}"
        )
        benchmark.extra_info[f"{t}/{c}/p50_us"] = statistics.median(rtt[key]) / 1e3
    pb = started[("http", "protobuf")]
    benchmark(pb.send, payloads["protobuf"], result.query)
    for key in keys:
        assert nbytes[key] >= len(payloads[key[1]])  # at least the payload crossed


# ----------------------------------------------------------------- settings, side by side

SETTINGS = {
    "http": ("http", {}),
    "http+tls": ("http", {"tls": True}),
    "asgi": ("asgi", {}),
    "asgi+tls": ("asgi", {"tls": True}),
    "asgi+h2+tls": ("asgi", {"tls": True, "http2": True}),
    "grpc": ("grpc", {}),
    "grpc+tls": ("grpc", {"tls": True}),
    "grpc+gzip": ("grpc", {"compression": "gzip"}),
}
SIZES = {"k=10": 10, "k=100": 100}
SETTING_ROUNDS = 200


def test_tls_and_gzip_ratios(benchmark) -> None:
    """TLS vs plaintext and gzip vs none, each pair interleaved request by request.

    Reports the median round-trip ratios per payload size; asserts only loose
    sanity bounds (a TLS or gzip exchange is neither free nor 100x the plain one).
    """
    made = {}
    try:
        for key, (kind, params) in SETTINGS.items():
            tr = rb.transports.create(kind, **params)
            tr.start("protobuf", {}, {"max_tokens": 100_000})
            made[key] = tr
        codec = rb.codecs.create("protobuf")
        results = {
            s: sample_result(n_hits=n, text_bytes=1000, metadata=3) for s, n in SIZES.items()
        }
        payloads = {s: codec.encode(r) for s, r in results.items()}

        def measure() -> dict[tuple[str, str], float]:
            rtt: dict[tuple[str, str], list[int]] = {(k, s): [] for k in made for s in SIZES}
            keys = list(rtt)
            for r in range(SETTING_ROUNDS):
                for key in keys if r % 2 == 0 else keys[::-1]:
                    setting, size = key
                    t0 = perf_counter_ns()
                    made[setting].send(payloads[size], results[size].query)
                    rtt[key].append(perf_counter_ns() - t0)
            return {k: statistics.median(v) for k, v in rtt.items()}

        def worst(med: dict[tuple[str, str], float]) -> float:
            """How far the farthest ratio is toward a sanity bound: < 1 when all are in (0.3, 100)."""
            xs = [med[(a, s)] / med[(b, s)] for a, b in pairs for s in SIZES]
            return max(max(x / 100, 0.3 / x) for x in xs)

        pairs = [
            ("http+tls", "http"),
            ("asgi+tls", "asgi"),
            ("asgi+h2+tls", "asgi+tls"),
            ("grpc+tls", "grpc"),
            ("grpc+gzip", "grpc"),
        ]
        runs = attempts(measure, lambda quiet: any(worst(m) < 1.0 for m in quiet))
        med = min((a.value for a in runs if a.quiet), key=worst, default=runs[-1].value)
        print(f"\n{'pair':26} " + " ".join(f"{s + ' ×':>10}" for s in SIZES))
        for a, b in pairs:
            ratios = [med[(a, s)] / med[(b, s)] for s in SIZES]
            print(f"{a + ' / ' + b:26} " + " ".join(f"{x:10.2f}" for x in ratios))
            for s, x in zip(SIZES, ratios, strict=True):
                benchmark.extra_info[f"{a}/{b}/{s}"] = x
        judge(
            "farthest TLS/gzip ratio toward (0.3, 100): max(x / 100, 0.3 / x)",
            runs,
            worst,
            bound=1.0,
            higher_is_better=False,
            strict=True,
        )
        for key, v in med.items():
            benchmark.extra_info[f"{key[0]}/{key[1]}/p50_us"] = v / 1e3
        benchmark(made["http+tls"].send, payloads["k=10"], results["k=10"].query)
    finally:
        for tr in made.values():
            tr.close()
