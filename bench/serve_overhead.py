"""What serving HTTP "the way services do" costs per request, measured side by side.

Two measurements, each interleaved (one request of every variant per round,
rounds repeated) and reported as medians:

1. transports: the round trip of one payload (``send``; the far side's
   decode and prompt time subtracted, as the pipeline's ``transport`` stage
   does) for every pairing of client and server -- ragbench's raw-socket
   client or httpx, against the stdlib ``ThreadingHTTPServer`` or Starlette
   on uvicorn (its endpoint in Starlette's thread pool, the default, or on
   the event loop: ``offload=False``, "async def") -- so the framework's
   cost splits into its client and server shares. (A pairing points one transport's client at the other's
   server: both speak the same ``POST /v1/process``.)
2. openai clients: time to first token through the ``minimal`` client and
   the official ``openai`` client against ragbench's stub LLM server with no
   modelled prefill (so TTFT is the client, the HTTP exchange and the
   stub's own work), beside the cost of one loopback TCP connect.

Run: ``.venv/bin/python bench/serve_overhead.py [--requests 300] [--repeat 3]``.
Not part of the test suite; figures are machine dependent.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import ragbench as rb
from ragbench.generators.openai import OpenAIGenerator
from ragbench.generators.stub import StubGenerator
from ragbench.generators.stub_server import MODEL_ID

PROMPT_PARAMS = {"max_tokens": 2048}


def payload(codec: Any, hits: int) -> bytes:
    """A msgpack payload like a pydocs one: ``hits`` chunks of ~550 characters (~6 KB at 10)."""
    text = "Return a new sorted list from the items in iterable. " * 10
    result = rb.RetrievalResult(
        "q-bench",
        "How do I sort a list of tuples by the second item?",
        [rb.Hit(f"doc-{i}", 1.0 - i / 100, text, {"src": f"library/{i}.rst"}) for i in range(hits)],
    )
    return bytes(codec.encode(result))


def interleaved(
    variants: dict[str, Callable[[], int]], requests: int, repeat: int
) -> dict[str, list[float]]:
    """Per variant, the median (µs) of each repetition; the variants take turns request by request."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        samples: dict[str, list[int]] = {name: [] for name in variants}
        for _ in range(requests):
            for name, call in variants.items():
                samples[name].append(call())
        for name, xs in samples.items():
            out[name].append(statistics.median(xs) / 1000)
    return out


def in_thread(work: Callable[[], Any]) -> Any:
    """Run ``work`` in a new thread (so its transports open new connections) and return its result."""
    box: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]


def transports(requests: int, repeat: int, hits: int) -> None:
    codec = rb.codecs.create("msgpack")
    body = payload(codec, hits)
    servers = {
        "stdlib": rb.transports.create("http"),
        "uvicorn": rb.transports.create("asgi"),
        "uvicorn, async def": rb.transports.create("asgi", offload=False),
    }
    for t in servers.values():
        t.start("msgpack", {}, dict(PROMPT_PARAMS))
    clients: dict[str, Any] = {}
    try:
        for client_kind in ("http", "asgi"):
            for server_name, server in servers.items():
                t = rb.transports.create(client_kind)
                t.start("msgpack", {}, dict(PROMPT_PARAMS))  # its own server, unused below
                t.port = server.port  # this client, that server (new threads connect there)
                clients[f"{'raw socket' if client_kind == 'http' else 'httpx'} → {server_name}"] = t

        def send(t: Any) -> Callable[[], int]:
            def call() -> int:
                t0 = time.perf_counter_ns()
                far = t.send(body, "q")
                return time.perf_counter_ns() - t0 - far.decode_ns - far.prompt_ns

            return call

        def measure() -> dict[str, list[float]]:
            for t in clients.values():
                t.connect()
            variants = {name: send(t) for name, t in clients.items()}
            interleaved(variants, 20, 1)  # warm-up
            return interleaved(variants, requests, repeat)

        result = in_thread(measure)
        print(f"\ntransport round trip, far-side decode+prompt excluded; payload {len(body)} B")
        print(f"{'client → server':<32}{'median µs':>10}  {'repeats (µs)':<24}{'× baseline':>11}")
        base = statistics.median(result["raw socket → stdlib"])
        for name, medians in result.items():
            med = statistics.median(medians)
            reps = ", ".join(f"{m:.0f}" for m in medians)
            print(f"{name:<32}{med:>10.0f}  {reps:<24}{med / base:>11.2f}")
    finally:
        for t in [*clients.values(), *servers.values()]:
            t.close()


def loopback_connect_us(port: int, n: int = 300) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        sock = socket.create_connection(("127.0.0.1", port))
        xs.append(time.perf_counter_ns() - t0)
        sock.close()
    return statistics.median(xs) / 1000


def openai_clients(requests: int, repeat: int, prompt_words: int) -> None:
    stub = StubGenerator(prefill_ms_per_1k_tokens=0, base_ms=0, inter_token_ms=0, max_tokens=1)
    stub.start()
    gens: dict[str, OpenAIGenerator] = {}
    try:
        assert stub.url is not None
        for client in ("minimal", "openai"):
            gens[client] = OpenAIGenerator(
                base_url=stub.url, model=MODEL_ID, max_tokens=1, client=client
            )
            gens[client].start()
        prompt = "Context: " + "sorted returns a new list " * (prompt_words // 5)
        tokens = rb.prompt.count_tokens(prompt)

        def ttft(gen: OpenAIGenerator) -> Callable[[], int]:
            return lambda: gen.first_token(prompt, tokens).ttft_ns

        variants = {name: ttft(gen) for name, gen in gens.items()}
        interleaved(variants, 20, 1)  # warm-up
        result = interleaved(variants, requests, repeat)
        port = int(stub.url.split("/")[2].rsplit(":", 1)[1])
        connect = loopback_connect_us(port)
    finally:
        for gen in gens.values():
            gen.close()
        stub.close()
    print(f"\nTTFT against the stub, no modelled prefill; prompt {tokens} tokens, max_tokens 1")
    print(f"{'client':<10}{'median µs':>11}  {'repeats (µs)':<26}{'× minimal':>10}")
    base = statistics.median(result["minimal"])
    for name, medians in result.items():
        med = statistics.median(medians)
        reps = ", ".join(f"{m:.0f}" for m in medians)
        print(f"{name:<10}{med:>11.0f}  {reps:<26}{med / base:>10.2f}")
    print(f"one loopback TCP connect (socket.create_connection), median: {connect:.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per variant per repeat")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hits", type=int, default=10, help="hits in the transport payload")
    parser.add_argument("--prompt-words", type=int, default=1500, help="words in the LLM prompt")
    args = parser.parse_args()
    transports(args.requests, args.repeat, args.hits)
    openai_clients(args.requests, args.repeat, args.prompt_words)


if __name__ == "__main__":
    main()
