"""A transport of one's own on the public base, ``ragbench.transports.ChildTransport``.

The transport below lives outside the package, as a user's would: its far side is
its own server program (a length-prefixed protocol over TCP, written to a temp
folder), started through ``child_command`` and built from the public far-side
parts (``read_child_config``, ``make_codec``, ``FarSideProcessor``); its near side
is a plain socket per thread. It must give the prompt the in-process transport
gives, survive threads, report a killed far side as a ``TransportError`` and
leave no process behind.
"""

from __future__ import annotations

import socket
import struct
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.errors import NotBuiltError, TransportError
from ragbench.transports import ChildTransport, FarSide, decode_reply

SERVER = textwrap.dedent(
    """
    import socket, struct, sys, threading
    from ragbench.process import watch_stdin
    from ragbench.transports import FarSideProcessor, make_codec, read_child_config

    config = read_child_config()
    processor = FarSideProcessor(
        make_codec(config["codec"]), config["codec"]["name"], config.get("prompt", {})
    )
    server = socket.create_server((config["host"], 0))
    watch_stdin(server.close)

    def read(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError
            data += chunk
        return data

    def serve(conn):
        with conn:
            try:
                while True:
                    (size,) = struct.unpack("<I", read(conn, 4))
                    reply = processor.reply(read(conn, size))
                    conn.sendall(struct.pack("<I", len(reply)) + reply)
            except (ConnectionError, OSError):
                pass

    print(f"READY {server.getsockname()[1]}", flush=True)
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            break
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    """
)


class LengthPrefixed(ChildTransport):
    """Payloads framed by a 4-byte length, over a socket per thread, to its own server."""

    name = "length-prefixed"

    def __init__(self, server: str, **params: Any) -> None:
        super().__init__(**params)
        self.server = server

    def child_command(self) -> list[str]:
        return [sys.executable, self.server]

    def open_connection(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=self.timeout)

    def close_connection(self, conn: Any) -> None:
        conn.close()

    def send(self, payload: bytes, query: str) -> FarSide:
        self.check_usable()
        conn = self.thread_connections.current() or self.attach(query)
        try:
            conn.sendall(struct.pack("<I", len(payload)) + payload)
            (size,) = struct.unpack("<I", self._read(conn, 4))
            reply = self._read(conn, size)
        except OSError as exc:
            raise self.failed(f"request failed: {exc}", query) from None
        prompt, tokens, decode_ns, prompt_ns, _, _ = decode_reply(reply, self.name)
        return FarSide(prompt, tokens, decode_ns, prompt_ns, len(payload) + 4, size + 4)

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the far side closed the connection")
            data += chunk
        return data


@pytest.fixture
def server(tmp_path: Path) -> str:
    path = tmp_path / "length_prefixed_server.py"
    path.write_text(SERVER, encoding="utf-8")
    return str(path)


def _payload() -> tuple[bytes, str]:
    query = "which passage?"
    hits = [
        rb.Hit(doc_id=f"d{i}", score=1.0 - i / 10, text=f"passage {i}: " + "text " * (3 + i))
        for i in range(5)
    ]
    result = rb.RetrievalResult(query_id="q0", query=query, hits=hits)
    return rb.codecs.create("json").encode(result), query


def test_a_transport_of_ones_own_gives_the_inproc_prompt_from_many_threads(server: str) -> None:
    payload, query = _payload()
    inproc = rb.transports.create("inproc")
    inproc.start("json", {}, {})
    want = inproc.send(payload, query)
    inproc.close()

    transport = LengthPrefixed(server)
    transport.start("json", {}, {})
    try:
        pid = transport.pid
        assert pid is not None and transport.alive
        got: list[FarSide] = []

        def work() -> None:
            for _ in range(20):
                got.append(transport.send(payload, query))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 80
        assert {(f.prompt, f.prompt_tokens) for f in got} == {(want.prompt, want.prompt_tokens)}
        assert all(f.decode_ns > 0 for f in got)
        assert 1 <= transport.connections <= 5  # one per thread that sent (some may have ended)
    finally:
        transport.close()
    assert transport.pid is None and not transport.alive
    with pytest.raises(OSError):
        import os

        os.kill(pid, 0)  # the server process is gone


def test_a_killed_far_side_is_a_transport_error_and_close_is_clean(server: str) -> None:
    payload, query = _payload()
    transport = LengthPrefixed(server, timeout=5)
    transport.start("json", {}, {})
    try:
        transport.send(payload, query)
        import os
        import signal

        assert transport.pid is not None
        os.kill(transport.pid, signal.SIGKILL)
        with pytest.raises(TransportError, match="length-prefixed"):
            for _ in range(50):  # the first send may race the kill
                transport.send(payload, query)
        assert not transport.alive
    finally:
        transport.close()
    with pytest.raises(NotBuiltError):
        transport.send(payload, query)


def test_the_base_is_public_and_lazy() -> None:
    import subprocess

    code = (
        "import sys, ragbench.transports as t; assert 'ragbench.transports.child' not in sys.modules;"
        "from ragbench.transports import ChildTransport; print(ChildTransport.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ragbench.transports.child"
    with pytest.raises(AttributeError):
        rb.transports.NoSuchThing  # noqa: B018
