"""Unit-shaped releases by default under a privacy unit, with unit ids that never collide
(issue 67, second part): ids distinct by construction, the default and its opt-out, the CLI."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from test_unit_shape import PANEL_SCHEMA, panel

from dp_dask.cli import main
from dp_dask.data.ids import IdColumn, distinct_ids, id_space
from dp_dask.data.schema import load_schema
from dp_dask.exceptions import DpDaskWarning
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer

K = 6
SEVEN_DIGITS = {**PANEL_SCHEMA, "ids": [{"name": "uid", "dtype": "string", "format": "#" * 7}]}


def runs(ids: pd.Series) -> int:
    """The units of a release whose units' rows are adjacent: its runs of one id."""
    values = ids.to_numpy()
    return int(1 + (values[1:] != values[:-1]).sum())


def test_item1_unit_ids_never_collide(client):
    """150 k units drawn over 4 partitions with ids of 7 digits (10⁷ ids: random ids would
    share about u² / 2·10⁷ ≈ 1,000 ids, merging units past K rows): every unit has its own
    id, and the ids look random: first digits uniform, no trend along the release."""
    fitted = Synthesizer.create("marginals", load_schema(SEVEN_DIGITS), epsilon=1.0,
                                noise_sampler="numpy", noise_seed=11, ledger=False,
                                privacy_unit={"column": "uid", "max_rows": K}).fit(panel(800))
    release = fitted.sample(400_000, seed=3, partition_rows=100_000).compute()
    units = runs(release["uid"])
    assert units > 100_000
    assert release["uid"].nunique() == units  # no two units share an id
    assert release.groupby("uid").size().max() <= K
    first = release["uid"].drop_duplicates()
    assert (first.str.len() == 7).all()
    shares = first.str[0].value_counts(normalize=True)
    # 10 digits over 150 k units: each share 0.1 ± 0.0008 (one σ); sequential ids would all
    # start with 0 (the sequence numbers stay below 4·10⁵ of 10⁷)
    assert len(shares) == 10 and np.abs(shares - 0.1).max() < 0.01
    trend = np.corrcoef(np.arange(len(first)), first.astype(np.int64))[0, 1]
    assert abs(trend) < 0.02  # ~1/√150 k = 0.0026 for ids in random order


@pytest.mark.parametrize(("column", "rows"), [
    (IdColumn("x", "string", "@###"), 26_000),  # the whole space: a bijection
    (IdColumn("x", "int64", "#####"), 90_000),  # first digit 1-9: 9·10⁴ ids
    (IdColumn("x", "string", "#" * 25), 50_000),  # past 2⁶² ids: the last 18 digits permuted
])
def test_item1_distinct_ids_of_any_format(column, rows):
    assert id_space(column) >= rows
    ids = distinct_ids(column, np.arange(rows), np.random.SeedSequence(5),
                       np.random.default_rng(0))
    assert len(set(ids)) == rows
    assert all(len(str(i)) == len(column.format) for i in ids[:100])
    again = distinct_ids(column, np.arange(rows), np.random.SeedSequence(5),
                         np.random.default_rng(0))
    assert list(again) == list(ids)  # a function of the key alone
    with pytest.raises(ValueError, match="'x'"):
        distinct_ids(column, np.array([id_space(column)]), np.random.SeedSequence(5),
                     np.random.default_rng(0))


def test_item1_release_larger_than_the_id_format_is_refused(client):
    small = {**PANEL_SCHEMA, "ids": [{"name": "uid", "dtype": "string", "format": "##"}]}
    fitted = Synthesizer.create("marginals", load_schema(small), epsilon=1.0,
                                noise_sampler="numpy", noise_seed=11, ledger=False,
                                privacy_unit={"column": "uid", "max_rows": K}).fit(panel(300))
    with pytest.raises(ValueError, match="'uid'.*'##' holds 100 distinct ids"):
        fitted.sample(500, seed=1).compute()


def fitted(frame: pd.DataFrame, schema: dict = PANEL_SCHEMA, **options) -> Synthesizer:
    return Synthesizer.create("marginals", load_schema(schema), epsilon=1.0,
                              noise_sampler="numpy", noise_seed=11, ledger=False,
                              privacy_unit={"column": "uid", "max_rows": K},
                              **options).fit(frame)


def test_item2_units_by_default_under_a_privacy_unit(client):
    """A privacy unit alone gives synthetic units (the same release as unit_shape=True);
    unit_shape=False opts out (rows, no unit column); without a unit, rows as before."""
    frame = panel(600)
    default = fitted(frame)
    assert default.unit_shape is None and default.unit_shape_
    assert "unit_shape" in default.model.metadata
    release = default.sample(seed=3).compute()
    assert release.equals(fitted(frame, unit_shape=True).sample(seed=3).compute())
    assert release.groupby("uid").size().max() <= K and release["uid"].nunique() < len(release)
    assert (release.groupby("uid")[["gender", "region"]].nunique() == 1).all(axis=None)
    rows = fitted(frame, unit_shape=False)
    assert not rows.unit_shape_ and "unit_shape" not in rows.model.metadata
    assert "uid" not in rows.sample(seed=3).compute().columns
    no_unit = Synthesizer.create("marginals", load_schema(PANEL_SCHEMA), epsilon=1.0,
                                 noise_sampler="numpy", noise_seed=11, ledger=False
                                 ).fit(frame.drop(columns="uid"))
    assert not no_unit.unit_shape_ and "unit_shape" not in no_unit.model.metadata


CONSTRAINED = {**PANEL_SCHEMA, "constraints": [
    {"name": "f-not-c", "forbid": {"gender": ["f"], "region": ["c"]}}]}


def test_item2_constraints_fall_back_to_rows_or_refuse(client):
    """A schema with constraints: the default releases rows (a warning says why), the
    constraint honoured; unit_shape=True is refused before any data is read."""
    frame = panel(600)
    frame = frame[~((frame["gender"] == "f") & (frame["region"] == "c"))]
    with pytest.warns(DpDaskWarning, match="releasing rows, not units.*f-not-c"):
        rows = fitted(frame, CONSTRAINED)
    assert not rows.unit_shape_
    release = rows.sample(seed=1).compute()
    assert not ((release["gender"] == "f") & (release["region"] == "c")).any()
    with pytest.raises(ValueError, match="unit_shape: schema 'panel' declares constraints"):
        fitted("/nonexistent.csv", CONSTRAINED, unit_shape=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpDaskWarning)  # opted out: nothing to warn about
        assert not Synthesizer.create(
            "marginals", load_schema(CONSTRAINED), ledger=False, unit_shape=False,
            privacy_unit={"column": "uid", "max_rows": K})._units_released()


def synth(tmp_path, client, *options: str) -> int:
    return main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", str(K), *options,
                 "--scheduler", client.scheduler.address, "--quiet"])


def test_item2_where_and_balance_release_rows_unless_units_are_asked(client, tmp_path, capsys):
    """synth --where under a privacy unit: rows (units are drawn whole), with a warning; with
    unit_shape true given: refused, exit 2, nothing spent."""
    (tmp_path / "schema.json").write_text(json.dumps(PANEL_SCHEMA))
    panel(400).to_csv(tmp_path / "data.csv", index=False)
    assert synth(tmp_path, client, "--where", "gender == 'f'", "--rows", "300") == 0
    assert "warning: privacy unit 'uid': releasing rows, not units" in capsys.readouterr().err
    release = pd.read_parquet(tmp_path / "out" / "synthetic.parquet")
    assert "uid" not in release.columns and (release["gender"] == "f").all()
    code = synth(tmp_path, client, "--balance", "flag", "--method-options",
                 '{"unit_shape": true}', "--out", str(tmp_path / "refused"))
    assert code == 2 and "unit-shaped" in capsys.readouterr().err
    assert len(Ledger(tmp_path / "ledger.sqlite").entries()) == 1  # the first release only
    # the unit declared by the schema: the same
    declared = {**PANEL_SCHEMA, "privacy_unit": {"column": "uid", "max_rows": K}}
    (tmp_path / "declared.json").write_text(json.dumps(declared))
    assert main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "declared.json"), "--out", str(tmp_path / "declared"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--balance", "flag",
                 "--rows", "200", "--scheduler", client.scheduler.address, "--quiet"]) == 0
    assert "releasing rows, not units" in capsys.readouterr().err
    assert "uid" not in pd.read_parquet(tmp_path / "declared" / "synthetic.parquet").columns


def test_item3_synth_on_a_panel_gives_units(client, tmp_path):
    """The issue's command on a panel of 595 people × 7 years with an ``id`` column and no
    schema (drafted under DP, at the unit): `synth --privacy-unit id --max-rows-per-unit 7`
    gives synthetic people of 1..7 rows sharing ids, not one id per row."""
    rng = np.random.default_rng(67)
    people, years = 595, 7
    person = np.repeat(np.arange(people), years)
    female = (rng.random(people) < 0.4)[person]
    frame = pd.DataFrame({
        "id": person + 1, "year": np.tile(np.arange(1976, 1983), people),
        "sex": np.where(female, "female", "male"),
        "union": np.where(rng.random(len(person)) < 0.35, "yes", "no"),
        "wage": np.round(np.exp(6.5 + 0.3 * ~female + rng.normal(0, 0.4, len(person))), 2)})
    frame.to_csv(tmp_path / "panel.csv", index=False)
    assert main(["synth", "--data", str(tmp_path / "panel.csv"), "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--privacy-unit", "id",
                 "--max-rows-per-unit", "7", "--noise-sampler", "numpy", "--noise-seed", "1",
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    release = pd.read_parquet(tmp_path / "out" / "synthetic.parquet")
    sizes = release.groupby("id").size()
    assert sizes.min() >= 1 and sizes.max() <= 7
    # every real person holds 7 rows: the synthetic ones mostly do too (the unit model's
    # rows histogram at ε = 1 less the draft's share, ~600 units), not one row each
    assert sizes.mean() > 3 and len(sizes) < len(release) / 3
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["unit_shape"]["unit"] == "id" and metadata["unit_shape"]["max_rows"] == 7
