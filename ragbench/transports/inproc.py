"""``inproc``: the far side runs in the calling thread, on the very payload object.

The baseline every other transport is compared with: no copy, no socket, no
thread hop. The payload's length is reported as bytes sent; nothing comes
back over a wire, so bytes received is 0.
"""

from __future__ import annotations

import time
from typing import Any

from .._registry import check_params
from ..errors import NotBuiltError
from . import FarSide
from ._farside import FarSideProcessor

__all__ = ["InprocTransport"]


class InprocTransport:
    """Decode + prompt build in the caller's thread. No parameters."""

    name = "inproc"

    def __init__(self, **params: Any) -> None:
        check_params("inproc transport", params, set())
        self._processor: FarSideProcessor | None = None

    def start(
        self, codec_name: str, codec_params: dict[str, Any], prompt_params: dict[str, Any]
    ) -> int:
        """Create the codec and prompt builder; return the nanoseconds it took."""
        from .. import codecs

        t0 = time.perf_counter_ns()
        codec = codecs.create(codec_name, **codec_params)
        self._processor = FarSideProcessor(codec, codec_name, prompt_params)
        return time.perf_counter_ns() - t0

    @property
    def alive(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._processor is not None

    def send(self, payload: bytes, query: str) -> FarSide:
        """Decode ``payload`` and build its prompt here; ``query`` is not needed (it is in the payload)."""
        processor = self._processor
        if processor is None:
            raise NotBuiltError("inproc transport: call start() before send()")
        prompt, tokens, decode_ns, prompt_ns = processor.process(payload)
        return FarSide(prompt, tokens, decode_ns, prompt_ns, len(payload), 0)

    def close(self) -> None:
        self._processor = None

    def __enter__(self) -> InprocTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
