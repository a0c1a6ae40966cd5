"""The ``asgi`` transport beyond the shared transport contract (tests/transports/test_transports.py):
exact wire byte counts, server settings, the stopped server, missing extras, a pipeline and the CLI."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.errors import ConfigError, DecodeError, MissingDependencyError, TransportError
from ragbench.prompt import build_prompt
from ragbench.transports import asgi as asgi_module
from ragbench.transports.asgi import AsgiTransport

PROMPT_PARAMS = {"max_tokens": 700}


def result(n_hits: int = 3, tag: str = "") -> rb.RetrievalResult:
    hits = [
        rb.Hit(
            f"d{i}", 1.0 - i / 10, f"chunk {i} {tag}: naïve 检索 text " * (4 + 3 * i), {"i": "x"}
        )
        for i in range(n_hits)
    ]
    return rb.RetrievalResult(f"q-{tag}", f"question {tag}?", hits)


@pytest.fixture
def started() -> Iterator[list[AsgiTransport]]:
    made: list[AsgiTransport] = []
    try:
        yield made
    finally:
        for transport in made:
            transport.close()


def start(made: list[AsgiTransport], codec: str = "msgpack", **params: object) -> AsgiTransport:
    transport = rb.transports.create("asgi", **params)
    assert isinstance(transport, AsgiTransport)
    made.append(transport)
    transport.start(codec, {}, dict(PROMPT_PARAMS))
    return transport


class CountingProxy:
    """A TCP proxy to ``port`` that counts the bytes crossing it in each direction."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.up = 0  # client → server
        self.down = 0  # server → client
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        server = socket.create_connection(("127.0.0.1", self.target))
        self._socks += [client, server]
        threading.Thread(target=self._pump, args=(client, server, "up"), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    setattr(self, direction, getattr(self, direction) + len(data))
                dst.sendall(data)
        except OSError:
            pass

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.up, self.down

    def close(self) -> None:
        for sock in self._socks:
            sock.close()


@pytest.mark.integration
def test_byte_counts_are_the_bytes_on_the_wire(started: list[AsgiTransport]) -> None:
    transport = start(started)
    codec = rb.codecs.create("msgpack")
    proxy = CountingProxy(transport.port)
    # A new thread opens its own connection, through the proxy: /health first, then the requests.
    transport.port = proxy.port
    out: list[object] = []

    def work() -> None:
        try:
            transport.connect()
            before = proxy.counts()
            for n in (0, 1, 5, 20):
                payload = codec.encode(result(n, str(n)))
                far = transport.send(payload, "q")
                # The reply is in hand once send returns; the proxy has relayed all of it.
                up, down = proxy.counts()
                out.append((far, len(payload), up - before[0], down - before[1]))
                before = (up, down)
        except BaseException as exc:
            out.append(exc)

    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(60)
    finally:
        proxy.close()
    assert len(out) == 4, out
    for far, payload_len, up, down in out:  # type: ignore[misc]
        assert far.wire_bytes_sent == up
        assert far.wire_bytes_received == down
        assert up > payload_len  # the request line and headers cross too
        assert down > len(far.prompt.encode())


@pytest.mark.integration
def test_round_trip_timings_and_server_settings(started: list[AsgiTransport]) -> None:
    transport = start(started, "protobuf")
    codec = rb.codecs.create("protobuf")
    info = transport.describe()
    assert info["server"] == "uvicorn" and info["app"] == "starlette" and info["workers"] == 1
    assert info["http"] in ("h11", "httptools") and info["loop"] in ("asyncio", "uvloop")
    assert info["versions"]["uvicorn"] and info["versions"]["starlette"]
    for n in (0, 3, 10):
        r = result(n, f"rt{n}")
        far = transport.send(codec.encode(r), r.query)
        assert (far.prompt, far.prompt_tokens) == build_prompt(r, **PROMPT_PARAMS)
        assert far.decode_ns > 0 and far.prompt_ns > 0


class PairCodec:
    """msgpack, except that decode waits up to ``wait`` s for a second decode in flight.

    How many it saw at once is appended to the question, so it shows in the prompt.
    """

    name = "test-asgi-rendezvous"
    content_type = "application/msgpack"

    def __init__(self, parties: int = 2, wait: float = 1.0) -> None:
        self._inner = rb.codecs.create("msgpack")
        self.parties, self.wait = parties, wait
        self._cond = threading.Condition()
        self._inflight = self._peak = 0

    def encode(self, r: rb.RetrievalResult) -> bytes:
        return self._inner.encode(r)

    def decode(self, payload: bytes) -> rb.RetrievalResult:
        r = self._inner.decode(payload)
        with self._cond:
            self._inflight += 1
            self._peak = max(self._peak, self._inflight)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._peak >= self.parties, timeout=self.wait)
            seen = self._peak
            self._inflight -= 1
        return rb.RetrievalResult(r.query_id, f"{r.query} [{seen} at once]", r.hits)


def make_pair_codec(parties: int = 2, wait: float = 1.0) -> PairCodec:
    return PairCodec(parties, wait)


@pytest.mark.integration
def test_endpoint_on_the_event_loop_serves_one_request_at_a_time(
    started: list[AsgiTransport],
) -> None:
    rb.codecs.register("test-asgi-rendezvous", make_pair_codec)
    try:
        transport = rb.transports.create("asgi", offload=False)
        started.append(transport)
        # Each decode waits up to 1 s for a second one in flight: none ever comes.
        transport.start("test-asgi-rendezvous", {"parties": 2, "wait": 1.0}, dict(PROMPT_PARAMS))
        codec = PairCodec()
        replies: list[str] = []

        def work(t: int) -> None:
            r = rb.RetrievalResult(f"q{t}", f"thread {t}?", [])
            replies.append(transport.send(codec.encode(r), r.query).prompt)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        rb.codecs.registry.unregister("test-asgi-rendezvous")
    assert len(replies) == 2
    assert all("[1 at once]" in p for p in replies), replies


@pytest.mark.integration
def test_malformed_payload_and_close(started: list[AsgiTransport]) -> None:
    transport = start(started)
    with pytest.raises(DecodeError, match="far side over asgi"):
        transport.send(b"\xc1 not msgpack", "q-bad")
    assert transport.alive
    port, pid = transport.port, transport.pid
    transport.close()
    assert transport.pid is None and not transport.alive
    # Nothing accepts on the port any more.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert pid is not None
    with pytest.raises(rb.errors.NotBuiltError):
        transport.send(b"x", "q")


def test_settings_are_checked_before_any_process() -> None:
    with pytest.raises(ConfigError, match=r"unknown http implementation 'h3'; known: auto, "):
        rb.transports.create("asgi", http="h3")
    with pytest.raises(ConfigError, match=r"known: auto, uvloop, asyncio"):
        rb.transports.create("asgi", loop="trio")
    with pytest.raises(ConfigError, match="offload"):
        rb.transports.create("asgi", offload="yes")
    with pytest.raises(ConfigError, match="keep_alive_s"):
        rb.transports.create("asgi", keep_alive_s=0)
    with pytest.raises(
        ConfigError,
        match="valid: allow_remote, host, http, http2, keep_alive, keep_alive_s, loop, offload",
    ):
        rb.transports.create("asgi", workers=2)
    explicit = rb.transports.create("asgi", http="h11", loop="asyncio")
    assert (explicit.http, explicit.loop) == ("h11", "asyncio")


def test_auto_takes_the_fastest_installed_and_named_missing_ones_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(asgi_module, "_installed", lambda name: True)
    fast = rb.transports.create("asgi")
    assert (fast.http, fast.loop) == ("httptools", "uvloop")
    monkeypatch.setattr(asgi_module, "_installed", lambda name: name not in ("httptools", "uvloop"))
    plain = rb.transports.create("asgi")
    assert (plain.http, plain.loop) == ("h11", "asyncio")
    with pytest.raises(ConfigError, match="pip install httptools"):
        rb.transports.create("asgi", http="httptools")
    with pytest.raises(ConfigError, match="pip install uvloop"):
        rb.transports.create("asgi", loop="uvloop")


@pytest.mark.parametrize("module", ["httpx", "starlette", "uvicorn"])
def test_missing_serve_extra_names_it(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragbench\[serve\]'") as info:
        AsgiTransport()
    assert module in str(info.value)


def test_import_ragbench_loads_no_serve_library() -> None:
    import subprocess

    code = (
        "import sys, ragbench as rb; rb.transports.names(); "
        "print([m for m in ('starlette', 'uvicorn', 'httpx', 'openai') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


SMALL = {"name": "synthetic", "n": 800, "dim": 16, "n_queries": 20, "seed": 5}


@pytest.mark.integration
def test_pipeline_runs_end_to_end_over_asgi() -> None:
    cfg = {
        "dataset": dict(SMALL),
        "run": {"queries": 20, "warmup": 2, "k": 5, "k_candidates": 20},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "msgspec-json"},
        "transport": {"backend": "asgi"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        report = pipe.run()
        pid = pipe.transport.pid
    assert pid is not None and pipe.transport.pid is None  # closed with the pipeline
    cols = dict(zip(report.stage_names, report.samples_ns.T, strict=True))
    assert report.requests == 20
    for stage in ("transport", "deserialize", "prompt"):
        assert (cols[stage] > 0).all(), stage
    assert report.mean_recall == 1.0


@pytest.mark.integration
def test_cli_run_with_transport_asgi(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "asgi.toml"
    config.write_text(
        '[dataset]\nname = "synthetic"\nn = 600\ndim = 16\nn_queries = 10\n'
        "[run]\nqueries = 10\nwarmup = 2\nk = 5\nk_candidates = 20\n"
        '[retrieve]\nbackend = "flat"\n[serialize]\nbackend = "msgpack"\n'
        '[transport]\nbackend = "asgi"\nhttp = "h11"\nloop = "asyncio"\n'
    )
    out = tmp_path / "run.jsonl"
    code = main(["run", "-c", str(config), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["config"]["transport"]["backend"] == "asgi"
    server = record["info"]["transport_info"]
    assert (server["server"], server["http"], server["loop"]) == ("uvicorn", "h11", "asyncio")
    assert "deserialize" in captured.out


@pytest.mark.integration
def test_load_with_worker_processes_over_asgi(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "load.jsonl"
    args = ["load", "--dataset", "synthetic", "--n", "600", "--dim", "16", "--index", "flat"]
    args += ["--codec", "msgpack", "--transport", "asgi", "--qps", "50", "--duration", "0.5"]
    args += ["--warmup", "2", "--worker-kind", "process", "--workers", "2", "--out", str(out)]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["worker_kind"] == "process" and record["workers"] == 2
    assert record["completed"] > 0 and record["failed"] == 0


def test_bad_transport_name_lists_asgi() -> None:
    with pytest.raises(rb.errors.UnknownBackendError, match="asgi"):
        rb.transports.create("asgii")


def test_transport_error_type_for_a_refused_connection(started: list[AsgiTransport]) -> None:
    transport = start(started)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    transport.port = free  # a new thread's connection goes nowhere
    errors: list[BaseException] = []

    def work() -> None:
        try:
            transport.send(b"x", "q")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], TransportError)
    assert "cannot connect" in str(errors[0])


def test_accepted_connections_get_tcp_nodelay() -> None:
    """The listener says IPPROTO_TCP, so asyncio sets TCP_NODELAY on what it accepts.

    (With proto 0 it does not, and uvicorn's separate head and body writes then
    wait ~40 ms for the client's delayed ACK on every request.)
    """
    import asyncio

    from ragbench.transports.asgi_server import _bind

    listener = _bind("127.0.0.1")
    assert listener.proto == socket.IPPROTO_TCP
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def serve_one() -> None:
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(serve_one())
    assert seen and seen[0] != 0
