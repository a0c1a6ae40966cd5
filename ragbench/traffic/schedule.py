"""When requests arrive (:func:`arrivals`) and how load is offered and judged (:class:`LoadOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..validate import positive_int, positive_number

__all__ = ["ARRIVALS", "LEAD_NS", "LoadOptions", "arrivals"]


ARRIVALS = ("poisson", "uniform", "gamma")

#: Lead time before the first scheduled arrival, so the first one is not late by construction.
LEAD_NS = 2_000_000


def arrivals(
    rate: float, count: int, *, kind: str = "poisson", burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Scheduled arrival offsets in ns for ``count`` requests at ``rate`` per second.

    ``poisson``: exponential gaps; ``uniform``: even gaps; ``gamma``: gamma
    gaps with shape ``burstiness`` and the same mean (1 is Poisson, below 1
    burstier, above 1 more regular), as vLLM's ``bench serve`` does.
    """
    rate = positive_number("arrivals", "rate", rate)
    if kind not in ARRIVALS:
        raise ConfigError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {kind!r}")
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count)
    elif kind == "uniform":
        gaps = np.full(count, 1.0 / rate)
    else:
        shape = positive_number("arrivals", "burstiness", burstiness)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=count)
    return (np.cumsum(gaps) * 1e9).astype(np.int64)


@dataclass(frozen=True)
class LoadOptions:
    """How load is offered and judged (see the module docstring)."""

    duration_s: float = 5.0
    arrivals: str = "poisson"
    burstiness: float = 1.0
    timeout_s: float = 10.0
    queue_size: int = 1024
    seed: int = 0
    slo_ms: float | None = None
    #: repetitions of each level (taking turns with the other configurations)
    repeat: int = 1
    #: dispatch-delay p99 (µs) of requests that found a worker idle, above
    #: which a table warns that the load generator itself fell behind
    lag_warn_us: float = 1000.0

    def __post_init__(self) -> None:
        positive_number("load", "duration_s", self.duration_s)
        positive_number("load", "timeout_s", self.timeout_s)
        positive_int("load", "queue_size", self.queue_size, lo=0)
        positive_number("load", "burstiness", self.burstiness)
        positive_int("load", "repeat", self.repeat)
        if self.arrivals not in ARRIVALS:
            raise ConfigError(
                f"arrivals must be one of {', '.join(ARRIVALS)}, got {self.arrivals!r}"
            )
        if self.slo_ms is not None:
            positive_number("load", "slo_ms", self.slo_ms)
