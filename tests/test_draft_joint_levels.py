"""Issue 65, text levels at total ε = 1: the text columns' levels released by one Gaussian
threshold over all of them at once, in two rounds, the second weighted row by row towards the
values still unreleased (dp_dask.data.draft_text), and its privacy accounting."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pandas as pd
from scipy.stats import norm

from dp_dask.data.draft import draft_schema
from dp_dask.data.draft_text import WEIGHT_SCALE, row_weights, text_plan
from dp_dask.one_command import DRAFT_SHARE
from dp_dask.privacy.selection import zcdp_epsilon
from dp_dask.synthesizer import DEFAULT_DELTA

ROWS, TEXTS, RARE = 25_000, 9, 300  # a level of 1.2 % in each of nine text columns


def _frame() -> pd.DataFrame:
    """Nine text columns of three large levels (50/30/20 %) and one of 300 rows (1.2 %), whose
    rows hold the largest level in every other column (the nine rare blocks are disjoint), and
    a numeric column beside them."""
    rng = np.random.default_rng(0)
    columns: dict[str, np.ndarray] = {}
    for j in range(TEXTS):
        values = rng.choice(["a", "b", "c"], ROWS, p=[0.5, 0.3, 0.2]).astype(object)
        values[:TEXTS * RARE] = "a"
        values[j * RARE:(j + 1) * RARE] = "rare"
        columns[f"t{j}"] = values
    columns["amount"] = rng.lognormal(3, 1, ROWS).round(2)
    return pd.DataFrame(columns)


def test_item_levels_nine_text_columns_keep_their_1_2_percent_level_at_total_epsilon_1(
        tmp_path):
    """25,000 rows, nine text columns each with a 300-row level (1.2 %) and a numeric column,
    drafted at the one command's share of a total ε = 1 and δ = 2⁻³⁰ (DRAFT_SHARE): every
    column keeps its 1.2 % level.

    Each rare row's other columns hold a level of at least 20 % (released by the first round:
    its threshold is ~1,300 rows, those levels 5,000), so its weight in the second round is 1
    and the level's weighted count is exactly 300 rows: it is lost only if its normal noise
    falls below the second round's threshold, P = Φ((T − 300)/σ) from the record (< 1e-3 for
    the nine; ~6e-5 each); the seed is fixed. On 652615b each text column's ε was 0.038, Laplace
    thresholds composed over nine columns (the second round ~2,100 rows): every rare level was
    lost."""
    _frame().to_parquet(tmp_path / "levels.parquet")
    draft = draft_schema(tmp_path / "levels.parquet", dp_epsilon=DRAFT_SHARE,
                         dp_delta=DRAFT_SHARE * DEFAULT_DELTA, ledger=False,
                         noise_sampler="numpy", noise_seed=0)
    categories = {a["name"]: a.get("categories") for a in draft.schema["attributes"]}
    kept = [j for j in range(TEXTS) if "rare" in (categories[f"t{j}"] or [])]
    assert kept == list(range(TEXTS)), f"1.2 % levels kept in columns {kept} of {TEXTS}"
    for j in range(TEXTS):  # in noisy order: the largest first, the rare one last
        assert categories[f"t{j}"] == ["a", "b", "c", "rare"]
    second = draft.schema["drafted_under_dp"]["text"]["levels"]["rounds"][1]
    lost = TEXTS * norm.cdf((second["threshold"] - RARE * WEIGHT_SCALE) / second["scale"])
    assert lost < 1e-3


def test_item_levels_joint_threshold_accounting_matches_its_sensitivity_and_noise(tmp_path):
    """The record of the joint mechanism: each round's (ρ, δ) is OpenDP's map of a Gaussian
    threshold of its recorded scale and threshold at the distance a replaced row gives (m text
    columns: L0 2m, L2 √(2m) unweighted and √2 rows weighted, L∞ 1 row), the rounds' ρ sum to the
    recorded ρ, and its conversion (OpenDP's zCDP → (ε, δ)) gives the recorded ε at the recorded
    δ; with the distinct counts they stay within the text step's (ε, δ). Under a unit of K rows
    every distance is K times a row's."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({f"t{j}": rng.choice(list("abcdefg"), 4_000) for j in range(4)})
    frame.to_parquet(tmp_path / "four.parquet")
    draft = draft_schema(tmp_path / "four.parquet", dp_epsilon=1.0, dp_delta=1e-8,
                         ledger=False, noise_sampler="numpy", noise_seed=0)
    text = draft.schema["drafted_under_dp"]["text"]
    levels, m = text["levels"], 4
    dp.enable_features("contrib")
    domain = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=dp.i64))
    metric = dp.l02inf_distance(dp.absolute_distance(T=dp.i64))
    distances = [(2 * m, math.ceil(math.sqrt(2 * m)), 1),
                 (2 * m, math.ceil(math.sqrt(2) * WEIGHT_SCALE), WEIGHT_SCALE)]
    rhos, deltas = [], []
    for step, distance, exact in zip(levels["rounds"], distances,
                                     [math.sqrt(2 * m), math.sqrt(2) * WEIGHT_SCALE]):
        # OpenDP takes an integer L2 distance (rounded up), at most √L0 · L∞
        sensitivity = min(distance[1], math.sqrt(distance[0]) * distance[2])
        assert exact <= sensitivity <= exact + 1
        measurement = dp.m.make_gaussian_threshold(domain, metric, scale=step["scale"],
                                                   threshold=step["threshold"])
        rho, delta = measurement.map(distance)
        assert math.isclose(rho, step["rho"], rel_tol=1e-9)
        assert math.isclose(rho, sensitivity**2 / (2 * step["scale"] ** 2), rel_tol=1e-9)
        assert delta <= step["delta"]
        rhos.append(rho)
        deltas.append(delta)
    assert math.isclose(sum(rhos), levels["rho"], rel_tol=1e-9)
    assert math.isclose(zcdp_epsilon(sum(rhos), levels["conversion_delta"]),
                        levels["epsilon"], rel_tol=1e-9)
    assert text["distinct_values"]["epsilon"] + levels["epsilon"] <= text["epsilon"] + 1e-12
    assert levels["conversion_delta"] + sum(deltas) <= levels["delta"] <= text["delta"]
    unit = text_plan(1.0, 1e-8, m, bound=2)
    assert unit.first.distance == (4 * m, math.ceil(2 * math.sqrt(2 * m)), 2)
    assert unit.second.distance == (4 * m, math.ceil(2 * math.sqrt(2) * WEIGHT_SCALE),
                                    2 * WEIGHT_SCALE)


def test_item_levels_row_weights_have_unit_norm_at_most():
    """Each row's second-round weights have an L2 norm of at most WEIGHT_SCALE whatever its
    unreleased columns (the sensitivity the second round is calibrated to)."""
    unreleased = np.random.default_rng(2).random((1_000, 9)) < 0.4
    weights = row_weights(unreleased)
    norms = np.sqrt(unreleased.sum(axis=1) * weights.astype(float) ** 2)
    assert norms.max() <= WEIGHT_SCALE
    assert (weights[unreleased.sum(axis=1) == 1] == WEIGHT_SCALE).all()
