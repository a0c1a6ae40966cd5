"""Time every HTTP request of an ASGI service (Starlette, FastAPI) per stage.

:class:`TimingMiddleware` is plain ASGI (no framework import). For each
HTTP request it opens a :class:`ragbench.timing.StageTimer` request handle
around the app, so the endpoint -- ``async def`` or a plain ``def`` in the
thread pool, and any helper it calls, in threads that copy the context
(``asyncio.to_thread``, ``run_in_threadpool``) -- marks stages with
``timer.mark("embed")`` (or ``timer.current().mark(...)``). The middleware
then:

- takes the request's start when the server hands the request to it (its
  arrival here), and, when the timer has a ``queue`` stage, opens the handle
  with ``timer.request(queue="queue")``: the handler's first use of the
  handle (``timer.current()``, ``timer.annotate(...)``, ``r.begin()``) marks
  ``queue``, the time from arrival to the handler's start -- routing, and for
  a plain ``def`` endpoint the wait for a thread-pool thread -- so the first
  stage the handler marks times only its own work. What happens before the
  middleware is called (the kernel's accept queue, the server reading the
  request, the client waiting for a connection) is in no stage;

- adds a ``Server-Timing`` response header (W3C Server Timing) with the
  time of each stage marked, in milliseconds to the nanosecond
  (``embed;dur=12.345678, retrieve;dur=0.402113``). Headers go out with
  ``http.response.start``: a streaming response that marks stages while it
  streams its body sends only the stages marked before its first byte (the
  stored row, at the end of the request, has them all); stages not marked
  are left out;
- stores the request in the timer when the app returns (a request whose app
  raised is not stored, only counted in ``timer.failed``); the timer keeps
  the last ``window`` requests (its stage names are HTTP tokens, checked
  when it is made, so they go into the header as they are);
- hands the stored request, with the handle's ``annotate`` attributes plus
  ``http.request.method``, ``url.path`` and ``http.response.status_code``,
  to ``export``: a :class:`ragbench.timing.Background` whose thread feeds
  sinks such as ``TraceExporter.on_request`` (OpenTelemetry) and
  :meth:`StageHistogram.on_request` (Prometheus), so no export work runs
  in the request or before its response.

Other ASGI traffic (``lifespan``, ``websocket``) passes through untouched.

This module imports :mod:`ragbench.timing` and :mod:`ragbench.errors` only,
and ``prometheus_client`` when a :class:`StageHistogram` is made (``pip
install 'ragbench[serve]'``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from .errors import ConfigError, MissingDependencyError
from .timing import Background, Request, StageTimer

__all__ = ["QUEUE", "SERVER_TIMING", "StageHistogram", "TimingMiddleware", "server_timing"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The stage the middleware marks for the wait before the handler, if the timer has it.
QUEUE = "queue"
#: The response header's name, as ASGI sends it (lower-case bytes).
SERVER_TIMING = b"server-timing"
#: Histogram buckets in seconds: 10 µs to 10 s, three per decade.
DEFAULT_BUCKETS = tuple(m * 10.0**e for e in range(-5, 1) for m in (1.0, 2.5, 5.0)) + (10.0,)


def server_timing(durations: dict[str, int]) -> str:
    """The ``Server-Timing`` header value for stage times in ns: ``name;dur=<ms>`` joined by ``, ``.

    ``dur`` is milliseconds with six decimals, so it carries the nanoseconds
    exactly (``12345678`` ns -> ``dur=12.345678``). Stage names are used as
    the metric names, so they must be HTTP tokens (letters, digits, ``_-.``
    and the like; no spaces, commas or semicolons).
    """
    return ", ".join(
        f"{name};dur={ns // 1_000_000}.{ns % 1_000_000:06d}" for name, ns in durations.items()
    )


class TimingMiddleware:
    """ASGI middleware: one :meth:`StageTimer.request` per HTTP request, a ``Server-Timing`` header.

    ``timer``
        The service's :class:`~ragbench.timing.StageTimer`; endpoints mark
        its stages (``timer.mark("embed")``).
    ``export``
        Optional :class:`~ragbench.timing.Background` that gets every stored
        request (``names, stamps, attributes``) on its own thread; for
        example ``Background(trace_exporter.on_request, histogram.on_request)``.
        Close it at shutdown (it flushes).
    ``server_timing``
        Add the ``Server-Timing`` header (default true).
    ``queue``
        The stage that times the wait from the request's arrival here to the
        handler's first use of its handle (see the module docstring). The
        default, ``"queue"``, is marked when the timer has a stage of that
        name (list it first: ``StageTimer(["queue", "embed", ...])``); another
        name must be one of the timer's stages; ``None`` marks no such stage.

    With Starlette: ``Starlette(routes=..., middleware=[Middleware(TimingMiddleware, timer=timer)])``;
    with FastAPI: ``app.add_middleware(TimingMiddleware, timer=timer)``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        timer: StageTimer,
        export: Background | None = None,
        server_timing: bool = True,
        queue: str | None = QUEUE,
    ) -> None:
        if not isinstance(timer, StageTimer):
            raise ConfigError(f"TimingMiddleware needs timer=StageTimer(...), got {timer!r}")
        if queue is not None and queue not in timer.names:
            if queue != QUEUE:
                raise ConfigError(
                    f"TimingMiddleware queue={queue!r} is not one of the timer's stages "
                    f"({', '.join(timer.names)}): add it to the StageTimer, or pass queue=None"
                )
            queue = None  # the default, and the timer has no queue stage: nothing to mark
        if export is not None and not isinstance(export, Background):
            raise ConfigError(
                "TimingMiddleware export= must be a ragbench.timing.Background (its thread keeps "
                f"export work off the request path): wrap it, Background({export!r})"
            )
        self.app = app
        self.timer = timer
        self.export = export
        self.server_timing = bool(server_timing)
        self.queue = queue

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        handle = self.timer.request(self.queue)
        status: list[int] = []
        add_header = self.server_timing

        async def send_timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if add_header:
                    message = _with_header(message, handle)
            await send(message)

        with handle:
            await self.app(scope, receive, send_timed)
        if self.export is not None:
            self._export(handle, scope, status)

    def _export(self, handle: Request, scope: Scope, status: Sequence[int]) -> None:
        names, stamps = handle.stamps()
        if not names:  # nothing marked: not stored
            return
        attributes = {
            "http.request.method": scope.get("method", ""),
            "url.path": scope.get("path", ""),
        }
        if status:
            attributes["http.response.status_code"] = status[0]
        if handle.attributes:
            attributes.update(handle.attributes)
        assert self.export is not None
        self.export(names, stamps, attributes)


def _with_header(message: Message, handle: Request) -> Message:
    durations = handle.durations()
    if not durations:
        return message
    headers = list(message.get("headers", ()))
    headers.append((SERVER_TIMING, server_timing(durations).encode("latin-1")))
    return {**message, "headers": headers}


class StageHistogram:
    """A Prometheus histogram of stage times, one ``stage`` label value per stage.

    ``StageHistogram()`` registers ``ragbench_stage_seconds`` (``name``) in
    ``registry`` (default: prometheus_client's global registry, which the
    usual ``/metrics`` endpoint serves); its :meth:`on_request` is a
    ``StageTimer``/``Background`` sink that observes each stage a request
    ran, in seconds. Run it through :class:`~ragbench.timing.Background`
    in a service. Needs ``prometheus-client`` (``pip install 'ragbench[serve]'``).
    """

    def __init__(
        self,
        name: str = "ragbench_stage_seconds",
        *,
        documentation: str = "Time of each request stage, as ragbench's StageTimer measured it",
        registry: Any = None,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        try:
            import prometheus_client
        except ImportError:
            raise MissingDependencyError("prometheus-client", "serve") from None
        if registry is None:
            registry = prometheus_client.REGISTRY
        self.histogram = prometheus_client.Histogram(
            name, documentation, labelnames=("stage",), registry=registry, buckets=tuple(buckets)
        )
        self._children: dict[str, Any] = {}

    def on_request(
        self, names: Sequence[str], stamps: Sequence[int], attributes: Any = None
    ) -> None:
        """Observe stage ``names[j]`` as ``(stamps[j + 1] - stamps[j]) / 1e9`` seconds."""
        children = self._children
        for j, name in enumerate(names):
            child = children.get(name)
            if child is None:
                child = children[name] = self.histogram.labels(stage=name)
            child.observe((stamps[j + 1] - stamps[j]) / 1e9)
