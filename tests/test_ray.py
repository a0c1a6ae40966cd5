"""The Ray executor on a real local Ray cluster (2 CPUs, no dashboard), shut down at the end.

Not ``local_mode``: every unit runs in a Ray worker process and its records come
back through the object store, as on a cluster of several machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ragbench[ray]')")

import ragbench as rb  # noqa: E402
from ragbench import threads  # noqa: E402
from ragbench.cli import main  # noqa: E402
from ragbench.errors import ConfigError, MissingDependencyError  # noqa: E402
from ragbench.executors import LocalExecutor, RayExecutor, Unit  # noqa: E402
from ragbench.results.records import RecordWriter, new_record, node_name, read_records  # noqa: E402
from ragbench.results.tables import render as rb_render  # noqa: E402
from ragbench.sweeps import SweepData, sweep_points  # noqa: E402

pytestmark = pytest.mark.integration

SYN = ["--dataset", "synthetic", "--n", "2000", "--dim", "16"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    # the units below travel by value: the workers cannot import this test module
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 2**20,
        log_to_driver=False,
        logging_level="warning",
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tasks ask for one CPU each, so two run at once on the 2-CPU cluster."""
    before = threads.get_threads()
    threads.set_threads(1)
    try:
        yield
    finally:
        threads.set_threads(before)


def all_cpus_free(wait_s: float = 60.0) -> bool:
    """Whether every CPU of the cluster is free again (polled: Ray reports it a moment late)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU"):
            return True
        time.sleep(0.2)
    return False


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# units for the executor tests (module level: Ray workers import them by name)


def one_then_wait(i: int) -> Iterator[dict]:
    """A record at once, then two minutes of waiting that only cancelling cuts short."""
    yield new_record("scale", {"unit": i})
    time.sleep(120)


def failing(i: int) -> Iterator[dict]:
    if i == 1:
        raise ConfigError("unit 1 is bad")
    yield new_record("scale", {"unit": i})
    time.sleep(120)


# ---------------------------------------------------------------- without a cluster


def test_import_ragbench_does_not_import_ray() -> None:
    code = (
        "import sys, ragbench, ragbench.cli, ragbench.sweeps, ragbench.executors; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragbench\[ray\]'"):
        RayExecutor()
    with pytest.raises(ConfigError, match="ray://"):
        RayExecutor("localhost:6379")


def test_ray_options_need_the_ray_executor(capsys) -> None:
    code, _, err = cli(capsys, "sweep", "--index", "flat", "--ray-address", "auto")
    assert code == 2 and "--executor ray" in err
    code, _, err = cli(capsys, "load", *SYN, "--index", "flat", "--qps", "10", "--actors", "2")
    assert code == 2 and "--executor ray" in err


def test_tables_say_when_rows_come_from_different_machines() -> None:
    def point(node: str, cpu: str) -> dict:
        fields = {"dataset": "d", "n": 10, "dim": 2, "metric": "ip", "k": 1, "index": "flat"}
        fields |= {"build": {}, "query": {}, "rescore": None, "recall": 1.0, "p50_us": 1.0}
        fields |= {"p95_us": 1.0, "p99_us": 1.0, "qps_single": 1.0, "qps_batch": 1.0}
        fields |= {"build_s": 0.1, "memory_bytes": 10}
        return new_record("sweep", {**fields, "node": node}, env={"cpu": cpu, "cores": 2})

    same = [point("a", "Xeon"), point("a", "Xeon")]
    assert "NOTE" not in rb_render(same)
    table = rb_render([point("a", "Xeon"), point("b", "EPYC")])
    assert "NOTE: rows measured on different hardware" in table and "b (EPYC" in table


def test_concurrent_runs_merge_without_comparing_clocks() -> None:
    import numpy as np

    from ragbench.traffic import COMPLETED, REJECTED, Traffic, merge_concurrent

    def run(start: int, sched: list[int], fin: list[int], outcome: list[int]) -> Traffic:
        at = np.asarray(sched, dtype=np.int64) + start
        done = np.asarray([start + f if f >= 0 else -1 for f in fin], dtype=np.int64)
        return Traffic(
            start_ns=start,
            end_ns=start + 5_000,
            scheduled_ns=at,
            dispatch_ns=np.where(done >= 0, at, -1),
            finish_ns=done,
            outcome=np.asarray(outcome),
            idle=np.ones(len(sched), dtype=bool),
            records=[None] * len(sched),
        )

    a = run(10**12, [0, 1_000], [500, 1_600], [COMPLETED, COMPLETED])  # one node's clock
    b = run(7, [0, 2_000], [300, -1], [COMPLETED, REJECTED])  # another's, far behind
    merged = merge_concurrent([a, b])
    assert merged.start_ns == 0 and merged.outcome.tolist() == [1, 1, 1, 3]
    assert (merged.finish_ns - merged.scheduled_ns)[:3].tolist() == [500, 600, 300]
    assert merged.finish_ns[3] == -1 and merged.dispatch_ns[3] == -1
    assert merged.end_ns == 5_000  # the longer window, not the span between the clocks


# ---------------------------------------------------------------- on the cluster


def test_sweep_through_ray_matches_local(cluster, one_thread) -> None:
    ds = rb.datasets.load("synthetic", n=2000, dim=16, n_queries=30, seed=3)
    data = SweepData.from_dataset(ds, k=5)
    grid = {
        "k": 5,
        "build_grid": {"M": [8, 16], "nlist": [16]},
        "query_grid": {"ef": [8, 32], "nprobe": [1, 4]},
    }
    names = ["hnsw", "ivf", "flat"]
    local = sweep_points(data, names, executor=LocalExecutor(), **grid)
    seen: list[dict] = []
    with RayExecutor() as ex:  # Ray is initialized: used as it is, left running
        remote = sweep_points(data, names, executor=ex, on_point=seen.append, **grid)
    assert ray.is_initialized()

    def key(r: dict) -> str:
        return json.dumps([r["index"], r["build"], r["query"]], sort_keys=True)

    # hnsw: 2 builds x 2 ef; ivf: 2 nprobe; flat: 1
    assert len(remote) == len(local) == 7 and seen == remote  # streamed as they came
    assert {key(r): r["recall"] for r in remote} == {key(r): r["recall"] for r in local}
    assert {frozenset(r) for r in remote} == {frozenset(r) for r in local}  # one schema
    for r in remote:
        assert r["node"] == node_name() == r["env"]["node"]
        assert r["env"]["threads"]["ragbench_threads"] == 1  # the task pinned its CPUs
    assert all_cpus_free()


def test_deterministic_sweep_through_ray_equals_local_with_other_threads(
    cluster, monkeypatch, tmp_path: Path
) -> None:
    """Builds are deterministic by default: 2 pinned threads here, 1 in the Ray tasks, same recall."""
    # no cached index shared between the two: here the threshold is set out of reach; the
    # workers (started before, with their own environment) build well under the default 10 s
    monkeypatch.setenv("RAGBENCH_INDEX_CACHE_MIN_S", "1e9")
    ds = rb.datasets.load("synthetic", n=3000, dim=16, n_queries=40, seed=5)
    data = SweepData.from_dataset(ds, k=10)
    grid = {"k": 10, "build_grid": {"M": [8], "nlist": [32]}}
    grid["query_grid"] = {"ef": [8], "nprobe": [2]}
    names = ["hnsw", "faiss-hnsw", "ivf", "ivfpq"]
    before = threads.get_threads()
    threads.set_threads(2)
    try:
        local = sweep_points(data, names, executor=LocalExecutor(), **grid)
    finally:
        threads.set_threads(before)
    with RayExecutor(num_cpus=1) as ex:
        remote = sweep_points(data, names, executor=ex, **grid)

    def key(r: dict) -> str:
        return json.dumps([r["index"], r["build"], r["query"]], sort_keys=True)

    assert len(local) == len(remote) == 4
    assert {key(r): r["recall_per_query"] for r in remote} == {
        key(r): r["recall_per_query"] for r in local
    }
    assert all(r["build_info"]["deterministic"] and r["build_info"]["threads"] == 1 for r in remote)
    assert all_cpus_free()


def test_interrupt_cancels_the_rest_and_keeps_finished_records(
    cluster, one_thread, tmp_path: Path
) -> None:
    out = tmp_path / "points.jsonl"
    writer = RecordWriter(out)

    def keep_then_interrupt(record: dict) -> None:
        writer(record)
        raise KeyboardInterrupt

    units = [Unit(one_then_wait, (i,)) for i in range(4)]
    with RayExecutor() as ex, pytest.raises(KeyboardInterrupt):
        ex.run(units, keep_then_interrupt)
    assert len(writer.records) == 1 and len(read_records(out)) == 1  # the first is kept
    assert all_cpus_free()  # the running units were cancelled, the queued ones never start


def test_a_failing_unit_stops_the_run_with_its_own_error(cluster, one_thread) -> None:
    got: list[dict] = []
    with RayExecutor() as ex, pytest.raises(ConfigError, match="unit 1 is bad"):
        ex.run([Unit(failing, (i,)) for i in range(3)], got.append)
    assert all_cpus_free()


def test_compare_through_ray_runs_each_configuration_as_one_task(
    cluster, one_thread, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "compare.jsonl"
    code, stdout, err = cli(
        capsys,
        "compare",
        *SYN,
        "--index",
        "flat,hnsw",
        "--codec",
        "json,msgpack",
        "--queries",
        "20",
        "--warmup",
        "2",
        "--executor",
        "ray",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = read_records(out)
    assert len(recs) == 4 and len({r["label"] for r in recs}) == 4
    assert all(r["kind"] == "run" and r["requests"] == 20 for r in recs)
    assert all(r["node"] == node_name() and r["interleaved"] is False for r in recs)
    assert "not interleaved" in stdout
    assert all_cpus_free()


def test_rebuilds_through_ray_equal_the_local_rebuilds(
    cluster, one_thread, tmp_path: Path, capsys
) -> None:
    """``--rebuilds 2 --executor ray``: each build of each configuration a Ray task, merged the
    same way; builds are deterministic, so the recall of every build equals the local run's."""
    argv = [*SYN, "--index", "hnsw+M=4+ef=4,ivf+nprobe=1", "--rerank", "none", "--queries", "20"]
    recs = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray"])):
        out = tmp_path / f"{name}.jsonl"
        code, _, err = cli(capsys, "compare", *argv, "--rebuilds", "2", *extra, "--out", str(out))
        assert code == 0, err
        assert "build 1 of 2 measured" in err
        recs[name] = read_records(out)
    assert [r["label"] for r in recs["ray"]] == [r["label"] for r in recs["local"]]
    for here, there in zip(recs["local"], recs["ray"], strict=True):
        assert there["rebuilds"] == 2 and there["requests"] == 2 * 20
        # every request's, every build (in another order: tasks are not interleaved)
        assert sorted(there["recall"]) == sorted(here["recall"]), there["label"]
        # (the means agree to the last bits: summed in another order there)
        assert there["recall_builds"] == pytest.approx(here["recall_builds"], rel=1e-12)
        assert there["info"]["index"]["build"]["seeds"] == here["info"]["index"]["build"]["seeds"]
        assert len(set(there["repetition"])) == 2
    assert all_cpus_free()


def test_load_through_two_ray_actors_adds_up(cluster, tmp_path: Path, capsys) -> None:
    out = tmp_path / "load.jsonl"
    code, stdout, err = cli(
        capsys,
        "load",
        *SYN,
        "--index",
        "flat",
        "--codec",
        "json",
        "--qps",
        "10,20",
        "--duration",
        "1",
        "--warmup",
        "2",
        "--worker-kind",
        "thread",
        "--workers",
        "1",
        "--executor",
        "ray",
        "--actors",
        "2",
        "--out",
        str(out),
    )
    assert code == 0, err
    recs = read_records(out)
    assert [r["offered_qps"] for r in recs] == [10.0, 20.0]
    for r in recs:
        # each actor offers rate / 2 for 1 s: round(rate / 2) requests each
        assert r["scheduled"] == 2 * round(r["offered_qps"] / 2)
        assert r["completed"] + r["timed_out"] + r["rejected"] + r["failed"] == r["scheduled"]
        assert r["completed"] == r["scheduled"]  # a low rate: every request completes
        assert r["actors"] == 2 and r["workers"] == 2 and len(r["nodes"]) == 2
        assert r["node"] == node_name() and r["recall_at_k"] == pytest.approx(1.0)
    assert "2 Ray actor(s)" in stdout
    assert all_cpus_free()


def test_a_load_generator_that_cannot_set_up_reports_why(cluster, capsys) -> None:
    code, _, err = cli(
        capsys,
        "load",
        *SYN,
        "--index",
        "flat",
        "--k",
        "5000",  # more than the corpus: found when an actor sets up
        "--set",
        "run.k_candidates=5000",
        "--qps",
        "10",
        "--duration",
        "0.2",
        "--worker-kind",
        "thread",
        "--workers",
        "1",
        "--executor",
        "ray",
    )
    assert code == 2 and "larger than the corpus" in err
    assert all_cpus_free()
