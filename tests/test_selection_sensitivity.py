"""Selection steps under the neighbouring notions (issue 54, findings 2 and 9).

An exponential-mechanism step calibrated to add/remove scores (sensitivity Δ) meets scores moving
by 2Δ when a row is replaced: its replace-one charge is that of twice its ε (4× its ρ in zCDP),
not the Gaussian measurements' 2× ρ. And the scores it reads must move by at most the Δ it is
calibrated to as computed, floating point included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.counts import exact_answer
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.measurements import measure_all
from dp_dask.methods.marginals.select_pairs import pair_scores
from dp_dask.privacy.accounting import epsilon_spent, rho_budget, table_sensitivity
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.selection import _gdp_charge, _threshold_measurement, calibrate_threshold
from dp_dask.synthesizer import Synthesizer

NAMES = ("a", "b", "c", "d", "e")
EPSILON, DELTA = 1.0, 1e-9


def binary_schema() -> Schema:
    return Schema.from_json({"schema_version": 1, "name": "binary", "attributes": [
        {"name": name, "type": "categorical", "categories": ["0", "1"]} for name in NAMES]})


def binary_frame(n: int = 3_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2, (n, len(NAMES)))
    codes[:, 1] = np.where(rng.random(n) < 0.8, codes[:, 0], codes[:, 1])
    return pd.DataFrame({name: codes[:, i].astype(str) for i, name in enumerate(NAMES)})


def fitted(tmp_path, **options) -> tuple[Synthesizer, Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = Synthesizer.create("marginals", binary_schema(), epsilon=EPSILON, delta=DELTA,
                                     neighbours="add_remove", noise_sampler="numpy",
                                     noise_seed=0, ledger=ledger, dataset_name="binary",
                                     **options)
    return synthesizer.fit(binary_frame()), ledger


def assert_charged(synthesizer: Synthesizer, ledger: Ledger, rho: float) -> None:
    """The ledger entry and the release's replace_one_row both at replace-one ρ ``rho``."""
    epsilon = epsilon_spent(rho, DELTA, synthesizer.release_accountant)
    record = synthesizer.model.metadata["privacy"]["replace_one_row"]
    (entry,) = ledger.entries("binary")
    assert record["rho"] == pytest.approx(rho, rel=1e-9)
    assert record["epsilon"] == pytest.approx(epsilon, rel=1e-9)
    assert (entry.rho, entry.epsilon) == (record["rho"], record["epsilon"])
    assert f"rho {record['rho']:.6g} as replace one row" in (
        synthesizer.model.metadata["privacy"]["budget_split"])


def tree_selections(tree: dict) -> list[tuple[float, float, int]]:
    """(ρ, ε, rounds) of the tree's selection and of its refinement's, as recorded."""
    refined = tree["refinement"]
    return [(tree["rho_per_round"], tree["epsilon_per_round"], tree["rounds"]),
            (refined["rho_select_per_round"], refined["epsilon_per_round"], refined["rounds"])]


@pytest.mark.parametrize("accountant", ["exact", "zcdp"])
def test_a_tree_plan_charges_its_selections_at_twice_their_sensitivity(client, tmp_path,
                                                                       accountant):
    synthesizer, ledger = fitted(tmp_path, tables="tree", accountant=accountant)
    privacy = synthesizer.model.metadata["privacy"]
    steps = tree_selections(privacy["tables"])
    selected = sum(rho * rounds for rho, _, rounds in steps)
    # zCDP: ε²/8 at twice ε, 4× ρ; exact: the GDP bound of the 2ε-DP step
    as_replace = sum(rounds * (4 * rho if accountant == "zcdp" else _gdp_charge(2 * epsilon))
                     for rho, epsilon, rounds in steps)
    rho = 2 * (privacy["rho"] - selected) + as_replace
    assert_charged(synthesizer, ledger, rho)
    if accountant == "exact":  # issue 54's figure: 1.44 when every step was doubled
        assert epsilon_spent(2 * privacy["rho"], DELTA, "exact") == pytest.approx(1.44, abs=0.01)
        assert privacy["replace_one_row"]["epsilon"] == pytest.approx(1.59, abs=0.01)


def test_adaptive_rounds_charge_their_selections_at_twice_their_sensitivity(client, tmp_path):
    synthesizer, ledger = fitted(tmp_path, tables="all", rounds=3, accountant="zcdp")
    privacy = synthesizer.model.metadata["privacy"]
    selected = sum(r["rho_select"] for r in privacy["adaptive"]["measured"])
    assert_charged(synthesizer, ledger, 2 * (privacy["rho"] - selected) + 4 * selected)


def test_a_plan_without_selection_is_charged_twice_its_rho(client, tmp_path):
    synthesizer, ledger = fitted(tmp_path, tables="all")
    assert_charged(synthesizer, ledger, 2 * synthesizer.model.metadata["privacy"]["rho"])


def test_auto_tables_are_charged_as_the_tree_they_may_choose(client, tmp_path):
    # n is private under add/remove: whether the noisy n sends the schema to a tree is known
    # only after the noise, so the ledger charges the plan that costs more
    tree, _ = fitted(tmp_path / "tree", tables="tree")
    auto, ledger = fitted(tmp_path / "auto")
    assert "tables" not in auto.model.metadata["privacy"]  # this data stayed on all pairs
    assert_charged(auto, ledger, tree.model.metadata["privacy"]["replace_one_row"]["rho"])


# --- finding 9: the scores as computed move by at most the sensitivity they are charged at ----


def neighbours(rng: np.random.Generator, schema: Schema, n: int) -> tuple[np.ndarray, ...]:
    """The d×d count matrices of a random table and of it with one row added."""
    codes = rng.integers(0, schema.sizes, (n, schema.m))
    extra = rng.integers(0, schema.sizes, (1, schema.m))
    return tuple(count_matrix(c, schema) for c in (codes, np.vstack([codes, extra])))


def count_matrix(codes: np.ndarray, schema: Schema) -> np.ndarray:
    dummies = np.zeros((len(codes), schema.d), dtype=np.int64)
    dummies[np.arange(len(codes))[:, None], schema.offsets + codes] = 1
    return dummies.T @ dummies


def test_tree_scores_move_by_at_most_one_when_a_row_is_added():
    schema = Schema.from_json({"schema_version": 1, "name": "s", "attributes": [
        {"name": f"x{k}", "type": "categorical", "categories": [str(v) for v in range(size)]}
        for k, size in enumerate((7, 11, 13))]})
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        counts, added = neighbours(rng, schema, int(rng.integers(100, 5_000)))
        # the noisy histograms and n̂ are fixed between the neighbours (post-processing)
        one_way = [exact_answer(counts, schema, (a,)) + rng.normal(0, 3, size)
                   for a, size in enumerate(schema.sizes)]
        rows = float(counts[0, :schema.sizes[0]].sum()) + rng.normal(0, 5)
        before, after = (pair_scores(c, schema, one_way, rows) for c in (counts, added))
        worst = max(worst, max(abs(after[p] - before[p]) for p in before))
    assert worst <= 1.0


def test_selection_scores_move_by_at_most_their_sensitivity():
    # imported here: before issue 54 the refinement and the rounds computed these inline
    from dp_dask.privacy.selection import selection_scores

    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(2_000):
        cells = int(rng.integers(2, 300))
        exact = rng.integers(0, 10**6, cells)
        model = exact + rng.normal(0, 50, cells)
        moved = exact.copy()
        moved[rng.integers(cells)] += 1
        bias, weight = float(rng.uniform(0, 1e4)), float(rng.integers(1, 5))
        before, after = (selection_scores([e], [model], np.array([bias]), np.array([weight]))[0]
                         for e in (exact, moved))
        worst = max(worst, abs(after - before) / weight)
    assert worst <= 1.0
    assert adaptive.SCORE_L1_SENSITIVITY["add_remove"] == 1.0


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_item8c_tree_selections_are_calibrated_at_their_scores_l1_sensitivity(neighbours):
    """The refinement scores a table's L1 error against a model and a bias fixed between
    neighbours, as the tree scores one against independence: both move by the table's own L1
    change, 2 for a replaced row (1 added or removed) and K times that for a unit of K rows,
    not the squared L2 sensitivity (2K², K²). The Gumbel scale follows: K times a K = 1 unit's."""
    schema = binary_schema()
    codes = np.column_stack([binary_frame(2_000)[name].astype(int) for name in NAMES])
    counts = count_matrix(codes, schema)
    rho = rho_budget(EPSILON, DELTA, "exact")
    scales = {}
    for max_rows in (None, 1, 3):
        _, _, tree = measure_all(counts, {}, schema, rho, accountant="exact", sampler="numpy",
                                 rng=np.random.default_rng(0), neighbours=neighbours,
                                 tables="tree", max_rows=max_rows)
        l1 = table_sensitivity(neighbours, "l1", max_rows)
        for selection in (tree.selection, tree.refinement.selection):
            assert selection.sensitivity == pytest.approx(l1, rel=1e-12)
            # the scale is calibrated at that sensitivity: 2Δ/ε (report-noisy-max, either sign)
            assert selection.scale == pytest.approx(2 * l1 / selection.epsilon, rel=1e-6)
        assert f"sensitivity {l1:g}" in tree.refinement.to_json(schema)["score"]
        scales[max_rows] = tree.refinement.selection.scale
    assert scales[3] == pytest.approx(3 * scales[1], rel=1e-6)


@pytest.mark.parametrize("epsilon, delta, bound", [(1.9, 0.5, 1), (32.0, 5e-7, 1), (80.0, 1e-6, 2)])
def test_item2_threshold_at_its_lowest_when_that_meets_delta(epsilon, delta, bound):
    # Before, OpenDP's search raised "the decision boundary is below the lower bound" when the
    # lowest threshold (the L∞ distance) already met δ: a draft at a large ε or δ crashed.
    calibration = calibrate_threshold(epsilon, delta, bound)
    assert calibration.threshold == bound  # the least one OpenDP allows
    loss = _threshold_measurement(calibration.scale, calibration.threshold).map(
        calibration.distance)  # OpenDP's own privacy map, not ours
    assert loss[1] <= delta and loss[0] == pytest.approx(epsilon)


def test_item2_threshold_search_unchanged_below_its_large_budgets():
    # where δ needs more, the least threshold meeting it: one less misses it
    calibration = calibrate_threshold(2.0, 1e-6)
    below = _threshold_measurement(calibration.scale, calibration.threshold - 1).map(
        calibration.distance)
    assert calibration.threshold == 15 and below[1] > 1e-6
