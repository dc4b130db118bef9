"""Privacy units (issue 57): contribution bounding on Dask, sensitivity scaled to K, the record
of the unit, and the refusals of bad units before any budget is spent."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA, correlated_frame
from scipy.stats import binom
from test_cliques import parity_frame, parity_schema, spent

from dp_dask.cli import main
from dp_dask.data.counts import partition_counts
from dp_dask.data.schema import load_schema
from dp_dask.data.units import (
    AUTO_CANDIDATES,
    AUTO_QUANTILE,
    AUTO_RULE,
    AUTO_TIE_ODDS,
    UNIT_DEFAULTS,
    PrivacyUnit,
    _bounded,
    _by_unit_then,
    auto_scores,
    bound_contributions,
    choose_max_rows,
    row_keys,
)
from dp_dask.methods.marginals.config import DEFAULTS
from dp_dask.methods.marginals.measurements import measure_all
from dp_dask.privacy.accounting import rho_budget, table_sensitivity
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.selection import calibrate_selection
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer

AUTO_SHARE = UNIT_DEFAULTS.auto_share  # the unit's default share of a choice of K "auto"
SEED = 20261127


def events(n: int = 3_000, seed: int = 0) -> pd.DataFrame:
    """SMALL_SCHEMA rows with a skewed unit column: most units 1-5 rows, a few with hundreds,
    every 97th row's unit null."""
    frame = correlated_frame(n, seed=seed)
    rng = np.random.default_rng(seed)
    frame["uid"] = (rng.zipf(1.6, n) % 400).astype(object)
    frame.loc[::97, "uid"] = None
    return frame


def frame_of(frame: pd.DataFrame, partitions: int) -> dd.DataFrame:
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_pandas(frame, npartitions=partitions)


def multiset(frame: pd.DataFrame) -> list[tuple]:
    return sorted(map(tuple, frame.astype(str).to_numpy().tolist()))


def kept_per_unit(frame: pd.DataFrame, k: int, schema) -> dict:
    """What bounding keeps of ``frame`` on one worker (one partition), by unit."""
    kept = _bounded(frame.assign(_u=frame["uid"]), schema, "uid", k, SEED)
    return {u: multiset(g.drop(columns="_u"))
            for u, g in kept.groupby(kept["_u"].fillna(-1))}


def test_at_most_k_rows_per_unit_and_nulls_form_one_unit(client):
    schema = load_schema(SMALL_SCHEMA)
    frame = events()
    ddf = frame_of(frame, 5)
    kept = bound_contributions(ddf.assign(_u=ddf["uid"]), schema, PrivacyUnit("uid", 3),
                               SEED).compute()
    assert "uid" not in kept.columns  # the unit column never goes on
    sizes = kept.groupby(kept["_u"].fillna(-1)).size()
    assert sizes.max() <= 3 and sizes[-1] == 3  # the nulls: one unit, bounded like any
    expected = frame.groupby(frame["uid"].fillna(-1)).size().clip(upper=3)
    assert (sizes.sort_index() == expected.sort_index()).all()


def test_bounding_is_a_function_of_each_units_rows_alone(client):
    """1 vs 2 workers, other partitions and row orders: the same multiset; adding a unit (and a
    null in a column elsewhere) changes nothing kept of any other unit."""
    schema = load_schema(SMALL_SCHEMA)
    frame = events()
    unit = PrivacyUnit("uid", 2)
    on_cluster = bound_contributions(frame_of(frame, 4), schema, unit, SEED).compute()
    shuffled = frame.sample(frac=1.0, random_state=1)
    other = bound_contributions(frame_of(shuffled, 7), schema, unit, SEED).compute()
    one_worker = _bounded(frame, schema, "uid", 2, SEED)  # one partition holding every unit
    assert multiset(on_cluster) == multiset(other) == multiset(one_worker)

    before = kept_per_unit(frame, 2, schema)
    newcomer = frame.iloc[:50].assign(uid="newcomer")
    after = kept_per_unit(pd.concat([frame, newcomer], ignore_index=True), 2, schema)
    assert after.pop("newcomer") and after == before


def test_a_unit_is_one_unit_whatever_its_storage_type(client):
    """Units stored as int64 in some partitions and float64 in others (7 and 7.0), and nulls as
    None, NaN and pd.NA: each is one unit, bounded to K once (a shuffle on the raw column sends
    7 and 7.0 to different partitions: up to 2K rows)."""
    schema = load_schema(SMALL_SCHEMA)
    rows = correlated_frame(360, seed=6)
    parts = []
    for p in range(6):  # 10 units of 5 rows in each partition, int64 or float64 by turns
        part = rows.iloc[p * 60:p * 60 + 50].assign(uid=np.repeat(np.arange(10), 5))
        parts.append(part if p % 2 else part.astype({"uid": np.float64}))
    nulls = rows.iloc[50:62].assign(uid=pd.Series([None, np.nan, pd.NA] * 4, dtype=object,
                                                  index=rows.index[50:62]))
    ddf = dd.from_delayed([dask.delayed(f) for f in (*parts, nulls)],
                          meta=parts[0].iloc[:0].astype({"uid": object}), verify_meta=False)
    kept = bound_contributions(ddf, schema, PrivacyUnit("uid", 3), SEED).compute()
    assert len(kept) == 11 * 3  # 3 of each of the 10 units, 3 of the nulls


def test_identical_rows_tie_without_file_position():
    # a unit's keys: its rows and the seed (identical rows numbered in any order), not positions
    schema = load_schema(SMALL_SCHEMA)
    frame = correlated_frame(4, seed=3).assign(uid=[0, 0, 1, 1])
    doubled = pd.concat([frame, frame])
    forward, backward = (row_keys(f, schema, "uid", SEED) for f in (doubled, doubled[::-1]))
    assert sorted(map(tuple, forward.T)) == sorted(map(tuple, backward.T))


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_a_moved_unit_changes_each_table_by_at_most_the_bound(neighbours):
    """Neighbours: one unit of 60 rows, all in one cell, added (or replacing a unit of other
    rows): after bounding each count table moves by at most K (2K) in L1, K (√2·K) in L2."""
    schema = load_schema(SMALL_SCHEMA)
    k = 4
    base = events(800, seed=5)
    same = correlated_frame(1, seed=9)
    person = pd.concat([same] * 60, ignore_index=True).assign(uid="person")
    if neighbours == "replace":
        victim = base["uid"].value_counts().index[0]
        removed = base[base["uid"] == victim]
        base, other = base[base["uid"] != victim], removed
    else:
        other = base.iloc[:0]
    first, second = (partition_counts(_bounded(f, schema, "uid", k, SEED), schema)
                     for f in (pd.concat([base, other]), pd.concat([base, person])))
    diff = second - first
    for i, o, s in zip(range(schema.m), schema.offsets, schema.sizes):
        one_way = np.diag(diff)[o:o + s]
        assert np.abs(one_way).sum() <= table_sensitivity(neighbours, "l1", k)
        assert np.linalg.norm(one_way) <= table_sensitivity(neighbours, "l2", k) + 1e-12
        for j, p, t in zip(range(schema.m), schema.offsets, schema.sizes):
            if j > i:
                table = diff[o:o + s, p:p + t]
                assert np.abs(table).sum() <= table_sensitivity(neighbours, "l1", k)
                assert np.linalg.norm(table) <= table_sensitivity(neighbours, "l2", k) + 1e-12


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_marginals_sigma_scales_by_k(neighbours):
    schema = load_schema(SMALL_SCHEMA)
    counts = partition_counts(correlated_frame(500, seed=2), schema)
    sigmas = {k: [m.sigma for m in measure_all(
        counts, {}, schema, 0.1, accountant=accountant, sampler="numpy",
        rng=np.random.default_rng(0), neighbours=neighbours, tables="all", max_rows=k)[0]]
        for k in (None, 1, 7) for accountant in ["zcdp"]}
    assert sigmas[None] == sigmas[1]
    assert np.allclose(np.array(sigmas[7]) / np.array(sigmas[1]), 7.0)  # zCDP: σ = Δ/√(2ρ)
    assert table_sensitivity(neighbours, "l2", 7) == 7 * table_sensitivity(neighbours, "l2")


def test_marginals_release_records_the_unit_and_hides_it(client, tmp_path):
    # the row-shaped release under a unit (opted out of units, issue 67: the default releases
    # units, their column synthetic ids, tests/test_unit_default.py) drops the unit column
    frame = events(2_000)
    fitted = Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=4.0, noise_sampler="numpy",
                                noise_seed=4, ledger=False, unit_shape=False,
                                privacy_unit={"column": "uid", "max_rows": 5}).fit(frame)
    privacy = fitted.model.metadata["privacy"]
    assert privacy["privacy_unit"]["unit"] == "uid" and privacy["privacy_unit"]["max_rows"] == 5
    assert "L2 sensitivity 7.07107 each" in privacy["budget_split"]  # √2·5
    assert "'uid'" in privacy["neighbouring"] and "n private" in privacy["neighbouring"]
    bounded_rows = int(frame.groupby(frame["uid"].fillna(-1)).size().clip(upper=5).sum())
    assert fitted.model.metadata["n_rows"] != bounded_rows  # noisy n of the bounded rows
    assert abs(fitted.model.metadata["n_rows"] - bounded_rows) < 0.2 * bounded_rows
    paths = fitted.write(tmp_path / "out", 300)
    assert "uid" not in pd.read_parquet(paths["parquet"]).columns
    row = Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=1.0, noise_sampler="numpy",
                             noise_seed=4, ledger=False).fit(frame.drop(columns="uid"))
    assert row.model.metadata["privacy"]["privacy_unit"] == {"unit": "row"}


def test_stats_laplace_scale_follows_k(tmp_path):
    frame = events(1_000)
    release = release_stats(frame, SMALL_SCHEMA, epsilon=1.0, noise_sampler="numpy",
                            noise_seed=1, ledger=False,
                            privacy_unit={"column": "uid", "max_rows": 10})
    privacy = release.metadata["privacy"]
    m = len(SMALL_SCHEMA["attributes"])
    assert math.isclose(float(privacy["budget_split"].rsplit("= ", 1)[1].split()[0]),
                        2 * 10 * m / 1.0)
    assert privacy["privacy_unit"]["max_rows"] == 10 and "n_rows" not in release.metadata


def test_the_schema_declares_the_unit(client):
    schema = {**SMALL_SCHEMA, "privacy_unit": {"column": "uid", "max_rows": 2}}
    fitted = Synthesizer.create("marginals", schema, noise_sampler="numpy", noise_seed=1,
                                ledger=False).fit(events(500))
    assert fitted.model.metadata["privacy"]["privacy_unit"]["max_rows"] == 2


@pytest.mark.parametrize(("options", "says"), [
    (["--privacy-unit", "customer", "--max-rows-per-unit", "3"], "'customer'"),  # missing
    (["--privacy-unit", "uid", "--max-rows-per-unit", "0"], "'uid'"),
    (["--privacy-unit", "uid", "--max-rows-per-unit", "2.5"], "'uid'"),
    (["--privacy-unit", "colour", "--max-rows-per-unit", "3"], "'colour'"),  # an attribute
    (["--privacy-unit", "uid", "--max-rows-per-unit", "3", "--method", "dpview"],
     "'dpview'"),
    (["--privacy-unit", "uid"], "'uid'"),  # no K
])
def test_bad_units_exit_2_before_any_budget(client, tmp_path, capsys, options, says):
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    events(300).to_csv(tmp_path / "data.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(ledger), *options,
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2 and says in capsys.readouterr().err
    assert not ledger.exists() or Ledger(ledger).entries() == []


def test_synth_cli_with_a_unit(client, tmp_path, capsys):
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    events(1_500).to_csv(tmp_path / "data.csv", index=False)
    code = main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", "4", "--rows", "200",
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0
    assert "privacy unit: 'uid', at most 4 rows each" in capsys.readouterr().out
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["privacy"]["privacy_unit"]["unit"] == "uid"
    # units by default (issue 67): the unit column holds synthetic ids, never the data's
    release = pd.read_parquet(tmp_path / "out" / "synthetic.parquet")
    assert release.groupby("uid").size().max() <= 4
    assert not set(release["uid"]) & set(events(1_500)["uid"].dropna().astype(str))
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries()
    assert (entry.unit_column, entry.unit_max_rows) == ("uid", 4)
    assert main(["ledger", "list", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    assert "'uid' <= 4 rows" in capsys.readouterr().out


def test_a_job_config_declares_the_unit(client, tmp_path, capsys):
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    events(1_500).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "job.yaml").write_text(
        "data: data.csv\nschema: schema.json\noutput: {out: out, rows: 200}\n"
        "privacy: {epsilon: 1, privacy_unit: uid, max_rows_per_unit: 4}\n"
        "ledger: {path: ledger.sqlite}\n")
    assert main(["run", str(tmp_path / "job.yaml"), "--scheduler", client.scheduler.address,
                 "--quiet"]) == 0
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries()
    assert (entry.unit_column, entry.unit_max_rows) == ("uid", 4)


def test_stats_cli_with_a_unit_and_its_refusal_under_tabular_ddp(client, tmp_path, capsys):
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    events(600).to_csv(tmp_path / "data.csv", index=False)
    common = ["stats", "--data", str(tmp_path / "data.csv"), "--schema",
              str(tmp_path / "schema.json"), "--ledger", str(tmp_path / "ledger.sqlite"),
              "--privacy-unit", "uid", "--max-rows-per-unit", "2",
              "--scheduler", client.scheduler.address, "--quiet"]
    assert main([*common, "--out", str(tmp_path / "ddp"), "--mechanism", "tabular-ddp",
                 "--network-from-noisy-tables", "0.5"]) == 2
    assert "'uid'" in capsys.readouterr().err and not Ledger(tmp_path / "ledger.sqlite").entries()
    assert main([*common, "--out", str(tmp_path / "out")]) == 0
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["privacy"]["privacy_unit"]["max_rows"] == 2 and "n_rows" not in metadata
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries()
    assert (entry.unit_column, entry.unit_max_rows) == ("uid", 2)


def test_max_rows_auto_is_a_charged_dp_quantile(client):
    """K "auto": the smallest candidate covering the 0.9 quantile of the rows per unit, chosen
    under DP with AUTO_SHARE of ρ, which the measurements no longer spend."""
    # K = 5 covers 95 % of the units, K = 3 70 % (at exactly 90 % the next candidates, which
    # cover it too, would score within one unit of it)
    sizes = pd.Series([700, 250, 40, 10], index=[1, 4, 30, 400])
    k, record = choose_max_rows(sizes, 10.0, "zcdp", sampler="numpy",
                                rng=np.random.default_rng(0))
    assert k == 5 and record["chosen"] == 5 and record["quantile"] == 0.9
    assert record["rule"] == AUTO_RULE
    fitted = Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=1.0, noise_sampler="numpy",
                                noise_seed=2, ledger=False,
                                privacy_unit={"column": "uid", "max_rows": "auto"}
                                ).fit(events(2_000))
    privacy = fitted.model.metadata["privacy"]
    chosen = privacy["privacy_unit"]["auto"]["chosen"]
    assert chosen in AUTO_CANDIDATES and privacy["privacy_unit"]["max_rows"] == chosen
    assert fitted.max_rows_ == chosen and fitted.privacy_unit == PrivacyUnit("uid", "auto")
    total = rho_budget(1.0, fitted.delta, fitted.release_accountant)
    assert privacy["privacy_unit"]["auto"]["rho"] <= AUTO_SHARE * total
    # units by default (issue 67): the row model's measurements take what the unit model
    # (unit_share of the measurements') leaves
    assert fitted.budget_plan().rho == pytest.approx((1 - AUTO_SHARE) * (1 - DEFAULTS.unit_share)
                                                 * total)


def auto_unit(**options) -> dict:
    return {"privacy_unit": {"column": "uid", "max_rows": "auto"}, "noise_sampler": "numpy",
            **options}


@pytest.mark.parametrize("path", ["pairs", "dense"])
def test_item4a_auto_records_the_whole_rho_and_its_split(client, tmp_path, path):
    """Under max_rows "auto" privacy.rho is the whole release's (the ledger's charge), split
    into the choice of K's and the measurements', on the pairs path and the dense joint's."""
    if path == "pairs":
        fitted = Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=1.0, noise_seed=2,
                                    ledger=tmp_path / "ledger.sqlite", **auto_unit()
                                    ).fit(events(2_000))
    else:  # units of 3 rows; cliques: joint takes the dense path whatever the rule expects
        frame = parity_frame().assign(uid=lambda f: (np.arange(len(f)) // 3).astype(str))
        fitted = Synthesizer.create(
            "marginals", parity_schema(), epsilon=1.0, noise_seed=0,
            ledger=tmp_path / "ledger.sqlite", accountant="zcdp", tables="all",
            config={"cliques": "joint"}, unit_shape=False,  # rows: its measurements alone
            **auto_unit()).fit(frame)  # (spent, below)
        assert "cliques" in fitted.model.metadata["privacy"]  # the dense joint
    privacy = fitted.model.metadata["privacy"]
    total = rho_budget(1.0, fitted.delta, fitted.release_accountant)
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries()
    assert privacy["rho"] == pytest.approx(total) and entry.rho == pytest.approx(total)
    split = privacy["rho_split"]
    assert {k: split[k] for k in ("max_rows_choice", "measurements")} == pytest.approx(
        {"max_rows_choice": AUTO_SHARE * total, "measurements": (1 - AUTO_SHARE) * total})
    if path == "pairs":  # units by default (issue 67): the unit model's and the row model's
        assert split["unit_model"] + split["row_model"] == pytest.approx(split["measurements"])
    assert privacy["privacy_unit"]["auto"]["rho"] <= privacy["rho_split"]["max_rows_choice"]
    assert (f"rho {AUTO_SHARE * total:.6g} to choosing max_rows (privacy_unit.auto), then "
            f"rho {(1 - AUTO_SHARE) * total:.6g} to the measurements") in privacy["budget_split"]
    if path == "dense":  # the measurements' charges (zCDP, σ at K rows) sum to their share
        k = privacy["privacy_unit"]["max_rows"]
        assert spent(fitted) * k**2 == pytest.approx(privacy["rho_split"]["measurements"])


def test_item5_a_refit_records_what_a_fresh_fit_does(client, tmp_path):
    """The K "auto" chooses is learned state (max_rows_): a fit on units of 1 row, then one on
    units of 6 rows, records what a fresh synthesizer fitted on the latter does, in the model's
    metadata and the ledger, and privacy_unit stays as given."""
    rows = correlated_frame(1_200, seed=5)
    ones = rows.assign(uid=np.arange(len(rows)))
    sixes = rows.assign(uid=np.arange(len(rows)) // 6)

    def synthesizer(name: str) -> Synthesizer:
        return Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=8.0, noise_seed=3,
                                  ledger=tmp_path / f"{name}.sqlite", **auto_unit())

    def recorded(fitted: Synthesizer) -> tuple[dict, object]:
        metadata = {key: value for key, value in fitted.model.metadata.items()
                    if key not in ("created", "ledger")}  # a time, a run id
        entry = fitted.ledger.entries()[-1]
        return metadata, replace(entry, id=None, run_id="", created="")

    refitted = synthesizer("refit").fit(ones)
    first_k = refitted.model.metadata["privacy"]["privacy_unit"]["max_rows"]
    refitted.fit(sixes)
    fresh = synthesizer("fresh").fit(sixes)
    assert recorded(refitted) == recorded(fresh)
    assert refitted.ledger.entries()[-1].unit_max_rows is None  # "auto", as given
    assert refitted.privacy_unit == PrivacyUnit("uid", "auto") == fresh.privacy_unit
    assert (refitted.max_rows_, refitted.unit_choice_) == (fresh.max_rows_, fresh.unit_choice_)
    assert first_k != refitted.max_rows_  # the second fit learned another K


def test_item7_auto_prefers_the_smallest_k_covering_the_quantile():
    """1,000 units of exactly 6 rows at ε = 1: every candidate from 10 up covers them all, and
    the draw was uniform among them (K = 1,000 as likely as 10). Now K = 10 unless the noise
    overturns the rule's scores, with the probability these give."""
    sizes = pd.Series({6: 1_000})
    unit = Synthesizer.create("marginals", SMALL_SCHEMA, epsilon=1.0, ledger=False,
                              privacy_unit={"column": "uid", "max_rows": "auto"})
    selection = calibrate_selection(unit.unit_rho, float(AUTO_QUANTILE[1]),
                                    unit.release_accountant)
    # The rule's scores (units.choose_max_rows): below 10 no unit is covered (1,000 units short
    # of 900: 10·1,000 − 0); 10 covers and 5 does not (0); past 10 the candidate before covers
    # by 10·1,000 − 9·1,000 = 1,000 (1,001). The prior divides each one's odds by 2.
    scores = np.array([9_000.0] * 4 + [0.0] + [1_001.0] * 6)
    odds = np.exp(-scores / selection.scale) / AUTO_TIE_ODDS ** np.arange(len(AUTO_CANDIDATES))
    miss = 1 - odds[AUTO_CANDIDATES.index(10)] / odds.sum()  # P(K != 10): 0.163 (exact, δ 2^-30)
    assert miss < 0.2
    chosen = [choose_max_rows(sizes, unit.unit_rho, unit.release_accountant, sampler="numpy",
                              rng=np.random.default_rng(seed))[0] for seed in range(20)]
    # misses beyond 8 of 20 have probability binom.sf(8, 20, miss) < 0.003 (uniform over the
    # 7 candidates from 10: binom.cdf(8, 20, 6/7) = 3e-6)
    assert binom.sf(8, 20, miss) < 0.003
    assert sum(k != 10 for k in chosen) <= 8, chosen


def test_synth_cli_with_max_rows_auto(client, tmp_path, capsys):
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    events(1_000).to_csv(tmp_path / "data.csv", index=False)
    assert main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", "auto", "--rows", "100", "--noise-sampler", "numpy",
                 "--noise-seed", "3", "--scheduler", client.scheduler.address,
                 "--quiet"]) == 0
    unit = json.loads((tmp_path / "out" / "metadata.json").read_text())["privacy"][
        "privacy_unit"]
    assert unit["max_rows"] == unit["auto"]["chosen"] in AUTO_CANDIDATES
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries()
    assert entry.unit == "'uid' <= auto rows"


def test_item7_the_rules_scores_move_by_at_most_k_when_a_unit_changes():
    """auto_scores' L∞ sensitivity, which the selection is calibrated to: one unit added,
    removed or replaced moves no score by more than k = 10 (and some by exactly k), over units
    whose row counts straddle the candidates, the quantile's boundary included."""
    levels = AUTO_QUANTILE[1]
    rng = np.random.default_rng(11)
    rows_of = np.array([1, 2, 3, 4, 5, 6, 10, 11, 20, 30, 50, 60, 999, 1000, 1001])
    worst = 0.0
    for _ in range(300):
        units = rng.choice(rows_of, size=int(rng.integers(1, 40)))
        scores = auto_scores(pd.Series(units).value_counts())
        one = rng.choice(rows_of)
        replaced = units.copy()
        replaced[rng.integers(len(units))] = one
        for neighbour in (np.append(units, one), units[1:], replaced):
            moved = np.abs(auto_scores(pd.Series(neighbour).value_counts()) - scores).max()
            worst = max(worst, moved)
    assert worst == levels


def test_item3_stats_statements_name_the_unit(tmp_path):
    # Before, a release under a unit said "neighbouring datasets differ in one row (replaced), n
    # public" in its statement (and its histograms.json's notion) while its neighbouring field
    # named the unit.
    release = release_stats(events(300), SMALL_SCHEMA, epsilon=1.0, noise_sampler="numpy",
                            noise_seed=1, ledger=False,
                            privacy_unit={"column": "uid", "max_rows": 10})
    privacy = release.metadata["privacy"]
    assert privacy["neighbouring"].startswith("replace all rows of one 'uid' (at most 10")
    written = json.loads(release.write(tmp_path)["json"].read_text())["notion"]
    for statement in (privacy["statement"], privacy["label"], written, privacy["budget_split"]):
        assert "one row" not in statement and "n public" not in statement, statement
    assert privacy["statement"].endswith(privacy["neighbouring"])
    assert written == privacy["statement"]


def test_item4_each_unit_keeps_a_uniform_subset_of_its_rows():
    # Units of 4 rows, two code combinations twice each in every unit, K = 2. Before, the key
    # hashed the codes alone: every unit preferred the same combination and kept both of its
    # rows (one combination kept 1000 times of 1000). Now each unit keeps a uniform 2-subset of
    # its rows: the first combination 2, 1 or 0 times with probabilities 1/6, 4/6, 1/6
    # (hypergeometric: mean 1, variance 1/3 per unit).
    schema = load_schema({"attributes": [
        {"name": "colour", "type": "categorical", "categories": ["red", "blue"]},
        {"name": "flag", "type": "categorical", "categories": ["yes", "no"]}]})
    units = 500
    frame = pd.DataFrame({"uid": np.repeat(np.arange(units), 4),
                          "colour": np.tile(["red", "blue", "red", "blue"], units),
                          "flag": np.tile(["yes", "no", "yes", "no"], units)})
    kept = _bounded(frame, schema, "uid", 2, SEED)
    assert len(kept) == 2 * units
    red = int(kept["colour"].eq("red").sum())
    # the kept rows of "red, yes": mean 500, standard deviation sqrt(500/3) = 12.9 (the
    # binomial's 15.8 for 1000 fair draws bounds it): within 5 binomial deviations
    assert abs(red - units) <= 5 * math.sqrt(2 * units * 0.25), red
    assert set(kept.groupby(kept.index // 4).size()) == {2}  # and 2 of every unit


@pytest.mark.parametrize("schema_of", [lambda: load_schema(SMALL_SCHEMA), lambda: None])
def test_item1_bounding_keeps_rows_in_their_partitions(client, schema_of):
    """The same rows in 1, 3 and 7 partitions, each in another order, with duplicated rows
    (identical codes or values in one unit, spread over partitions): the kept multiset is what
    one partition holding every unit keeps (the shuffle's rule), and every kept row stays in
    its own partition, in its order. Before, the rows were shuffled on the unit: 7 input
    partitions gave output partitions holding rows of other ones."""
    schema = schema_of()
    base = events(2_000, seed=11)
    frame = pd.concat([base, base.iloc[:600]], ignore_index=True)  # identical rows
    expected = multiset(_bounded(frame, schema, "uid", 3, SEED))
    for partitions, order in ((1, 0), (3, 1), (7, 2)):
        shuffled = frame.sample(frac=1.0, random_state=order)
        ddf = frame_of(shuffled, partitions)
        bounded = bound_contributions(ddf, schema, PrivacyUnit("uid", 3), SEED)
        assert bounded.npartitions == partitions
        kept = bounded.compute()
        assert multiset(kept) == expected
        for number in range(partitions):  # each partition's kept rows: a subsequence of its own
            given = ddf.partitions[number].compute()
            held = bounded.partitions[number].compute()
            assert np.all(np.diff(given.index.get_indexer(held.index)) > 0)
            pd.testing.assert_frame_equal(held, given.drop(columns="uid").loc[held.index])


def test_bounding_under_another_scheduler_beside_a_client(client):
    """The audit computes its neighbours with dask's synchronous scheduler while the session's
    client runs: bounding then shuffles by tasks (P2P needs its tasks on a worker). Before, it
    chose P2P by the client's presence alone and failed ("requires Dask's distributed
    scheduler")."""
    frame = events(600, seed=12)
    expected = multiset(_bounded(frame, None, "uid", 2, SEED))
    with dask.config.set(scheduler="synchronous"):
        kept = bound_contributions(frame_of(frame, 3), None, PrivacyUnit("uid", 2), SEED).compute()
    assert multiset(kept) == expected


def test_item4_a_bad_bound_or_a_missing_unit_column_is_refused_before_reading():
    """K <= 0 built directly (not through PrivacyUnit.of), or a unit column the input lacks:
    a ValueError naming the column before any row is read. Before, PrivacyUnit("uid", 0) was
    accepted and bounding kept no row at all, and a missing column failed only when computed."""
    for k in (0, -2):
        with pytest.raises(ValueError, match="privacy unit 'uid': max_rows must be"):
            PrivacyUnit("uid", k)
    ddf = frame_of(events(50), 2).drop(columns="uid")
    with pytest.raises(ValueError, match="lacks the privacy unit column 'customer'"):
        bound_contributions(ddf, load_schema(SMALL_SCHEMA), PrivacyUnit("customer", 3), SEED)


def test_issue67_one_key_sort_orders_as_the_lexsort_it_replaces():
    """Where a unit's rows meet, each order is one argsort of the unit's id above its hash's top
    40 bits: it must equal the lexsort by unit then full hash (then the ties) that it replaced,
    also where two rows of a unit share those 40 bits with different hashes, or share a hash,
    and for signed hashes (a negative int64 sorts first)."""
    rng = np.random.default_rng(0)
    units = rng.integers(0, 50, 20_000)
    values = rng.integers(-2**63, 2**63 - 1, 20_000, dtype=np.int64)
    np.testing.assert_array_equal(_by_unit_then(units, values), np.lexsort((values, units)))
    near = values.copy()  # top bits shared, low bits not: the one key cannot tell them apart
    near[1::2] = (near[::2] & ~np.int64(0xFFFFFF)) | rng.integers(0, 2**24, 10_000)
    units[1::2] = units[::2]
    np.testing.assert_array_equal(_by_unit_then(units, near), np.lexsort((near, units)))
    tied, ties = values.copy(), rng.integers(0, 3, 20_000)
    tied[1::2] = tied[::2]
    np.testing.assert_array_equal(_by_unit_then(units, tied, ties),
                                  np.lexsort((ties, tied, units)))
