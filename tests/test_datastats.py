"""Dataset statistics: known answers, determinism, errors, the CLI, and synthetic against pydocs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ragbench as rb
from ragbench import datastats
from ragbench.cli import main
from ragbench.errors import ConfigError, InputError, NonFiniteError


def embedded(points: np.ndarray, ambient: int, seed: int = 0) -> np.ndarray:
    """``points (n, d)`` put into ``ambient`` dimensions by a random orthonormal map."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((ambient, points.shape[1])))
    return (points @ q.T).astype(np.float32)


@pytest.mark.parametrize("d", [4, 8, 16])
def test_lid_of_a_linear_subspace_is_its_dimension(d: int) -> None:
    rng = np.random.default_rng(d)
    X = embedded(rng.standard_normal((6000, d)), 96, seed=d)
    # k small against n: the MLE assumes a constant density over the k nearest
    stats = datastats.compute(X, sample=500, lid_ks=(10, 20), hub_max=2000)
    for k in (10, 20):
        assert stats.values[f"lid@{k}"] == pytest.approx(d, rel=0.15), k


def test_lid_grows_with_the_dimension_of_the_data() -> None:
    rng = np.random.default_rng(1)
    low = datastats.compute(embedded(rng.standard_normal((3000, 5)), 64), sample=300)
    high = datastats.compute(embedded(rng.standard_normal((3000, 30)), 64), sample=300)
    assert high.values["lid@20"] > 3 * low.values["lid@20"]


def test_equidistant_points_have_contrast_one_and_no_gap() -> None:
    # the corners of a simplex: every pairwise distance is sqrt(2)
    X = np.eye(300, dtype=np.float32)
    stats = datastats.compute(X, sample=100)
    assert stats.values["contrast"] == pytest.approx(1.0, abs=1e-6)
    assert stats.values["gap 10-100"] == pytest.approx(0.0, abs=1e-6)
    assert math.isnan(stats.values["lid@10"])  # no distance ratio to estimate from
    assert stats.values["eff rank"] == pytest.approx(299, rel=0.01)  # centred: rank n - 1


def test_contrast_is_large_when_the_nearest_neighbour_is_much_closer() -> None:
    rng = np.random.default_rng(2)
    far = rng.standard_normal((500, 32)).astype(np.float32)
    pairs = np.concatenate([far, far + np.float32(0.01) * rng.standard_normal((500, 32))])
    spread = datastats.compute(far, sample=200).values["contrast"]
    paired = datastats.compute(pairs.astype(np.float32), sample=200).values["contrast"]
    assert spread < 2 and paired > 50 * spread


def test_regular_polygon_has_no_hubs() -> None:
    angles = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    X = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    stats = datastats.compute(X, sample=100)
    assert stats.values["hubness"] == pytest.approx(0.0, abs=1e-9)  # every N_10 is 10
    assert stats.hub_points == 720


def test_hubness_is_strongly_positive_in_many_dimensions() -> None:
    rng = np.random.default_rng(3)
    low = datastats.compute(rng.standard_normal((3000, 3)).astype(np.float32), sample=200)
    high = datastats.compute(rng.standard_normal((3000, 300)).astype(np.float32), sample=200)
    assert high.values["hubness"] > 1.0
    assert high.values["hubness"] > 3 * abs(low.values["hubness"])


def test_hubness_above_hub_max_uses_a_subsample() -> None:
    rng = np.random.default_rng(4)
    stats = datastats.compute(rng.standard_normal((1500, 16)), sample=100, hub_max=600)
    assert stats.hub_points == 600 and stats.n == 1500


def test_norms_common_direction_and_spectrum() -> None:
    rng = np.random.default_rng(5)
    line = np.outer(rng.uniform(1, 3, 400), rng.standard_normal(24)).astype(np.float32)
    stats = datastats.compute(line, sample=50).values
    assert stats["var top 1"] == pytest.approx(1.0, abs=1e-6)
    assert stats["eff rank"] == pytest.approx(1.0, abs=1e-3)
    assert stats["common"] == pytest.approx(1.0, abs=1e-6)  # one direction, all on one side
    iso = rng.standard_normal((20000, 32)).astype(np.float32)
    stats = datastats.compute(iso, sample=50, hub_max=1000).values
    assert stats["eff rank"] == pytest.approx(32, rel=0.02)
    assert stats["var top 10"] == pytest.approx(10 / 32, rel=0.1)
    assert stats["common"] < 0.01
    assert stats["norm mean"] == pytest.approx(math.sqrt(32), rel=0.02)
    assert stats["norm std"] == pytest.approx(1 / math.sqrt(2), rel=0.05)


def test_cosine_normalizes_first() -> None:
    rng = np.random.default_rng(6)
    X = rng.standard_normal((500, 16)).astype(np.float32)
    scaled = X * rng.uniform(1, 10, (500, 1)).astype(np.float32)
    a = datastats.compute(X / np.linalg.norm(X, axis=1, keepdims=True), sample=100)
    b = datastats.compute(scaled, metric="cosine", sample=100)
    for key, value in a.values.items():
        assert b.values[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_query_statistics() -> None:
    rng = np.random.default_rng(7)
    X = rng.standard_normal((800, 32)).astype(np.float32)
    near = X[:50] + np.float32(0.01) * rng.standard_normal((50, 32)).astype(np.float32)
    values = datastats.compute(X, queries=near, sample=100).values
    assert values["query sim1"] == pytest.approx(1.0, abs=1e-3)
    assert values["query contrast"] > 50
    assert "query sim1" not in datastats.compute(X, sample=100).values


def test_deterministic_from_seed_and_duplicates_are_skipped() -> None:
    rng = np.random.default_rng(8)
    X = rng.standard_normal((700, 24)).astype(np.float32)
    X = np.concatenate([X, X[:100]])  # 100 exact duplicates
    a = datastats.compute(X, sample=300, seed=1)
    assert a.as_dict() == datastats.compute(X, sample=300, seed=1).as_dict()
    assert all(math.isfinite(v) for v in a.values.values())
    assert a.sample == 300 and a.as_dict()["hub points"] == 800


def test_bad_input() -> None:
    with pytest.raises(InputError, match="more than 100"):
        datastats.compute(np.zeros((100, 4), np.float32))
    bad = np.ones((200, 4), np.float32)
    bad[3, 1] = np.nan
    with pytest.raises(NonFiniteError):
        datastats.compute(bad)
    with pytest.raises(ConfigError, match="sample"):
        datastats.compute(np.ones((200, 4), np.float32), sample=0)


def test_rows_say_what_each_statistic_is() -> None:
    rng = np.random.default_rng(9)
    stats = datastats.compute(rng.standard_normal((300, 8)), sample=50)
    rows = {key: what for key, _, what in stats.rows()}
    assert list(rows) == list(datastats.STAT_KEYS)
    assert "k=20" in rows["lid@20"] and "N_10" in rows["hubness"]


# ---------------------------------------------------------------- CLI


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_stats_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "datasets", "--stats", "synthetic", "--n", "2000", "--dim", "64")
    assert code == 0, err
    assert "dataset statistics" in out and "synthetic-n2000-d64" in out
    for key in ("lid@10", "contrast", "gap 10-100", "hubness", "eff rank", "query sim1"):
        assert key in out
    code, out, err = cli(
        capsys, "datasets", "--stats", "synthetic", "--n", "2000", "--dim", "64",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    (got,) = json.loads(out)
    ds = rb.datasets.load("synthetic", n=2000, dim=64)
    want = datastats.compute(ds.vectors, queries=ds.query_vectors_precomputed, name=ds.name)
    # and the judged answers (issue 31): synthetic has none
    judged = {"judged queries": "no judged answers", "judgments per query": "—"}
    assert got == {**want.as_dict(), "embedder": "precomputed", **judged}


def test_cli_stats_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "datasets", "--stats", "no-such-set")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "unknown dataset 'no-such-set'" in err
    code, _, err = cli(capsys, "datasets", "--stats", "pydocs", "--n", "10k")
    assert code == 2 and "--stats synthetic" in err
    code, _, err = cli(capsys, "datasets", "--n", "10k")
    assert code == 2 and "--stats" in err


# ---------------------------------------------------------------- calibration

# Statistics compared relatively; the norm's spread is compared to the norm itself
# (both sets are unit vectors: their std is float32 rounding, ~3e-8).
RELATIVE = [k for k in datastats.STAT_KEYS if k != "norm std"] + ["query sim1", "query contrast"]


@pytest.mark.integration
def test_synthetic_is_within_15_percent_of_pydocs_minilm() -> None:
    real = rb.datasets.load("pydocs")
    ref = datastats.compute(real.corpus_vectors("minilm"), queries=real.query_vectors("minilm"))
    syn = rb.datasets.load("synthetic", n=len(real.corpus))
    got = datastats.compute(syn.vectors, queries=syn.query_vectors_precomputed)
    off = {
        key: got.values[key] / ref.values[key] - 1
        for key in RELATIVE
        if abs(got.values[key] / ref.values[key] - 1) > 0.15
    }
    assert not off, off
    assert abs(got.values["norm std"] - ref.values["norm std"]) < 0.15 * ref.values["norm mean"]
