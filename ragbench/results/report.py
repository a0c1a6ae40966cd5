"""The outcome of one pipeline run: raw per-request samples, statistics derived on demand.

``to_record()`` gives the ``ragbench.run/1`` record (see :mod:`ragbench.results.records`);
``from_record`` reads one back; ``table()`` renders it with
:func:`ragbench.results.tables.run_table`, exactly as ``ragbench report`` renders
the saved record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from .. import intervals
from ..errors import DatasetError
from ..timing import Stats
from .records import RUN_SCHEMA, jsonable, new_record
from .schema import RecordError, RunRecord, need, read_struct
from .tables import run_table

__all__ = ["Report"]


@dataclass(frozen=True, slots=True, repr=False)
class Report:
    """The outcome of one pipeline run: raw samples plus what is needed to read them.

    Its ``repr`` is one line, e.g. ``<Report hnsw/numba/protobuf/inproc: 200
    requests, p50 total 812 µs, p99 1.31 ms, recall@10 0.980>``, not the arrays.
    """

    label: str
    config: dict[str, Any]
    stage_names: list[str]
    samples_ns: np.ndarray  # int64 (requests, stages)
    recall: np.ndarray  # float (requests,)
    payload_bytes: np.ndarray
    wire_bytes: np.ndarray
    prompt_tokens: np.ndarray
    setup_ns: dict[str, int]
    cache_hits: int | None = None
    cache_lookups: int | None = None
    simulated: list[str] = field(default_factory=list)
    dataset: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    cache_events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    env: dict[str, Any] | None = None
    time: str | None = None
    cpu_samples_ns: np.ndarray | None = None  # int64 (requests, stages), with [run] cpu_time
    # int64 (requests,): the index's database server's CPU per request (pgvector's own server)
    server_cpu_ns: np.ndarray | None = None
    repetition: np.ndarray | None = None  # int (requests,): which repetition each request ran in
    caveats: list[str] = field(default_factory=list)  # e.g. an LLM with random weights
    model_prompt_tokens: np.ndarray | None = None  # int64 (requests,): the LLM's own prompt count
    inter_token_ns: np.ndarray | None = None  # int64 (requests, next tokens) after the first
    # per part (connect, tls, first_byte, ...): int64 (requests,), with transport keep_alive = false
    connection_ns: dict[str, np.ndarray] | None = None
    # nDCG@10, MRR@10, recall@100 against the dataset's qrels (ragbench.judged.summary); None: none
    judged: dict[str, Any] | None = None

    def __repr__(self) -> str:
        total = self.total()
        stopped = f", stopped early: {self.error}" if self.error else ""
        n = f"{self.requests} request{'' if self.requests == 1 else 's'}"
        return (
            f"<Report {self.label}: {n}, p50 total {_duration(total.p50_ns)}, "
            f"p99 {_duration(total.p99_ns)}, "
            f"recall@{self.k} {self.mean_recall:.3f}{stopped}>"
        )

    # ---- statistics (derived from the samples)

    @property
    def requests(self) -> int:
        return int(self.samples_ns.shape[0])

    @property
    def totals_ns(self) -> np.ndarray:
        """Per-request time before first token: the sum of every stage."""
        totals: np.ndarray = self.samples_ns.sum(axis=1)
        return totals

    def stage(self, name: str) -> Stats:
        return Stats.from_samples(self.samples_ns[:, self.stage_names.index(name)])

    def total(self) -> Stats:
        return Stats.from_samples(self.totals_ns)

    @property
    def repeats(self) -> int:
        """How many repetitions the requests came from (``--repeat``)."""
        return 1 if self.repetition is None else len(np.unique(self.repetition))

    def interval(self, name: str, stat: str = "p50") -> intervals.Interval:
        """``stat`` (ns) of stage ``name`` -- or ``"total"`` -- with its bootstrap interval."""
        x = self.totals_ns if name == "total" else self.samples_ns[:, self.stage_names.index(name)]
        return intervals.bootstrap(x, stat, groups=self.repetition)

    def shares(self) -> dict[str, float]:
        """Each stage's share of the summed time before first token (mean-based)."""
        sums = self.samples_ns.sum(axis=0).astype(np.float64)
        whole = float(sums.sum())
        return {
            n: (float(s) / whole if whole else float("nan"))
            for n, s in zip(self.stage_names, sums, strict=True)
        }

    def cpu(self) -> dict[str, dict[str, float]] | None:
        """Per stage: mean CPU µs per request, ``cpu_pct`` (CPU / wall time) and ``cpu_share`` of all CPU time.

        ``None`` unless the run recorded CPU time (``[run] cpu_time``). A sort
        or a codec reads ~100 %; a socket or an LLM wait ~0 %.
        """
        if self.cpu_samples_ns is None:
            return None
        cpu = self.cpu_samples_ns.sum(axis=0).astype(np.float64)
        wall = self.samples_ns.sum(axis=0).astype(np.float64)
        whole = float(cpu.sum())
        n = max(self.requests, 1)
        return {
            name: {
                "cpu_mean_us": float(c) / n / 1e3,
                "cpu_pct": 100.0 * float(c) / float(w) if w > 0 else float("nan"),
                "cpu_share": float(c) / whole if whole > 0 else float("nan"),
            }
            for name, c, w in zip(self.stage_names, cpu, wall, strict=True)
        }

    @property
    def mean_recall(self) -> float:
        return float(self.recall.mean()) if self.recall.size else float("nan")

    @property
    def cache_hit_rate(self) -> float | None:
        if not self.cache_lookups:
            return None
        return (self.cache_hits or 0) / self.cache_lookups

    @property
    def k(self) -> int:
        return int(self.config["run"]["k"])

    def _ci_fields(self, name: str) -> dict[str, list[float]]:
        out = {}
        for stat in ("p50", "p99"):
            iv = self.interval(name, stat)
            out[f"{stat}_us_ci"] = [iv.low / 1e3, iv.high / 1e3]
        return out

    # ---- rendering

    def table(self, *, width: int = 110) -> str:
        """The per-stage table (mean/p50/p90/p99/max in µs, share) and notes, as text."""
        return run_table(self.to_record(), width=width)

    # ---- records

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-able record for this run (a list, so several runs concatenate)."""
        return [self.to_record()]

    def to_record(self) -> dict[str, Any]:
        """This run as one ``ragbench.run/1`` record (see :mod:`ragbench.results.records`)."""
        stages = {}
        shares = self.shares()
        cpu = self.cpu()
        for name in self.stage_names:
            d: dict[str, Any] = {**self.stage(name).as_dict("us"), **self._ci_fields(name)}
            d["share"] = shares[name]
            if cpu is not None:
                d.update(cpu[name])
            stages[name] = d
        fields = {
            "label": self.label,
            "config": jsonable(self.config),
            "dataset": self.dataset,
            "info": jsonable(self.info),
            "stages": self.stage_names,
            "summary": stages,
            "total": {**self.total().as_dict("us"), **self._ci_fields("total")},
            "repeats": self.repeats,
            "intervals": intervals.describe(self.repetition),
            "requests": self.requests,
            "k": self.k,
            "recall_at_k": self.mean_recall,
            # recall as a distribution: the worst tenth of queries (filtered runs vary)
            "recall_p10": float(np.percentile(self.recall, 10)) if self.recall.size else None,
            # and the requests that lost every neighbour: a mean of 0.95 can be 5 % at zero
            "recall_zero": int(np.count_nonzero(self.recall == 0)),
            "payload_bytes_p50": _median(self.payload_bytes),
            "wire_bytes_p50": _median(self.wire_bytes),
            "cache_hit_rate": self.cache_hit_rate,
            "setup_s": {k: v / 1e9 for k, v in self.setup_ns.items()},
            "simulated": self.simulated,
            "cache_events": jsonable(self.cache_events),
            "error": self.error,
            "samples_ns": {
                n: self.samples_ns[:, j].tolist() for j, n in enumerate(self.stage_names)
            },
            "recall": self.recall.tolist(),
            "payload_bytes": self.payload_bytes.tolist(),
            "wire_bytes": self.wire_bytes.tolist(),
            "prompt_tokens": self.prompt_tokens.tolist(),
            "cache": {"hits": self.cache_hits, "lookups": self.cache_lookups},
            # each search timed inside its request, after the other stages (never back to back)
            "cache_state": "after-stages",
        }
        if self.repetition is not None:
            fields["repetition"] = self.repetition.tolist()
        if self.judged is not None:
            fields["judged"] = self.judged
        fields.update(self._llm_fields())
        if self.connection_ns:
            # inside the transport stage: its connection set-up and first byte, per request
            fields["connection"] = {
                part: Stats.from_samples(v).as_dict("us") for part, v in self.connection_ns.items()
            }
            fields["connection_ns"] = {part: v.tolist() for part, v in self.connection_ns.items()}
        if self.cpu_samples_ns is not None:
            cpu_total = self.cpu_samples_ns.sum(axis=1)
            fields["cpu_total"] = Stats.from_samples(cpu_total).as_dict("us")
            fields["cpu_samples_ns"] = {
                n: self.cpu_samples_ns[:, j].tolist() for j, n in enumerate(self.stage_names)
            }
        if self.server_cpu_ns is not None:  # read around each request, outside its stamps
            fields["server_cpu_ns"] = self.server_cpu_ns.tolist()
            fields["server_cpu_p50_us"] = Stats.from_samples(self.server_cpu_ns).p50_ns / 1e3
        rec = new_record("run", fields, env=self.env)
        if self.time is not None:
            rec["time"] = self.time
        return rec

    def _llm_fields(self) -> dict[str, Any]:
        """The LLM's own prompt counts and inter-token latencies, when its generator gave them."""
        out: dict[str, Any] = {"caveats": list(self.caveats)}
        if self.model_prompt_tokens is not None:
            out["model_prompt_tokens"] = self.model_prompt_tokens.tolist()
            out["model_prompt_tokens_p50"] = _median(self.model_prompt_tokens)
        itl = self.inter_token_ns
        if itl is not None and itl.size:
            out["next_tokens"] = int(itl.shape[1])
            out["inter_token"] = Stats.from_samples(itl.reshape(-1)).as_dict("us")
            out["inter_token_ns"] = itl.tolist()
        return out

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Report:
        """Rebuild a report from a record written by :meth:`to_records`."""
        try:  # an older version is brought up to date; a newer one or another kind is refused
            run = read_struct(rec, RunRecord)
        except RecordError as exc:
            raise DatasetError(f"not a {RUN_SCHEMA} record: {exc}") from None
        try:
            names = list(need(run.stages, "stages"))
            samples = _matrix(need(run.samples_ns, "samples_ns"), names)
            cpu = _matrix(run.cpu_samples_ns, names) if run.cpu_samples_ns is not None else None
            cache = need(run.cache, "cache")
            return cls(
                label=str(need(run.label, "label")),
                config=dict(need(run.config, "config")),
                stage_names=names,
                samples_ns=samples,
                recall=np.asarray(need(run.recall, "recall"), dtype=np.float64),
                payload_bytes=np.asarray(need(run.payload_bytes, "payload_bytes"), dtype=np.int64),
                wire_bytes=np.asarray(need(run.wire_bytes, "wire_bytes"), dtype=np.int64),
                prompt_tokens=np.asarray(need(run.prompt_tokens, "prompt_tokens"), dtype=np.int64),
                setup_ns={k: int(v * 1e9) for k, v in need(run.setup_s, "setup_s").items()},
                cache_hits=cache["hits"],
                cache_lookups=cache["lookups"],
                simulated=list(need(run.simulated, "simulated")),
                dataset=dict(need(run.dataset, "dataset")),
                info=dict(need(run.info, "info")),
                cache_events=list(run.cache_events or []),
                error=run.error,
                env=run.env,
                time=run.time,
                cpu_samples_ns=cpu,
                server_cpu_ns=_optional(run.server_cpu_ns),
                repetition=np.asarray(run.repetition) if run.repetition is not None else None,
                caveats=list(run.caveats or []),  # absent from records before caveats
                model_prompt_tokens=_optional(run.model_prompt_tokens),
                inter_token_ns=_optional(run.inter_token_ns),
                connection_ns={
                    part: np.asarray(v, dtype=np.int64)
                    for part, v in (run.connection_ns or {}).items()
                }
                or None,
                judged=None if run.judged is None else msgspec.to_builtins(run.judged),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"malformed {RUN_SCHEMA} record: {exc!r}") from None


def _duration(ns: float) -> str:
    """``812 µs``, ``1.31 ms``, ``2.40 s``; ``-`` for NaN (no requests)."""
    if ns != ns:
        return "-"
    value, unit = ns / 1e3, "µs"
    if ns >= 1e9:
        value, unit = ns / 1e9, "s"
    elif ns >= 1e6:
        value, unit = ns / 1e6, "ms"
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f} {unit}"


def _matrix(columns: Mapping[str, Any], names: list[str]) -> np.ndarray:
    return np.array([columns[n] for n in names], dtype=np.int64).T.reshape(-1, len(names))


def _optional(values: Any) -> np.ndarray | None:
    return np.asarray(values, dtype=np.int64) if values is not None else None


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None
