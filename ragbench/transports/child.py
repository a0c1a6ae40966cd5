"""The near side of every transport whose far side runs in a child process.

:class:`ChildTransport` is the base of the built-in ``http``, ``asgi`` and
``grpc`` transports, and the one to subclass for a transport of your own
(a protocol, a client library, a server program): it starts the far side as a
:class:`ragbench.process.ChildProcess`, checks the codec and prompt
parameters first, keeps one connection per calling thread, notices a dead far
side, and closes everything in :meth:`ChildTransport.close`.

A subclass sets ``name`` and ``kind`` (which of ragbench's servers to run:
``"http"``, ``"asgi"`` or ``"grpc"``, or its own program through
:meth:`ChildTransport.child_command`), says how to open and close one
connection (:meth:`ChildTransport.open_connection`,
:meth:`ChildTransport.close_connection`), and implements ``send(payload,
query) -> FarSide``: :meth:`ChildTransport.check_usable` first, the calling
thread's connection from :attr:`ChildTransport.thread_connections`
(``.current()``, or :meth:`ChildTransport.attach` to open it), and
:meth:`ChildTransport.failed` to turn a failure into the
:class:`~ragbench.errors.TransportError` that names the far side's state.
See the how-to "Writing a backend".
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import sys
import time
from typing import Any

from ..errors import ConfigError, NotBuiltError, TransportError
from ..process import ChildProcess
from ..threads import ThreadConnections
from ..validate import positive_number
from ._far_side_servers import DEFAULT_MAX_BODY, codec_spec, cpu_time_flag

__all__ = ["COMMON_PARAMS", "ChildTransport", "check_loopback", "is_loopback"]

#: The parameters every child transport takes.
COMMON_PARAMS = frozenset(
    {"host", "timeout", "startup_timeout", "tls", "keep_alive", "allow_remote"}
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback IP (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_loopback(owner: str, host: str, opt_in: str = "set allow_remote = true") -> None:
    """:class:`ConfigError` unless ``host`` is loopback (the far side has no authentication).

    ``opt_in`` says how the user lets it be another address (a setting, a flag)."""
    if is_loopback(host):
        return
    try:
        every = ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        every = False
    where = "on every interface" if every else "where the network reaches it"
    raise ConfigError(
        f"{owner}: host = {host!r} is not a loopback address: the far side would listen "
        f"{where} and serve anyone, with no authentication; use 127.0.0.1, ::1 or localhost, "
        f"or {opt_in} to mean it"
    )


def tls_problem(error: BaseException) -> str | None:
    """What a TLS failure was, in words naming TLS (``None`` when ``error`` is no TLS error).

    The ``ssl`` error may be the cause of another (httpx's ``ConnectError``).
    """
    exc: BaseException | None = error
    for _ in range(8):  # the chain of causes, bounded
        if exc is None or isinstance(exc, ssl.SSLError):
            break
        exc = exc.__cause__ or exc.__context__
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or str(exc)
        return (
            f"TLS certificate check failed: {why} (the near side trusts only the certificate "
            "made at start, valid for 127.0.0.1, ::1 and localhost)"
        )
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    return None


class ChildTransport:
    """Shared near-side life cycle of the ``http`` and ``grpc`` transports.

    Parameters (keyword only; unknown ones raise :class:`ConfigError`):
    ``host`` the far side binds and the near side dials (default
    ``"127.0.0.1"``; a loopback address or ``localhost`` unless
    ``allow_remote = true``: the far side serves anyone who reaches it, with
    no authentication, so ``"0.0.0.0"`` or a network address is refused
    without that opt-in), ``timeout`` seconds one request may take before it
    fails with :class:`TransportError` (default 30), ``startup_timeout``
    seconds the child may take to report ready (default 30).

    With ``tls = true``, :meth:`start` shakes hands with the far side once
    before anything else; a certificate the near side does not accept (the
    one made at start is valid for 127.0.0.1, ::1 and localhost only) is a
    :class:`TransportError` naming TLS and the certificate problem, at once.

    Threads: one started transport may be shared by many threads. Each
    calling thread gets its own connection, opened on its first
    :meth:`send` (or ahead of time, outside any clock, by :meth:`connect`)
    and kept for its later requests; no lock is held across a request, so
    the threads' requests overlap on the wire and on the far side, which
    serves every connection in a thread of its own. A failed request closes
    only its thread's connection. The connection of a thread that has ended
    is closed when another thread next opens one; :meth:`close` closes every
    thread's connection (:attr:`connections` counts the open ones).

    ``alive`` says whether the far side still runs; after it died, every
    ``send`` raises :class:`TransportError` at once.
    """

    name = ""
    kind = ""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        startup_timeout: float = 30.0,
        tls: bool = False,
        keep_alive: bool = True,
        allow_remote: bool = False,
        **unknown: Any,
    ) -> None:
        from .._registry import check_params
        from ..validate import bool_param

        check_params(f"{self.name} transport", unknown, COMMON_PARAMS)
        if not isinstance(host, str) or not host:
            raise ConfigError(f"{self.name} transport: host must be a non-empty string")
        owner = f"{self.name} transport"
        #: whether ``host`` may be other than loopback (the far side then serves the network)
        self.allow_remote = bool_param(owner, "allow_remote", allow_remote)
        if not self.allow_remote:
            check_loopback(owner, host)
        self.host = host
        self.timeout = positive_number(owner, "timeout", timeout)
        self.startup_timeout = positive_number(owner, "startup_timeout", startup_timeout)
        #: TLS 1.3 with a certificate made at start (:mod:`ragbench.transports.tls`)
        self.tls = bool_param(owner, "tls", tls)
        #: False: a new connection (and TLS handshake) inside every request
        self.keep_alive = bool_param(owner, "keep_alive", keep_alive)
        self.certificate: Any = None  # tls.Certificate while started with tls
        self.port = 0
        self.content_type = "application/octet-stream"
        self.codec_name = ""
        self.cpu_time = False
        self._child: ChildProcess | None = None
        self._dead: str | None = None
        # Every open connection, with the thread that owns it; its lock is
        # only taken to open or close connections, never across a request.
        self.thread_connections: ThreadConnections[Any] = ThreadConnections()

    @property
    def pid(self) -> int | None:
        """Process id of the far side's server, or ``None`` before start / after close."""
        return None if self._child is None else self._child.pid

    @property
    def alive(self) -> bool:
        """True while the far side's process runs and has not failed a request fatally."""
        return self._child is not None and self._dead is None and self._child.alive

    @property
    def connections(self) -> int:
        """How many connections to the far side are open now (at most one per thread)."""
        return len(self.thread_connections)

    def start(
        self,
        codec_name: str,
        codec_params: dict[str, Any],
        prompt_params: dict[str, Any],
        *,
        cpu_time: bool = False,
    ) -> int:
        """Start the far side's server process; return the nanoseconds until it was ready.

        The codec and the prompt parameters are checked here first, so a
        configuration mistake is a :class:`ConfigError` from this process,
        not a dead child. With ``cpu_time=True`` the far side also reports
        its thread CPU time for decode and prompt building
        (``FarSide.decode_cpu_ns``/``prompt_cpu_ns``; 0 otherwise). The
        calling thread's connection is opened here, inside the time returned.
        """
        from ..prompt import PromptBuilder

        if self._child is not None:
            raise ConfigError(f"{self.name} transport: already started; close() it first")
        t0 = time.perf_counter_ns()
        cpu_time = cpu_time_flag(f"{self.name} transport", cpu_time)
        spec, codec = codec_spec(codec_name, codec_params)
        if not isinstance(prompt_params, dict):
            raise ConfigError(f"{self.name} transport: prompt parameters must be a dict")
        PromptBuilder(**prompt_params)
        try:
            json.dumps(prompt_params)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.name} transport: prompt parameters must be JSON-able"
            ) from None
        self.content_type = str(getattr(codec, "content_type", "application/octet-stream"))
        self.codec_name = codec_name
        self.cpu_time = cpu_time
        limit = getattr(codec, "max_payload_bytes", None)
        max_body = limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_BODY
        config = {
            "codec": spec,
            "prompt": prompt_params,
            "host": self.host,
            "max_body": max_body,
            "cpu_time": cpu_time,
            **self.server_config(),
        }
        if self.tls:
            from .tls import make_certificate

            cert = self.certificate = make_certificate()
            config["tls"] = {"cert": cert.cert_path, "key": cert.key_path}
        child = ChildProcess(
            self.child_command(),
            f"{self.name} transport",
            config,
            error=TransportError,
        )
        try:
            line = child.wait_ready(self.startup_timeout)
            word, _, port = line.partition(" ")
            if word != "READY" or not port.isdigit():
                raise TransportError(f"{self.name} transport: unexpected ready line {line!r}")
            self.port = int(port)
            self._child = child
            self._dead = None
            self._adopt(self._first_connection())
        except BaseException:
            self._child = None
            self.disconnect_all()
            child.stop(grace=0.0)
            self._remove_certificate()
            raise
        return time.perf_counter_ns() - t0

    def _first_connection(self) -> Any:
        """The starting thread's connection, TLS checked first; failures as TransportError."""
        if self.tls:
            self._check_tls()
        try:
            return self.open_connection()
        except OSError as exc:
            raise TransportError(
                f"{self.name} transport to {self.host}:{self.port}: "
                f"{tls_problem(exc) or f'cannot connect: {exc}'}"
            ) from None

    def _check_tls(self) -> None:
        """Raise :class:`TransportError` naming TLS when the far side's certificate is refused.

        gRPC's channel only says it could not connect (after ``startup_timeout``),
        so a handshake is made here, by ``ssl``, to name a certificate problem.
        """
        problem = self.tls_refusal()
        if problem is not None:
            raise TransportError(f"{self.name} transport to {self.host}:{self.port}: {problem}")

    def tls_refusal(self) -> str | None:
        """Shake hands with the far side once, trusting the certificate made at start.

        Returns what went wrong with TLS in words naming it, or ``None`` when
        the handshake succeeds or fails for another reason (a refused
        connection: the caller's own connection attempt reports that).
        """
        from .tls import client_context

        ctx = client_context(self.certificate.cert_pem, ("h2", "http/1.1"))
        try:
            with (
                socket.create_connection((self.host, self.port), timeout=self.timeout) as raw,
                ctx.wrap_socket(raw, server_hostname=self.host),
            ):
                return None
        except OSError as exc:
            return tls_problem(exc)

    def _remove_certificate(self) -> None:
        cert, self.certificate = self.certificate, None
        if cert is not None:
            cert.remove()

    def connect(self) -> None:
        """Open the calling thread's connection now if it has none (outside any clock).

        :meth:`send` opens it on the thread's first request otherwise, and
        that request's time then includes the connection set-up.
        """
        self.check_usable()
        if self.thread_connections.current() is None:
            self.attach("(connect)")

    def child_command(self) -> list[str]:
        """The far side's command line: ragbench's own servers, by :attr:`kind`.

        A third-party transport whose server is its own program returns that
        program's argv here; it reads the JSON configuration line from stdin
        (:func:`ragbench.transports.read_child_config`), prints ``READY <port>``
        and serves replies made by :class:`ragbench.transports.FarSideProcessor`
        until stdin closes.
        """
        return [sys.executable, "-m", "ragbench.transports._far_side_servers", self.kind]

    def server_config(self) -> dict[str, Any]:
        """Extra entries of the far side's configuration line (a subclass's server settings)."""
        return {}

    # -- connections: subclasses say how to open and close one

    def open_connection(self) -> Any:
        """A new connection to the far side (raises OSError or TransportError)."""
        raise NotImplementedError

    def close_connection(self, conn: Any) -> None:
        raise NotImplementedError

    def _adopt(self, conn: Any) -> Any:
        """Make ``conn`` the calling thread's connection; close those of ended threads."""
        stale = self.thread_connections.register_if(conn, lambda: self._child is not None)
        if stale is None:  # closed while it was being opened
            self.close_connection(conn)
            raise NotBuiltError(f"{self.name} transport: closed while connecting")
        for c in stale:
            self.close_connection(c)
        return conn

    def attach(self, query: str) -> Any:
        """Open the calling thread's connection (the slow path of a thread's first send)."""
        try:
            conn = self.open_connection()
        except OSError as exc:
            raise self.failed(tls_problem(exc) or f"cannot connect: {exc}", query) from None
        except TransportError as exc:
            raise self.failed(str(exc), query) from None
        return self._adopt(conn)

    def disconnect(self) -> None:
        """Close the calling thread's connection, if it has one."""
        conn = self.thread_connections.drop_current()
        if conn is not None:
            self.close_connection(conn)

    def disconnect_all(self) -> None:
        """Close every thread's connection."""
        for conn in self.thread_connections.take_all():
            self.close_connection(conn)

    def check_usable(self) -> ChildProcess:
        child = self._child
        if child is None:
            raise NotBuiltError(f"{self.name} transport: call start() before send()")
        if self._dead is not None:
            raise TransportError(f"{self.name} transport: the far side is dead: {self._dead}")
        if not child.alive:
            self._dead = child.death_note(0.0)
            self.disconnect()
            raise TransportError(f"{self.name} transport: the far side is dead: {self._dead}")
        return child

    def failed(self, problem: str, query: str) -> TransportError:
        """Build the error for a failed request; mark the far side dead if its process is gone."""
        self.disconnect()
        child = self._child
        note = child.death_note(0.5) if child is not None else "not started"
        if child is not None and not child.alive:
            self._dead = note
        return TransportError(
            f"{self.name} transport to {self.host}:{self.port}: {problem} "
            f"(query {query[:60]!r}); {note}"
        )

    def close(self) -> None:
        """Close every thread's connection and stop the far side's process (idempotent)."""
        child, self._child = self._child, None
        self.disconnect_all()
        if child is not None:
            child.stop()
        self._remove_certificate()

    def __enter__(self) -> ChildTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
