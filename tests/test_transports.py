"""Transports end to end: inproc, and http/grpc servers in real child processes on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

import ragbench as rb
from ragbench.errors import (
    ConfigError,
    DecodeError,
    MissingDependencyError,
    NotBuiltError,
    TransportError,
    UnknownBackendError,
)
from ragbench.prompt import build_prompt
from ragbench.transports import FarSide

PROMPT_PARAMS = {"max_tokens": 700}
REMOTE = ["http", "grpc"]


# ----------------------------------------------------------------- a codec of the test's own


class TinyJsonCodec:
    """A deliberately simple codec, so the transports are tested independently of ragbench's."""

    name = "test-json"
    content_type = "application/x-test-json"
    max_payload_bytes = 1 << 20

    def encode(self, result: rb.RetrievalResult) -> bytes:
        hits = [[h.doc_id, h.score, h.text, h.metadata] for h in result.hits]
        return json.dumps([result.query_id, result.query, hits]).encode()

    def decode(self, payload: bytes) -> rb.RetrievalResult:
        try:
            query_id, query, hits = json.loads(payload)
            return rb.RetrievalResult(query_id, query, [rb.Hit(*h) for h in hits])
        except (ValueError, TypeError) as exc:
            raise DecodeError(self.name, str(exc)) from None


def make_test_codec() -> TinyJsonCodec:
    return TinyJsonCodec()


def make_codec_that_fails_in_the_child() -> TinyJsonCodec:
    if os.environ.get("RAGBENCH_TEST_FAIL_CHILD_OF") == str(os.getppid()):
        raise RuntimeError("boom in the far side's process")
    return TinyJsonCodec()


CODECS = ["test-json", *[n for n in rb.codecs.names() if not n.startswith("test-")]]


@pytest.fixture(autouse=True, scope="module")
def _test_codecs() -> Iterator[None]:
    """Register this file's codecs for its tests only, so other files never list them."""
    rb.codecs.register("test-json", make_test_codec)
    try:
        yield
    finally:
        for name in [n for n in rb.codecs.names() if n.startswith("test-")]:
            if name in rb.codecs.registry:
                rb.codecs.registry.unregister(name)


def results(n: int = 6) -> list[rb.RetrievalResult]:
    out = []
    for q in range(n):
        hits = [
            rb.Hit(
                doc_id=f"d{q}-{i}",
                score=1.0 - i / 10,
                text=f"chunk {i} of query {q}: "
                + "naïve retrieval ünïcode text 检索 " * (5 + 7 * i),
                metadata={"src": f"file{i}.txt", "line": str(i)},
            )
            for i in range(q % 4 + 3)
        ]
        out.append(rb.RetrievalResult(query_id=f"q{q}", query=f"question number {q}?", hits=hits))
    return out


def gone(pid: int) -> bool:
    """True once ``pid`` is not a live process (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, limit: float = 15.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


# 127.0.0.1 as /proc/net shows it: plain IPv4, or IPv4-mapped IPv6 (::ffff:127.0.0.1).
LOOPBACK_V4 = {"0100007F", "0000000000000000FFFF00000100007F"}


def listening_addresses(port: int) -> set[str]:
    """IPv4/IPv6 addresses with a socket in LISTEN state on ``port`` (from /proc/net)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                found.add(addr)
    return found


@pytest.fixture
def started() -> Iterator[list]:
    """Transports created by a test; each is closed afterwards whatever happened."""
    made: list = []
    try:
        yield made
    finally:
        for transport in made:
            transport.close()


def start(made: list, kind: str, codec: str = "test-json", **params) -> object:
    transport = rb.transports.create(kind, **params)
    made.append(transport)
    ns = transport.start(codec, {}, dict(PROMPT_PARAMS))
    assert isinstance(ns, int) and ns > 0
    return transport


# ----------------------------------------------------------------- inproc


@pytest.mark.parametrize("codec_name", CODECS)
def test_inproc_builds_the_same_prompt_as_build_prompt(codec_name: str) -> None:
    codec = rb.codecs.create(codec_name)
    transport = rb.transports.create("inproc")
    try:
        transport.start(codec_name, {}, dict(PROMPT_PARAMS))
        for result in results():
            payload = codec.encode(result)
            far = transport.send(payload, result.query)
            assert isinstance(far, FarSide)
            assert (far.prompt, far.prompt_tokens) == build_prompt(result, **PROMPT_PARAMS)
            assert far.decode_ns > 0 and far.prompt_ns > 0
            assert far.wire_bytes_sent == len(payload)
            assert far.wire_bytes_received == 0
    finally:
        transport.close()


def test_inproc_rejects_a_bad_payload_and_unknown_params() -> None:
    transport = rb.transports.create("inproc")
    with pytest.raises(NotBuiltError):
        transport.send(b"{}", "q")
    transport.start("test-json", {}, {})
    with pytest.raises(DecodeError):
        transport.send(b"\x00not json", "q")
    transport.close()
    with pytest.raises(ConfigError, match="port"):
        rb.transports.create("inproc", port=1)


# ----------------------------------------------------------------- http / grpc


@pytest.mark.integration
@pytest.mark.parametrize("codec_name", CODECS)
@pytest.mark.parametrize("kind", REMOTE)
def test_far_side_prompt_equals_inproc(started: list, kind: str, codec_name: str) -> None:
    codec = rb.codecs.create(codec_name)
    near = rb.transports.create("inproc")
    near.start(codec_name, {}, dict(PROMPT_PARAMS))
    transport = start(started, kind, codec_name)
    assert transport.alive
    for result in results():
        payload = codec.encode(result)
        local = near.send(payload, result.query)
        far = transport.send(payload, result.query)
        assert far.prompt == local.prompt
        assert far.prompt_tokens == local.prompt_tokens
        assert far.decode_ns > 0 and far.prompt_ns > 0
        # Request framing and reply headers cross the wire too.
        assert far.wire_bytes_sent > len(payload)
        assert far.wire_bytes_received > len(far.prompt.encode())
    near.close()


@pytest.mark.integration
@pytest.mark.parametrize("kind", REMOTE)
def test_bad_payload_is_a_decode_error_from_the_far_side(started: list, kind: str) -> None:
    transport = start(started, kind)
    with pytest.raises(DecodeError) as info:
        transport.send(b"\xffdefinitely not json", "q-bad")
    assert isinstance(info.value, ValueError)
    assert info.value.codec == "test-json"
    assert "far side" in str(info.value)
    # The server survives a bad payload and keeps serving.
    result = results(1)[0]
    far = transport.send(TinyJsonCodec().encode(result), result.query)
    assert far.prompt == build_prompt(result, **PROMPT_PARAMS)[0]
    assert transport.alive


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["inproc", *REMOTE])
def test_prompt_budget_errors_are_config_errors_on_every_transport(
    started: list, kind: str
) -> None:
    transport = start(started, kind)
    result = rb.RetrievalResult("q-long", "why " * 2000, [])
    with pytest.raises(ConfigError, match="max_tokens"):
        transport.send(TinyJsonCodec().encode(result), result.query)
    if kind != "inproc":
        assert transport.alive


@pytest.mark.integration
@pytest.mark.parametrize("kind", REMOTE)
def test_oversized_payload_is_refused_by_the_far_side(started: list, kind: str) -> None:
    transport = start(started, kind)
    too_big = b"x" * (TinyJsonCodec.max_payload_bytes + 1)
    with pytest.raises(DecodeError, match="far side"):
        transport.send(too_big, "q-big")
    assert transport.alive
    result = results(1)[0]
    far = transport.send(TinyJsonCodec().encode(result), result.query)
    assert far.prompt == build_prompt(result, **PROMPT_PARAMS)[0]


@pytest.mark.integration
@pytest.mark.parametrize("kind", REMOTE)
def test_killed_server_fails_the_request_and_later_ones(started: list, kind: str) -> None:
    transport = start(started, kind, timeout=20.0)
    result = results(1)[0]
    payload = TinyJsonCodec().encode(result)
    transport.send(payload, result.query)
    pid = transport.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(TransportError) as info:
        transport.send(payload, result.query)
    message = str(info.value)
    # It failed because the server died, not because a timeout ran out.
    assert "no reply within" not in message and "DEADLINE" not in message
    assert not transport.alive
    with pytest.raises(TransportError, match="dead"):
        transport.send(payload, result.query)
    transport.close()
    assert wait_gone(pid)
    assert transport.pid is None


@pytest.mark.integration
@pytest.mark.parametrize("kind", REMOTE)
def test_servers_bind_loopback_and_close_leaves_no_child(started: list, kind: str) -> None:
    transport = start(started, kind)
    assert transport.host == "127.0.0.1"
    addresses = listening_addresses(transport.port)
    assert addresses and addresses <= LOOPBACK_V4
    pid = transport.pid
    assert not gone(pid)
    transport.close()
    assert gone(pid)
    transport.close()  # idempotent
    with pytest.raises(NotBuiltError):
        transport.send(b"{}", "q")


@pytest.mark.integration
def test_child_exits_when_its_parent_dies(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            import ragbench as rb
            t = rb.transports.create("http")
            t.start("json", {}, {})
            print(t.pid, flush=True)
            os.kill(os.getpid(), 9)  # die without closing anything
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    child_pid = int(proc.stdout.strip())
    assert wait_gone(child_pid)


@pytest.mark.integration
def test_child_that_fails_to_start_reports_its_stderr(
    started: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_TEST_FAIL_CHILD_OF", str(os.getpid()))
    rb.codecs.register("test-fails-in-child", make_codec_that_fails_in_the_child)
    transport = rb.transports.create("http")
    started.append(transport)
    with pytest.raises(TransportError, match="boom in the far side"):
        transport.start("test-fails-in-child", {}, {})
    assert transport.pid is None


@pytest.mark.integration
def test_start_up_timeout_is_a_transport_error(started: list) -> None:
    transport = rb.transports.create("http", startup_timeout=0.001)
    started.append(transport)
    with pytest.raises(TransportError, match="did not report ready"):
        transport.start("test-json", {}, {})
    assert transport.pid is None


def test_module_attr_string_reaches_the_child(started: list) -> None:
    target = f"{make_test_codec.__module__}:make_test_codec"
    transport = start(started, "http", target)
    result = results(1)[0]
    far = transport.send(TinyJsonCodec().encode(result), result.query)
    assert far.prompt == build_prompt(result, **PROMPT_PARAMS)[0]


def test_configuration_errors_come_before_any_process(started: list) -> None:
    rb.codecs.register("test-lambda", lambda: TinyJsonCodec())
    transport = rb.transports.create("http")
    started.append(transport)
    with pytest.raises(ConfigError, match="cannot be imported"):
        transport.start("test-lambda", {}, {})
    with pytest.raises(UnknownBackendError, match="json"):
        transport.start("no-such-codec", {}, {})
    with pytest.raises(ConfigError, match="max_tokenz"):
        transport.start("test-json", {}, {"max_tokenz": 3})
    assert transport.pid is None
    for bad in ({"timeout": 0}, {"host": ""}, {"colour": "red"}, {"startup_timeout": -1}):
        with pytest.raises(ConfigError):
            rb.transports.create("http", **bad)


def test_missing_grpc_is_a_missing_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragbench.transports.grpc_transport import GrpcTransport

    monkeypatch.setitem(sys.modules, "grpc", None)
    with pytest.raises(MissingDependencyError, match=r"ragbench\[grpc\]"):
        GrpcTransport()
