"""TLS, HTTP/2, per-request connections and gRPC settings on the transports (real servers in
child processes on loopback, real sockets, real handshakes)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.cli import main
from ragbench.errors import ConfigError, DecodeError, TransportError
from ragbench.prompt import build_prompt
from ragbench.transports import connection_columns, tls

pytestmark = pytest.mark.integration

PROMPT_PARAMS = {"max_tokens": 4000}
REMOTE = ["http", "asgi", "grpc"]


def result(n_hits: int = 5, words: int = 40, tag: str = "") -> rb.RetrievalResult:
    hits = [
        rb.Hit(f"d{i}", 1.0 - i / 100, f"chunk {i} {tag}: " + "retrieval text " * words, {"i": "x"})
        for i in range(n_hits)
    ]
    return rb.RetrievalResult(f"q-{tag}", f"question {tag}?", hits)


def gone(pid: int, limit: float = 10.0) -> bool:
    """True once ``pid`` is no live process (absent or a zombie) within ``limit`` seconds."""
    end = time.monotonic() + limit
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


@pytest.fixture
def made() -> Iterator[list[Any]]:
    """Transports a test created: each closed afterwards, its server gone, its certificate removed."""
    out: list[Any] = []
    try:
        yield out
    finally:
        for transport in out:
            pid, cert = transport.pid, transport.certificate
            transport.close()
            assert pid is None or gone(pid), f"{transport.name} server {pid} left running"
            assert cert is None or not os.path.exists(cert.directory)


def start(made: list[Any], kind: str, codec: str = "msgpack", **params: Any) -> Any:
    transport = rb.transports.create(kind, **params)
    made.append(transport)
    transport.start(codec, {}, dict(PROMPT_PARAMS))
    return transport


def in_thread(fn: Any) -> Any:
    """``fn()`` in a new thread (so a transport opens a new connection for it); its result."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:
            out.append(("error", exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert out, "the thread did not finish"
    status, value = out[0]
    if status == "error":
        raise value
    return value


def tls_version(port: int, cert_pem: bytes, alpn: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """Shake hands with 127.0.0.1:``port`` trusting ``cert_pem``: (TLS version, ALPN protocol)."""
    ctx = tls.client_context(cert_pem, alpn)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        return str(sock.version()), sock.selected_alpn_protocol()


# ----------------------------------------------------------------- TLS


@pytest.mark.parametrize("kind", REMOTE)
def test_tls_transports_speak_tls13_with_the_certificate_made_at_start(
    made: list[Any], kind: str
) -> None:
    transport = start(made, kind, tls=True)
    cert = transport.certificate
    assert os.path.isfile(cert.cert_path) and os.stat(cert.key_path).st_mode & 0o077 == 0
    codec = rb.codecs.create("msgpack")
    res = result(tag=kind)
    far = transport.send(codec.encode(res), res.query)
    assert far.prompt == build_prompt(res, **PROMPT_PARAMS)[0]
    alpn = ("h2",) if kind == "grpc" else ()
    assert tls_version(transport.port, cert.cert_pem, alpn)[0] == "TLSv1.3"
    if kind == "http":  # the transport's own socket
        assert transport.thread_connections.current().sock.version() == "TLSv1.3"
    if kind != "grpc":  # the far side refuses anything below TLS 1.3
        old = tls.client_context(cert.cert_pem)
        old.minimum_version = ssl.TLSVersion.TLSv1_2
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with (
            socket.create_connection(("127.0.0.1", transport.port), timeout=10) as raw,
            pytest.raises(ssl.SSLError),
        ):
            old.wrap_socket(raw, server_hostname="127.0.0.1")
    # plaintext to a TLS server is not answered as if it were fine
    with socket.create_connection(("127.0.0.1", transport.port), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.settimeout(5)
        try:
            answer = raw.recv(100)
        except (TimeoutError, ConnectionResetError):
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("kind", REMOTE)
def test_a_server_with_another_certificate_is_refused(made: list[Any], kind: str) -> None:
    transport = start(made, kind, tls=True, keep_alive=False, timeout=5.0)
    codec = rb.codecs.create("msgpack")
    res = result()
    payload = codec.encode(res)
    transport.send(payload, res.query)  # trusting its own certificate: fine
    mine = transport.certificate
    other = tls.make_certificate()
    try:
        # the near side now trusts only another certificate than the one the server shows;
        # a new thread makes its connection (and its client) with it
        transport.certificate = other
        transport.__dict__.pop("_ssl", None)
        with pytest.raises(TransportError, match=r"(?i)certificate|handshake|connect"):
            in_thread(lambda: transport.send(payload, res.query))
    finally:
        transport.certificate = mine
        other.remove()


def test_wrong_hostname_fails_verification() -> None:
    cert = tls.make_certificate(("localhost",))
    try:
        server = tls.server_context(cert.cert_path, cert.key_path)
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            tls.client_context(cert.cert_pem).wrap_socket(raw, server_hostname="127.0.0.1")
        thread.join(10)
        listener.close()
    finally:
        cert.remove()
    assert not os.path.exists(cert.directory)


def test_tls_record_bytes() -> None:
    assert tls.record_bytes(0) == 0
    assert tls.record_bytes(1) == 1 + 22
    assert tls.record_bytes(16384) == 16384 + 22
    assert tls.record_bytes(16385) == 16385 + 44


class CountingProxy:
    """A TCP proxy to ``port`` counting the bytes crossing it each way, over every connection."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.up = 0
        self.down = 0
        self.accepted = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self._socks += [client, server]
            self.accepted += 1
            for src, dst, way in ((client, server, "up"), (server, client, "down")):
                threading.Thread(target=self._pump, args=(src, dst, way), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    setattr(self, way, getattr(self, way) + len(data))
                dst.sendall(data)
        except OSError:
            pass

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.up, self.down

    def close(self) -> None:
        for sock in self._socks:
            sock.close()


# ----------------------------------------------------------------- a new connection per request


@pytest.mark.parametrize("kind", REMOTE)
@pytest.mark.parametrize("secure", [True, False])
def test_keep_alive_false_splits_connect_tls_and_first_byte(
    made: list[Any], kind: str, secure: bool
) -> None:
    transport = start(made, kind, tls=secure, keep_alive=False)
    codec = rb.codecs.create("msgpack")
    expected = {
        "http": ["connect", "tls", "first_byte"] if secure else ["connect", "first_byte"],
        "asgi": ["connect", "tls", "first_byte"] if secure else ["connect", "first_byte"],
        "grpc": ["channel", "first_byte"],
    }[kind]
    fars = []
    for i in range(4):
        res = result(tag=str(i))
        t0 = time.perf_counter_ns()
        far = transport.send(codec.encode(res), res.query)
        elapsed = time.perf_counter_ns() - t0
        assert [name for name, _ in far.connection_ns] == expected
        assert all(ns > 0 for _, ns in far.connection_ns)
        assert sum(ns for _, ns in far.connection_ns) <= elapsed
        # the far side's decode and prompt happen while the near side waits for the first byte
        first_byte = dict(far.connection_ns)["first_byte"]
        assert first_byte >= far.decode_ns + far.prompt_ns
        assert far.prompt == build_prompt(res, **PROMPT_PARAMS)[0]
        fars.append(far)
    columns = connection_columns(fars)
    assert columns is not None and list(columns) == expected
    assert all(len(v) == 4 for v in columns.values())
    # nothing kept: no connection is registered beyond the one start() opened
    assert transport.connections <= 1


def test_keep_alive_false_opens_a_connection_per_request(made: list[Any]) -> None:
    transport = start(made, "http", tls=True, keep_alive=False)
    codec = rb.codecs.create("msgpack")
    proxy = CountingProxy(transport.port)
    target, transport.port = transport.port, proxy.port
    try:
        for i in range(3):
            res = result(tag=str(i))
            transport.send(codec.encode(res), res.query)
    finally:
        transport.port = target
        proxy.close()
    assert proxy.accepted == 3


def test_keep_alive_true_reports_no_connection_parts(made: list[Any]) -> None:
    transport = start(made, "http", tls=True)
    res = result()
    far = transport.send(rb.codecs.create("msgpack").encode(res), res.query)
    assert far.connection_ns == ()
    assert connection_columns([far, None]) is None


# ----------------------------------------------------------------- HTTP/2 on asgi


@pytest.mark.parametrize("secure", [True, False])
def test_asgi_http2_negotiates_h2(made: list[Any], secure: bool) -> None:
    import httpx

    transport = start(made, "asgi", http2=True, tls=secure)
    info = transport.describe()
    assert info["server"] == "hypercorn" and info["http"] == "h2"
    with httpx.Client(**transport.client_settings(), trust_env=False) as client:
        resp = client.get("/health")
    assert resp.status_code == 200 and resp.http_version == "HTTP/2"
    if secure:
        assert tls_version(transport.port, transport.certificate.cert_pem, ("h2",)) == (
            "TLSv1.3",
            "h2",
        )
    codec = rb.codecs.create("msgpack")
    res = result(20)
    payload = codec.encode(res)
    far = transport.send(payload, res.query)
    assert far.prompt == build_prompt(res, **PROMPT_PARAMS)[0]
    # the transport's own exchange was HTTP/2: body plus 9-byte DATA frame headers
    frames = -(-len(payload) // 16384)
    h2_sent = len(payload) + 9 * frames
    assert far.wire_bytes_sent == (tls.record_bytes(h2_sent) if secure else h2_sent)


def test_asgi_without_http2_stays_http11(made: list[Any]) -> None:
    import httpx

    transport = start(made, "asgi", tls=True)
    with httpx.Client(**transport.client_settings(), trust_env=False) as client:
        resp = client.get("/health")
        assert resp.http_version == "HTTP/1.1"
        ssl_object = resp.extensions["network_stream"].get_extra_info("ssl_object")
        assert ssl_object.version() == "TLSv1.3"


# ----------------------------------------------------------------- gRPC settings


def wire_bytes_through_proxy(
    transport: Any, payload: bytes, query: str, n: int = 3
) -> tuple[int, int]:
    """Bytes up and down for ``n`` sends over a new connection through a counting proxy."""
    proxy = CountingProxy(transport.port)
    real = transport.port
    transport.port = proxy.port
    try:

        def work() -> tuple[int, int]:
            transport.connect()
            before = proxy.counts()
            for _ in range(n):
                transport.send(payload, query)
            after = proxy.counts()
            return after[0] - before[0], after[1] - before[1]

        return in_thread(work)  # type: ignore[no-any-return]
    finally:
        transport.port = real
        proxy.close()


def test_grpc_gzip_compresses_on_the_wire(made: list[Any]) -> None:
    plain = start(made, "grpc", compression="none")
    gzip = start(made, "grpc", compression="gzip")
    codec = rb.codecs.create("msgpack")
    res = result(10, words=200)  # repetitive text: compresses well
    payload = codec.encode(res)
    up_plain, down_plain = wire_bytes_through_proxy(plain, payload, res.query)
    up_gzip, down_gzip = wire_bytes_through_proxy(gzip, payload, res.query)
    assert up_plain > 3 * len(payload)  # three calls' payloads crossed uncompressed
    assert up_gzip < up_plain / 3  # the requests were compressed
    assert down_gzip < down_plain / 3  # and so were the server's replies
    # the far side decoded the same payload either way
    assert gzip.send(payload, res.query).prompt == plain.send(payload, res.query).prompt


def test_grpc_deflate_and_settings_round_trip(made: list[Any]) -> None:
    transport = start(
        made,
        "grpc",
        compression="deflate",
        initial_window_bytes=1 << 20,
        bdp_probe=False,
        keepalive_ms=10_000,
        max_message_bytes=4 << 20,
        tls=True,
    )
    info = transport.describe()
    assert info["compression"] == "deflate" and info["initial_window_bytes"] == 1 << 20
    assert ("grpc.http2.lookahead_bytes", 1 << 20) in transport._options()
    assert ("grpc.http2.bdp_probe", 0) in transport._options()
    res = result(50, words=100)
    far = transport.send(rb.codecs.create("msgpack").encode(res), res.query)
    assert far.prompt == build_prompt(res, **PROMPT_PARAMS)[0]


def test_grpc_message_size_limit_is_a_clear_error_not_a_hang(made: list[Any]) -> None:
    transport = start(made, "grpc", max_message_bytes=2048, timeout=20.0)
    codec = rb.codecs.create("msgpack")
    small = result(1, words=5)
    assert transport.send(codec.encode(small), small.query).prompt
    big = result(20, words=100)
    payload = codec.encode(big)
    assert len(payload) > 2048
    t0 = time.monotonic()
    with pytest.raises(DecodeError, match="max_message_bytes = 2048"):
        transport.send(payload, big.query)
    assert time.monotonic() - t0 < 10  # refused at once, long before the call's deadline
    assert transport.alive
    assert transport.send(codec.encode(small), small.query).prompt  # still usable


@pytest.mark.parametrize("keep_alive", [True, False])
def test_grpc_streamed_reply_equals_unary(made: list[Any], keep_alive: bool) -> None:
    unary = start(made, "grpc", keep_alive=keep_alive)
    stream = start(made, "grpc", reply="stream", stream_chunk_bytes=256, keep_alive=keep_alive)
    codec = rb.codecs.create("msgpack")
    for n in (0, 1, 12):
        res = result(n, tag=str(n))
        payload = codec.encode(res)
        a = unary.send(payload, res.query)
        b = stream.send(payload, res.query)
        assert b.prompt == a.prompt == build_prompt(res, **PROMPT_PARAMS)[0]
        assert b.prompt_tokens == a.prompt_tokens
        reply = a.wire_bytes_received - 14  # one message: 5-byte prefix + 9-byte frame header
        messages = -(-reply // 256)
        assert b.wire_bytes_received == reply + 14 * messages


@pytest.mark.parametrize(
    ("kind", "params", "named"),
    [
        ("grpc", {"compression": "zstd"}, "none, gzip, deflate"),
        ("grpc", {"reply": "bidi"}, "unary, stream"),
        ("grpc", {"max_message_bytes": 0}, "max_message_bytes"),
        ("grpc", {"initial_window_bytes": "64k"}, "initial_window_bytes"),
        ("grpc", {"window": 1}, "initial_window_bytes"),
        ("http", {"tls": "yes"}, "tls"),
        ("http", {"http2": True}, "keep_alive"),
        ("asgi", {"http2": 1}, "http2"),
        ("asgi", {"keep_alive": None}, "keep_alive"),
    ],
)
def test_bad_settings_name_the_valid_ones(kind: str, params: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        rb.transports.create(kind, **params)


def test_cli_bad_setting_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "compare",
            "--dataset",
            "synthetic",
            "--n",
            "300",
            "--embed",
            "hashing",
            "--index",
            "flat",
            "--transport",
            "http,grpc+compression=brotli",
            "--queries",
            "3",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "compression 'brotli'" in err and "gzip" in err


# ----------------------------------------------------------------- host, TLS failures, limits


def _run_config(tmp_path: Path, transport: str) -> Path:
    """A small pipeline config (hashing vectors, flat index) with ``transport`` as its table body."""
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        '[dataset]\nname = "synthetic"\nn = 300\ndim = 16\nn_queries = 10\n'
        '[embed]\nbackend = "hashing"\n[run]\nqueries = 3\nwarmup = 1\n'
        f"[transport]\n{transport}\n"
    )
    return cfg


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of a ``ragbench`` command that must exit 2."""
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("kind", REMOTE)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "far.example"])
def test_a_host_other_than_loopback_needs_allow_remote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, host: str
) -> None:
    cfg = _run_config(tmp_path, f'backend = "{kind}"\nhost = "{host}"')
    line = _cli_error(capsys, "run", "-c", str(cfg))
    assert f"host = {host!r} is not a loopback address" in line and "allow_remote = true" in line
    if host in ("0.0.0.0", "::"):
        assert "on every interface" in line
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        rb.transports.create(kind, host=loopback)  # accepted without the opt-in
    with pytest.raises(ConfigError, match="allow_remote must be"):
        rb.transports.create(kind, host=host, allow_remote="yes")


def test_allow_remote_lets_the_far_side_listen_on_every_interface(made: list[Any]) -> None:
    psutil = pytest.importorskip("psutil")
    transport = start(made, "http", host="0.0.0.0", allow_remote=True)
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(transport.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("0.0.0.0", transport.port)}
    res = result()
    assert transport.send(rb.codecs.create("msgpack").encode(res), res.query).prompt


@pytest.mark.parametrize("kind", REMOTE)
def test_a_certificate_the_near_side_refuses_is_a_transport_error_naming_tls(
    made: list[Any], kind: str
) -> None:
    # the certificate made at start is for 127.0.0.1, ::1 and localhost; 127.0.0.2 is loopback too
    transport = rb.transports.create(kind, host="127.0.0.2", tls=True)
    made.append(transport)
    with pytest.raises(TransportError) as err:
        transport.start("msgpack", {}, dict(PROMPT_PARAMS))
    text = str(err.value)
    assert f"{kind} transport to 127.0.0.2:" in text
    assert "TLS certificate check failed" in text
    assert "certificate is not valid for '127.0.0.2'" in text  # the problem, from the check
    assert transport.pid is None and transport.certificate is None  # nothing left behind


@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("kind", REMOTE)
def test_a_later_connection_refusing_the_certificate_names_tls(
    made: list[Any], kind: str, keep_alive: bool
) -> None:
    transport = start(made, kind, tls=True, keep_alive=keep_alive, timeout=5.0)
    transport.startup_timeout = 5.0  # how long a gRPC channel is waited for
    codec = rb.codecs.create("msgpack")
    res = result()
    payload = codec.encode(res)
    transport.send(payload, res.query)
    mine, other = transport.certificate, tls.make_certificate()
    try:
        transport.certificate = other  # the far side shows a certificate no longer trusted
        transport.__dict__.pop("_ssl", None)
        with pytest.raises(TransportError) as err:
            in_thread(lambda: transport.send(payload, res.query))
        assert "TLS certificate check failed" in str(err.value)
    finally:
        transport.certificate = mine
        other.remove()


@pytest.mark.parametrize("kind", REMOTE)
def test_an_async_connection_refusing_the_certificate_names_tls(made: list[Any], kind: str) -> None:
    # what load --worker-kind asyncio sends with: it said only "could not connect within 5 s"
    # (grpc.aio) or "request failed: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] ..." (httpx)
    transport = start(made, kind, tls=True, timeout=5.0)
    transport.startup_timeout = 0.5  # how long a grpc.aio channel is waited for
    res = result()
    payload = rb.codecs.create("msgpack").encode(res)
    mine, other = transport.certificate, tls.make_certificate()

    async def send_and_close() -> None:
        try:
            await transport.asend(payload, res.query)
        finally:
            await transport.aclose()

    try:
        transport.certificate = other  # the far side shows a certificate no longer trusted
        with pytest.raises(TransportError) as err:
            asyncio.run(send_and_close())
        text = str(err.value)
        assert (
            f"{kind} transport to 127.0.0.1:{transport.port}: TLS certificate check failed" in text
        )
        assert "self-signed certificate" in text  # the check's own reason
    finally:
        transport.certificate = mine
        other.remove()


def test_a_tls_failure_from_the_cli_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _run_config(tmp_path, 'backend = "grpc"\nhost = "127.0.0.2"\ntls = true')
    line = _cli_error(capsys, "run", "-c", str(cfg))
    assert "grpc transport to 127.0.0.2" in line and "TLS certificate check failed" in line


@pytest.mark.parametrize(
    "setting", ["max_message_bytes", "initial_window_bytes", "keepalive_ms", "stream_chunk_bytes"]
)
def test_grpc_settings_over_grpcs_int_limit_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str
) -> None:
    cfg = _run_config(tmp_path, f'backend = "grpc"\n{setting} = {2**63 - 1}')
    line = _cli_error(capsys, "run", "-c", str(cfg))
    assert f"grpc transport: {setting} must be in" in line and str(2**31 - 1) in line
    rb.transports.create("grpc", **{setting: 2**31 - 1})  # gRPC's own limit is fine


# ----------------------------------------------------------------- pipelines and compare


def test_pipeline_records_the_connection_split(tmp_path: Path) -> None:
    cfg = {
        "dataset": {"name": "synthetic", "n": 400, "dim": 16, "n_queries": 20, "seed": 1},
        "run": {"queries": 12, "warmup": 2, "k": 5},
        "embed": {"backend": "hashing"},
        "retrieve": {"backend": "flat"},
        "serialize": {"backend": "msgpack"},
        "transport": {"backend": "http", "tls": True, "keep_alive": False},
        "generate": {"backend": "none"},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        report = pipe.run()
        pid = pipe.transport.pid
        cert_dir = pipe.transport.certificate.directory
    assert gone(pid) and not os.path.exists(cert_dir)
    rec = report.to_record()
    assert list(rec["connection"]) == ["connect", "tls", "first_byte"]
    transport = report.samples_ns[:, report.stage_names.index("transport")]
    tls_ns = report.connection_ns["tls"]
    assert len(tls_ns) == report.requests and (tls_ns > 0).all()
    # the transport column has the far side's work taken out; the handshake stays in it
    assert (report.connection_ns["connect"] + tls_ns < transport).all()
    assert rec["info"]["transport_info"]["tls"] is True
    assert "new connection per request" in report.table()
    again = rb.Report.from_record(json.loads(json.dumps(rec)))
    assert again.to_record()["connection"] == rec["connection"]


def test_compare_payload_axis_and_transport_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp.jsonl"
    code = main(
        [
            "compare",
            "--dataset",
            "synthetic",
            "--n",
            "1500",
            "--dim",
            "16",
            "--embed",
            "hashing",
            "--index",
            "flat",
            "--codec",
            "msgpack",
            "--transport",
            "http,grpc+compression=gzip",
            "--payload-k",
            "10,100",
            "--payload-embeddings",
            "without,with",
            "--queries",
            "4",
            "--warmup",
            "1",
            "--out",
            str(out),
        ]
    )
    capsys.readouterr()
    assert code == 0
    recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    runs = {r["label"]: r for r in recs if r.get("schema", "").startswith("ragbench.run")}
    assert len(runs) == 8
    small = runs["grpc+compression=gzip/k=10/without embeddings"]
    large = runs["grpc+compression=gzip/k=100/with embeddings"]
    assert small["config"]["transport"] == {"backend": "grpc", "compression": "gzip"}
    assert large["config"]["run"]["k"] == 100 and large["config"]["run"]["k_candidates"] >= 100
    assert large["config"]["serialize"]["with_embeddings"] is True
    assert large["payload_bytes_p50"] > 5 * small["payload_bytes_p50"]
    assert (
        runs["http/k=10/with embeddings"]["payload_bytes_p50"]
        > runs["http/k=10/without embeddings"]["payload_bytes_p50"]
    )


def test_payload_plot_panel_draws_one_line_per_transport_setting() -> None:
    from ragbench.results.plots import figure, pyplot, transport_setting, varies_payload

    def run(transport: dict[str, Any], k: int, emb: bool, nbytes: int, us: float) -> dict[str, Any]:
        return {
            "schema": "ragbench.run/1",
            "kind": "run",
            "label": f"{transport['backend']}/k={k}",
            "config": {
                "run": {"k": k},
                "serialize": {"with_embeddings": emb},
                "transport": transport,
            },
            "stages": ["serialize", "transport"],
            "summary": {"serialize": {"p50_us": 5.0}, "transport": {"p50_us": us}},
            "requests": 3,
            "payload_bytes_p50": nbytes,
        }

    plain, gzip = {"backend": "grpc"}, {"backend": "grpc", "compression": "gzip"}
    recs = [
        run(plain, 10, False, 2_000, 300.0),
        run(plain, 100, True, 200_000, 900.0),
        run(gzip, 10, False, 2_000, 350.0),
        run(gzip, 100, True, 200_000, 1500.0),
    ]
    assert transport_setting(recs[2]) == "grpc compression=gzip"
    assert varies_payload(recs) and not varies_payload(recs[:1])
    fig = figure(recs)
    try:
        panels = [ax for ax in fig.axes if ax.get_title().startswith("transport time as")]
        assert len(panels) == 1
        lines = panels[0].get_lines()
        named = {ln.get_label(): ln for ln in lines if not ln.get_label().startswith("_")}
        assert set(named) == {"grpc", "grpc compression=gzip", "(dashed: with embeddings)"}
        # solid: without embeddings; dashed: with them, in the same colour as its setting
        assert list(named["grpc compression=gzip"].get_ydata()) == [350.0]
        dashed = [ln for ln in lines if ln.get_linestyle() == "--" and len(ln.get_ydata())]
        assert sorted(float(ln.get_ydata()[0]) for ln in dashed) == [900.0, 1500.0]
        gzip_dashed = next(ln for ln in dashed if float(ln.get_ydata()[0]) == 1500.0)
        assert gzip_dashed.get_color() == named["grpc compression=gzip"].get_color()
    finally:
        pyplot().close(fig)


def test_missing_tls_and_http2_libraries_name_their_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragbench.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[tls\]"):
        tls.make_certificate()
    transport = rb.transports.create("http", tls=True)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[tls\]"):
        transport.start("msgpack", {}, dict(PROMPT_PARAMS))
    assert transport.pid is None  # nothing was started
    monkeypatch.setitem(sys.modules, "hypercorn", None)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[serve\]"):
        rb.transports.create("asgi", http2=True)
