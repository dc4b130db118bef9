"""DPCopula-Kendall: τ from contingency tables, its sensitivity, the budget, and releases."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import (
    CORRELATED_ROWS,
    SMALL_SCHEMA_PATH,
    assert_pure_laplace,
    assert_resamples_alike,
    codes_of,
)
from scipy.stats import kendalltau

from dp_dask.cli import main
from dp_dask.data.counts import counts_from_codes
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema
from dp_dask.methods.dpcopula import (
    DPCopulaKendallSynthesizer,
    DPCopulaModel,
    kendall_counts,
    kendall_tau_a,
    noisy_kendall_tau,
    split_budget,
)
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer, load_model


def contingency(x: np.ndarray, y: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    table = np.zeros(shape, dtype=np.int64)
    np.add.at(table, (x, y), 1)
    return table


def brute_force_tau_a(x: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(x), k=1)
    return float((np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])).sum()) / len(i)


@pytest.mark.parametrize("seed", range(5))
def test_tau_from_the_table_is_kendalls_tau(seed):
    """tau-a (what we release) against the O(n²) definition; the same C and D give scipy's
    tau-b (scipy has no tau-a), so concordant/discordant counts are right with ties too."""
    rng = np.random.default_rng(seed)
    n, a, b = int(rng.integers(50, 400)), int(rng.integers(2, 7)), int(rng.integers(2, 9))
    x = rng.integers(0, a, n)
    dependent = np.clip(x * b // a + rng.integers(-2, 3, n), 0, b - 1)
    y = dependent if seed % 2 else rng.integers(0, b, n)
    table = contingency(x, y, (a, b))
    assert kendall_tau_a(table) == pytest.approx(brute_force_tau_a(x, y), abs=1e-12)
    concordant, discordant = kendall_counts(table)
    pairs = n * (n - 1) // 2
    ties_x = int((table.sum(axis=1) * (table.sum(axis=1) - 1) // 2).sum())
    ties_y = int((table.sum(axis=0) * (table.sum(axis=0) - 1) // 2).sum())
    tau_b = (concordant - discordant) / math.sqrt((pairs - ties_x) * (pairs - ties_y))
    assert tau_b == pytest.approx(kendalltau(x, y, variant="b").statistic, abs=1e-12)


def test_tau_a_moves_at_most_4_over_n_between_neighbours():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2_000):
        n, a, b = int(rng.integers(2, 40)), int(rng.integers(2, 5)), int(rng.integers(2, 5))
        x, y = rng.integers(0, a, n), rng.integers(0, b, n)
        before = kendall_tau_a(contingency(x, y, (a, b)))
        r = rng.integers(n)
        x[r], y[r] = rng.integers(0, a), rng.integers(0, b)
        change = abs(kendall_tau_a(contingency(x, y, (a, b))) - before)
        worst = max(worst, change * n / 4)
        assert change <= 4 / n + 1e-12
    assert worst > 0.5  # random neighbours come near the bound
    # ... and it is attained: n-1 rows at (1, 1); (2, 2) concordant with all, (2, 0) discordant
    n = 25
    x, y = np.ones(n, dtype=int), np.ones(n, dtype=int)
    x[0], y[0] = 2, 2
    before = kendall_tau_a(contingency(x, y, (3, 3)))
    y[0] = 0
    change = before - kendall_tau_a(contingency(x, y, (3, 3)))
    assert change == pytest.approx(4 / n) and change > 4 / (n + 1)


@pytest.mark.parametrize("epsilon, k", [(1.0, 8.0), (0.1, 1.0), (2.0, 16.0)])
def test_budget_split_sums_to_epsilon(epsilon, k):
    epsilon1, epsilon2 = split_budget(epsilon, k)
    assert epsilon1 + epsilon2 == pytest.approx(epsilon, rel=1e-15)
    assert epsilon1 / epsilon2 == pytest.approx(k)
    assert split_budget(epsilon, k, m=1) == (epsilon, 0.0)  # no pair: all to the histograms
    with pytest.raises(ValueError, match="ratio"):
        split_budget(epsilon, 0.0)


def test_tau_noise_has_the_calibrated_scale():
    """Laplace b = C(m,2)·(4/n)/ε2 on τ: std √2·b over many seeded draws (± 5 % at 4000 draws)."""
    schema = load_schema(SMALL_SCHEMA_PATH)
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, 500) for s in schema.sizes])
    counts = counts_from_codes(codes, schema)
    n, epsilon2, pairs = 500, 50.0, 6
    draws = np.array([noisy_kendall_tau(counts, schema, n, epsilon2, sampler="numpy", rng=rng)
                      for _ in range(4_000)])
    exact = noisy_kendall_tau(counts, schema, n, 1e12, sampler="numpy", rng=rng)
    b = pairs * (4 / n) / epsilon2
    assert np.abs(draws.mean(axis=0) - exact).max() < 5 * math.sqrt(2) * b / math.sqrt(4_000)
    assert draws.std(axis=0) == pytest.approx(np.full(pairs, math.sqrt(2) * b), rel=0.05)
    # the OpenDP sampler accepts the same calibration (its privacy map is checked before drawing)
    noisy = noisy_kendall_tau(counts, schema, n, epsilon2, sampler="opendp", rng=None)
    assert noisy.shape == (pairs,) and np.all(np.abs(noisy) <= 1)


def fine_copula_frame(n: int, rho: float, seed: int) -> pd.DataFrame:
    """Three numeric attributes from a Gaussian copula (ρ between neighbours), one categorical."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 3)) @ np.linalg.cholesky(
        np.array([[1, rho, rho**2], [rho, 1, rho], [rho**2, rho, 1]])).T
    return pd.DataFrame({"u": z[:, 0], "v": np.exp(z[:, 1]), "w": 3 * z[:, 2],
                         "c": np.where(z[:, 0] + rng.standard_normal(n) > 0, "hi", "lo")})


FINE_SCHEMA = {"schema_version": 1, "name": "fine", "attributes": [
    {"name": "u", "type": "numeric", "edges": ["-inf", *np.linspace(-2.5, 2.5, 201), "inf"]},
    {"name": "v", "type": "numeric", "edges": [0, *np.exp(np.linspace(-2.5, 2.5, 201)), "inf"]},
    {"name": "w", "type": "numeric", "edges": ["-inf", *np.linspace(-7.5, 7.5, 201), "inf"]},
    {"name": "c", "type": "categorical", "categories": ["lo", "hi"]},
]}


def test_large_epsilon_recovers_marginals_and_tau(client):
    n = 20_000
    schema = load_schema(FINE_SCHEMA)
    real = encode_partition(fine_copula_frame(n, 0.6, seed=2), schema).T  # (n, m) codes
    synthesizer = Synthesizer.create("dpcopula-kendall", FINE_SCHEMA, epsilon=1e6,
                                     noise_sampler="numpy", noise_seed=0, ledger=False)
    model = synthesizer.fit(fine_copula_frame(n, 0.6, seed=2)).model
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    exact_tau = [kendall_tau_a(contingency(real[:, i], real[:, j],
                                           (schema.sizes[i], schema.sizes[j]))) for i, j in pairs]
    # the noise is ~1e-9 on τ and ~1e-5 on counts: the model holds the data's statistics
    assert model.metadata["model"]["noisy_tau"] == pytest.approx(exact_tau, abs=1e-6)
    for a, histogram in enumerate(model.histograms):
        assert histogram == pytest.approx(np.bincount(real[:, a], minlength=schema.sizes[a]) / n,
                                          abs=1e-6)
    synthetic = codes_of(synthesizer.sample(n, seed=5, partition_rows=7_000).compute(), schema)
    for a, histogram in enumerate(model.histograms):
        observed = np.bincount(synthetic[:, a], minlength=schema.sizes[a]) / n
        assert np.abs(observed - histogram).max() < 4 * math.sqrt(0.25 / n)
    numeric = [(pair, tau) for pair, tau in zip(pairs, exact_tau) if 3 not in pair]
    for (i, j), tau in numeric:  # the pairs with few ties
        got = kendall_tau_a(contingency(synthetic[:, i], synthetic[:, j],
                                        (schema.sizes[i], schema.sizes[j])))
        # Ties move tau-a by at most the chance t that a pair ties on i or j (it scores 0 rather
        # than ±1), once in the data and once in the synthetic rows; sampling error ~ √(4/9n).
        tie = sum((model.histograms[a] ** 2).sum() for a in (i, j))
        assert abs(got - tau) <= 2 * tie + 4 * math.sqrt(4 / (9 * n)), (i, j)
        assert 2 * tie + 4 * math.sqrt(4 / (9 * n)) < 0.07  # ρ = τ instead of sin(π/2·τ) is
    assert exact_tau[0] > 0.35  # 0.14 off on this pair, and would fail


@pytest.fixture(scope="module")
def fitted(client, data):
    return Synthesizer.create("dpcopula-kendall", SMALL_SCHEMA_PATH, epsilon=1.0, k=4,
                              noise_sampler="numpy", noise_seed=3, ledger=False).fit(data)


def test_release_metadata_writes_and_round_trip(client, fitted, tmp_path):
    assert isinstance(fitted, DPCopulaKendallSynthesizer)
    paths = fitted.write(tmp_path / "release", 5_000, seed=2, partition_rows=2_000)
    metadata = json.loads(paths["metadata"].read_text())
    privacy = metadata["privacy"]
    assert_pure_laplace(privacy, 1.0)
    assert privacy["epsilon1"] + privacy["epsilon2"] == pytest.approx(1.0)
    assert privacy["epsilon1"] / privacy["epsilon2"] == pytest.approx(4.0)
    assert "tau-a" in privacy["budget_split"] and privacy["differentially_private"] is False
    assert metadata["parameters"] == {"k": 4, "histograms": "laplace"}
    assert metadata["method"].startswith("dpcopula-kendall")
    assert metadata["n_rows"] == CORRELATED_ROWS and metadata["sampling"]["rows"] == 5_000
    frame = pd.read_parquet(paths["parquet"])
    assert frame.shape == (5_000, 4)
    model_path = fitted.save(tmp_path / "model")
    loaded = load_model(model_path)
    assert isinstance(loaded, DPCopulaModel) and loaded.method == "dpcopula-kendall"
    np.testing.assert_array_equal(loaded.correlation, fitted.model.correlation)
    assert_resamples_alike(fitted, model_path, "dpcopula-kendall", 3_000)


def test_opendp_fit_is_recorded_as_pure_dp(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = Synthesizer.create("dpcopula-kendall", SMALL_SCHEMA_PATH, epsilon=0.5,
                                     ledger=ledger, dataset_name="small").fit(data)
    assert synthesizer.model.metadata["privacy"]["differentially_private"] is True
    (entry,) = ledger.entries("small")
    assert (entry.epsilon, entry.delta, entry.mechanism) == (0.5, 0.0, "laplace")
    assert entry.counted
    with pytest.raises(ValueError, match="histogram mechanism 'wavelet'"):
        Synthesizer.create("dpcopula-kendall", SMALL_SCHEMA_PATH, histograms="wavelet",
                           ledger=False).fit(data)


def test_cli_synth_with_dpcopula(client, data, tmp_path, capsys):
    out = tmp_path / "release"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "dpcopula-kendall",
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--rows", "2000",
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0
    assert "basic composition" in capsys.readouterr().out
    assert load_model(out / "model").method == "dpcopula-kendall"
    assert len(pd.read_parquet(out / "synthetic.parquet")) == 2_000
