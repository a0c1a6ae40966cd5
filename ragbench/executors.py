"""Where independent units of work run: in this process, in order, or as Ray tasks on a cluster.

A driver splits its work into :class:`Unit` s -- a module-level generator
function and its arguments, yielding result records, depending on no other
unit -- and hands them to an executor with a callback. The executor calls
the callback with each record as soon as the record exists, wherever it was
measured, so a :class:`ragbench.results.records.RecordWriter` appends it at once:

- :class:`LocalExecutor`: this process, one unit after the other, in order
  (what ragbench always did);
- :class:`RayExecutor`: one Ray task per unit on a Ray cluster (a local one it
  starts, ``"auto"``, or ``"ray://host:port"`` through Ray Client).

On Ray:

- every task asks for ``num_cpus`` = the pinned thread count
  (:func:`ragbench.threads.get_threads`, ``--threads``) and pins it when it
  starts, so two measurements never share a core of a node;
- records stream back as they are made (not when the task ends) through a
  small inbox actor, which works through Ray Client too (streaming
  generators do not);
- what a driver shares (:meth:`Executor.share`) goes to the object store once
  (``ray.put``); a unit's other arguments travel with it;
- an exception in the driver -- Ctrl-C, or one raised by the callback --
  cancels every task not finished (``ray.cancel``, forced) and waits for
  them to end before it propagates; every record already handed to the
  callback is kept. A task's own error stops the run the same way and is
  raised again here as itself.

Ray ships functions, arguments and results between its processes with
(cloud)pickle, so use it on a cluster you trust; the local executor sends
nothing anywhere.

Drivers: :func:`ragbench.sweeps.sweep_points` and
:func:`~ragbench.sweeps.scale_points` (a unit per (index, build parameters)
and per (corpus size, index)); :func:`run_configurations` (``compare
--executor ray``: a task per configuration -- run on its own, not
interleaved request by request with the others); :func:`ragbench.rayload.ray_load_points`
(``load --executor ray``: load generators as Ray actors, beside the other
load drivers).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, NoReturn, Protocol

from . import threads
from .errors import ConfigError, MissingDependencyError
from .pipeline import Pipeline
from .results.records import Collector
from .validate import positive_int

__all__ = [
    "EXECUTORS",
    "Executor",
    "LocalExecutor",
    "RayExecutor",
    "Unit",
    "check_reachable",
    "configuration_records",
    "import_ray",
    "raise_cause",
    "run_configurations",
]

EXECUTORS = ("local", "ray")

#: Seconds the driver waits for cancelled tasks (or stopping actors) to end.
STOP_WAIT_S = 60.0

#: Longest one inbox call waits for a record before it returns empty and is made again.
INBOX_WAIT_S = 10.0

Configs = Sequence[tuple[Mapping[str, Any], str | None]]


class Unit(NamedTuple):
    """One independent piece of work: ``fn(*args, **kwargs)`` yields records.

    ``fn`` must be a module-level function (Ray sends it by name); ``args``
    may hold what :meth:`Executor.share` returned.
    """

    fn: Callable[..., Iterator[dict[str, Any]]]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = {}


class Executor(Protocol):
    """What a driver needs: share data once, run units, get each record as it is made."""

    name: str
    #: units run in the driver's process, so they may share what they make
    in_process: bool

    def share(self, value: Any) -> Any:
        """``value`` as an argument every unit can take (on Ray: one copy in the object store)."""
        ...

    def run(
        self,
        units: Sequence[Unit],
        on_record: Callable[[dict[str, Any]], None],
        *,
        num_cpus: int | None = None,
    ) -> None:
        """Run every unit; ``on_record`` gets each record as soon as it exists."""
        ...


class LocalExecutor:
    """Every unit in this process, one after the other, in order."""

    name = "local"
    in_process = True

    def share(self, value: Any) -> Any:
        return value

    def run(
        self,
        units: Sequence[Unit],
        on_record: Callable[[dict[str, Any]], None],
        *,
        num_cpus: int | None = None,
    ) -> None:
        """Run the units in order; ``num_cpus`` is ignored (the pinned thread count applies)."""
        for unit in units:
            for record in unit.fn(*unit.args, **unit.kwargs):
                on_record(record)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- Ray


def import_ray() -> Any:
    """The ``ray`` module, or :class:`MissingDependencyError` naming the ``ray`` extra."""
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("ray", "ray") from None
    return ray


class _Inbox:
    """A Ray actor holding records until the driver takes them (a long poll, no busy waiting)."""

    def __init__(self) -> None:
        import asyncio

        self._items: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        self._closed = False

    async def put(self, record: dict[str, Any]) -> None:
        self._items.append(record)
        self._arrived.set()

    async def take(self, timeout_s: float) -> list[dict[str, Any]]:
        import asyncio

        if not self._items and not self._closed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
        items, self._items = self._items, []
        self._arrived.clear()
        return items

    async def close(self) -> None:
        self._closed = True
        self._arrived.set()


def _run_unit(
    fn: Callable[..., Iterator[dict[str, Any]]],
    cpus: int,
    inbox: Any,
    kwargs: Mapping[str, Any],
    *args: Any,
) -> int:
    """A unit in a Ray task: pin ``cpus`` threads, hand each record to ``inbox``; how many."""
    import ray

    threads.set_threads(cpus)
    made = 0
    for record in fn(*args, **kwargs):
        ray.get(inbox.put.remote(record))  # delivered before the next point starts
        made += 1
    return made


def raise_cause(ray: Any, exc: BaseException) -> NoReturn:
    """Raise the error a Ray task or actor raised as itself (a one-line ragbench error stays one)."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        raise cause from None
    raise exc


#: Seconds a ``ray://`` address gets to accept a TCP connection before Ray is started.
RAY_CONNECT_TIMEOUT_S = 3.0


def check_reachable(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`ConfigError` unless ``ray://host:port`` accepts a TCP connection.

    Ray Client retries an unreachable address for ~30 s and then raises a
    ConnectionError with a traceback; this probe answers in ``timeout``.
    """
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"Ray address {address!r}: {exc}") from None
    if not host or port is None:
        raise ConfigError(f"Ray address {address!r} needs a host and a port: ray://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError):
            why = f"no answer in {timeout:g} s"
        raise ConfigError(
            f"cannot reach Ray at {address} ({why}); start the cluster or fix --ray-address"
        ) from None


class RayExecutor:
    """Units as Ray tasks (see the module docstring).

    ``address``: ``None`` starts a local Ray instance (or joins the one
    ``RAY_ADDRESS`` names), ``"auto"`` joins the cluster running on this
    machine, ``"ray://host:port"`` connects through Ray Client. When Ray is
    already initialized in this process it is used as it is, and left
    running. ``num_cpus``: CPUs each task asks for (default: the pinned
    thread count when :meth:`run` is called). ragbench must be installed on
    every node.
    """

    name = "ray"
    in_process = False

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        if address is not None and address != "auto" and not address.startswith("ray://"):
            raise ConfigError(
                f"a Ray address is 'auto' or 'ray://host:port' (Ray Client), got {address!r}"
            )
        self.address = address
        self.num_cpus = None if num_cpus is None else positive_int("ray", "num_cpus", num_cpus)
        self.ray = import_ray()
        self._owned = not self.ray.is_initialized()
        if self._owned:
            if address is not None and address.startswith("ray://"):
                check_reachable(address)
            extra = {"include_dashboard": False} if address is None else {}
            try:
                self.ray.init(
                    address=address, log_to_driver=False, logging_level="warning", **extra
                )
            except ConnectionError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no answer"
                raise ConfigError(f"cannot connect to Ray at {address!r}: {first}") from None
        self._task = self.ray.remote(_run_unit)
        self._inbox = self.ray.remote(_Inbox).options(num_cpus=0)

    # ---- the cluster

    def nodes(self) -> list[dict[str, Any]]:
        """Alive nodes with CPUs: ``{"id", "host", "cpus"}`` each."""
        out = []
        for node in self.ray.nodes():
            cpus = float(node.get("Resources", {}).get("CPU", 0))
            if node.get("Alive") and cpus >= 1:
                out.append(
                    {"id": node["NodeID"], "host": node.get("NodeManagerHostname"), "cpus": cpus}
                )
        return out

    def check_fits(self, cpus: int, what: str = "task") -> None:
        """Raise :class:`ConfigError` when no node has ``cpus`` CPUs (the work would wait forever)."""
        biggest = max((n["cpus"] for n in self.nodes()), default=0.0)
        if cpus > biggest:
            raise ConfigError(
                f"each Ray {what} asks for {cpus} CPUs (one per pinned thread) but the largest "
                f"node has {biggest:g}; pin fewer threads (--threads) or add larger nodes"
            )

    def cpus_for(self, num_cpus: int | None = None) -> int:
        """CPUs a task asks for: ``num_cpus``, else the executor's, else the pinned thread count."""
        return positive_int("ray", "num_cpus", num_cpus or self.num_cpus or threads.get_threads())

    # ---- units

    def share(self, value: Any) -> Any:
        return self.ray.put(value)

    def run(
        self,
        units: Sequence[Unit],
        on_record: Callable[[dict[str, Any]], None],
        *,
        num_cpus: int | None = None,
    ) -> None:
        """Run each unit as a task asking for ``num_cpus`` CPUs; records reach ``on_record`` as made."""
        if not units:
            return
        cpus = self.cpus_for(num_cpus)
        self.check_fits(cpus)
        inbox = self._inbox.remote()
        task = self._task.options(num_cpus=cpus)
        pending = [task.remote(u.fn, cpus, inbox, dict(u.kwargs), *u.args) for u in units]
        try:
            self._stream(inbox, pending, on_record)
        except BaseException:
            self.cancel(pending)
            raise
        finally:
            self.ray.kill(inbox)

    def _stream(
        self, inbox: Any, pending: list[Any], on_record: Callable[[dict[str, Any]], None]
    ) -> None:
        """Hand records to ``on_record`` until every task ended; ``pending`` shrinks as they do."""
        ray = self.ray
        take: Any = inbox.take.remote(INBOX_WAIT_S)
        while True:
            (ready,), _ = ray.wait([take, *pending], num_returns=1)
            if ready == take:
                for record in ray.get(take):
                    on_record(record)
                if not pending:
                    return
                take = inbox.take.remote(INBOX_WAIT_S)
                continue
            pending.remove(ready)
            try:
                ray.get(ready)
            except ray.exceptions.RayError as exc:
                raise_cause(ray, exc)
            if not pending:  # its records are in the inbox: the pending take returns them now
                inbox.close.remote()

    def cancel(self, refs: Sequence[Any]) -> None:
        """Cancel ``refs`` (killing the workers of running ones) and wait for them to end.

        Cancelling is repeated each second for those still running: a task
        being handed to a worker at that moment can miss one cancel (seen with Ray 2.60).
        """
        left = list(refs)
        deadline = time.monotonic() + STOP_WAIT_S
        while left and time.monotonic() < deadline:
            for ref in left:
                with contextlib.suppress(Exception):  # finished meanwhile, or already cancelled
                    self.ray.cancel(ref, force=True)
            _, left = self.ray.wait(left, num_returns=len(left), timeout=1.0)

    def close(self) -> None:
        """Shut Ray down if this executor started or joined it (an initialized Ray is left alone)."""
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
        self._owned = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---------------------------------------------------------------- compare


def configuration_records(
    config: Mapping[str, Any], label: str | None = None
) -> Iterator[dict[str, Any]]:
    """Set up one pipeline, warm it and run it on its own; its run record(s), marked not interleaved."""
    with Pipeline(config, label=label) as pipe:
        report = pipe.run()
    for record in report.to_records():
        yield {**record, "interleaved": False}


def run_configurations(
    configs: Configs,
    executor: Executor,
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One unit per (config, label), each run on its own (:func:`configuration_records`); their records.

    Each asks for as many CPUs as the larger of the pinned thread count (its
    set-up) and its ``[run] threads`` (its requests). Unlike ``compare`` in
    one process, configurations are not interleaved request by request: on
    Ray they may run at the same time on different cores or nodes.
    """
    units = [Unit(configuration_records, (dict(cfg), label)) for cfg, label in configs]
    cpus = max([threads.get_threads()] + [int(cfg["run"]["threads"] or 1) for cfg, _ in configs])
    emit = Collector(on_record, progress)
    executor.run(units, emit, num_cpus=cpus)
    return emit.records
