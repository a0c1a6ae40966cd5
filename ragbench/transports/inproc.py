"""``inproc``: the far side runs in the calling thread, on the very payload object.

The baseline every other transport is compared with: no copy, no socket, no
thread hop. The payload's length is reported as bytes sent; nothing comes
back over a wire, so bytes received is 0. With ``cpu_time=True`` the calling
thread's CPU time is measured around decode and prompt building, as the
other transports' far sides do.
"""

from __future__ import annotations

import time
from typing import Any

from .._registry import check_params
from ..errors import NotBuiltError
from . import FarSide
from ._far_side_servers import FarSideProcessor, cpu_time_flag

__all__ = ["InprocTransport"]


class InprocTransport:
    """Decode + prompt build in the caller's thread. No parameters.

    Thread-safe: :meth:`send` runs in each calling thread with no lock, on one
    shared codec and prompt builder, which keep no per-call state (a codec
    registered by a user must be shareable between threads too; ragbench's
    are).
    """

    name = "inproc"

    def __init__(self, **params: Any) -> None:
        check_params("inproc transport", params, set())
        self._processor: FarSideProcessor | None = None

    def start(
        self,
        codec_name: str,
        codec_params: dict[str, Any],
        prompt_params: dict[str, Any],
        *,
        cpu_time: bool = False,
    ) -> int:
        """Create the codec and prompt builder; return the nanoseconds it took.

        With ``cpu_time=True`` every :meth:`send` also reports the thread CPU
        time of decode and prompt building (0 otherwise).
        """
        from .. import codecs

        t0 = time.perf_counter_ns()
        cpu_time = cpu_time_flag("inproc transport", cpu_time)
        codec = codecs.create(codec_name, **codec_params)
        self._processor = FarSideProcessor(codec, codec_name, prompt_params, cpu_time=cpu_time)
        return time.perf_counter_ns() - t0

    @property
    def alive(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._processor is not None

    def connect(self) -> None:
        """Nothing to connect: there is no wire (here for symmetry with ``http``/``grpc``)."""

    def send(self, payload: bytes, query: str) -> FarSide:
        """Decode ``payload`` and build its prompt here; ``query`` is not needed (it is in the payload)."""
        processor = self._processor
        if processor is None:
            raise NotBuiltError("inproc transport: call start() before send()")
        prompt, tokens, decode_ns, prompt_ns, decode_cpu, prompt_cpu = processor.process(payload)
        return FarSide(
            prompt, tokens, decode_ns, prompt_ns, len(payload), 0, decode_cpu, prompt_cpu
        )

    def close(self) -> None:
        self._processor = None

    def __enter__(self) -> InprocTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
