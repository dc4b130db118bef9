"""Issue 65: a raw table in, a faithful stand-in out — one command, one ε (dp_dask.one_command)."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT  # noqa: F401  (the suite's fixtures: client, suite_ledger)

from dp_dask.cli import main
from dp_dask.exceptions import DpDaskWarning
from dp_dask.privacy.ledger import Ledger


def raw_table(rows: int, seed: int = 0) -> pd.DataFrame:
    """A small raw table as a data team hands it over: text and integer columns, no schema."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"group": rng.choice(["a", "b", "c"], rows, p=[0.5, 0.3, 0.2]),
                         "city": rng.choice(["x", "y"], rows, p=[0.6, 0.4]),
                         "age": rng.integers(18, 80, rows).astype(np.int64)})


def synth(client, data, out, ledger, *options: str) -> int:
    return main(["synth", "--data", str(data), "--out", str(out), "--epsilon", "1",
                 "--ledger", str(ledger), "--dataset-name", "people", *options,
                 "--scheduler", client.scheduler.address, "--quiet"])


def test_item1_synth_without_schema_drafts_then_releases(client, tmp_path):
    data = tmp_path / "raw.parquet"
    raw_table(4000).to_parquet(data)
    ledger = tmp_path / "ledger.sqlite"
    assert synth(client, data, tmp_path / "rel", ledger) == 0
    metadata = json.loads((tmp_path / "rel" / "metadata.json").read_text())
    split = metadata["privacy"]["one_command"]
    assert split["epsilon"] == 1.0 and 0 < split["draft_share"] < 1
    assert split["draft"]["epsilon"] + split["release"]["epsilon"] == pytest.approx(1.0)
    assert metadata["privacy"]["epsilon"] == pytest.approx(split["release"]["epsilon"])
    drafted = metadata["privacy"]["schema_drafted_under_dp"]
    assert drafted["epsilon"] == pytest.approx(split["draft"]["epsilon"])
    schema = json.loads((tmp_path / "rel" / "schema.json").read_text())
    assert schema["drafted_under_dp"]["epsilon"] == pytest.approx(split["draft"]["epsilon"])
    assert pd.read_parquet(tmp_path / "rel" / "synthetic.parquet").shape[0] > 0
    # one reservation, spent, of the whole ε
    (entry,) = Ledger(ledger).entries("people")
    assert entry.status == "spent" and entry.epsilon == pytest.approx(1.0)


def test_item1_refused_budget_spends_nothing(client, tmp_path):
    data = tmp_path / "raw.parquet"
    raw_table(4000).to_parquet(data)
    ledger = tmp_path / "ledger.sqlite"
    assert synth(client, data, tmp_path / "rel", ledger, "--budget-epsilon", "0.5") == 2
    assert Ledger(ledger).entries("people") == []
    assert not (tmp_path / "rel" / "schema.json").exists()


def test_item2_synthesize_returns_the_inputs_columns_and_dtypes(client, tmp_path):
    from dp_dask import synthesize

    raw = raw_table(4000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        released = synthesize(raw, epsilon=1.0, ledger=tmp_path / "ledger.sqlite",
                              dataset_name="people")
    assert list(released.columns) == list(raw.columns)
    assert released["age"].dtype == np.int64
    assert pd.api.types.is_string_dtype(released["group"])
    record = released.attrs["dp_dask"]
    assert record["privacy"]["one_command"]["epsilon"] == 1.0 and record["notes"]
    assert record["schema"]["drafted_under_dp"]


def test_item2_tiny_table_warns_with_the_figure(client, tmp_path):
    from dp_dask import synthesize

    with pytest.warns(DpDaskWarning, match="noise is comparable to the counts"):
        synthesize(raw_table(40), epsilon=1.0, ledger=False)


def test_item2_a_tiny_table_with_one_column_left_says_only_what_it_gave_up(client):
    """40 rows of which the draft keeps one column: no pair to choose among, so no numpy
    "Mean of empty slice" beside the release's own warnings."""
    from dp_dask import synthesize

    rng = np.random.default_rng(0)
    raw = pd.DataFrame({"income": rng.lognormal(10, 1, 40), "group": rng.choice(["a", "b"], 40),
                        "age": rng.integers(18, 90, 40)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        synthesize(raw, epsilon=1.0, ledger=False, noise_sampler="numpy", noise_seed=1)
    assert caught and all(issubclass(w.category, DpDaskWarning) for w in caught), [
        str(w.message) for w in caught]


def test_item4_python_errors_name_keywords(tmp_path):
    from dp_dask.data.draft import draft_schema

    with pytest.raises(ValueError, match="dp_delta=: only with dp_epsilon=") as raised:
        draft_schema(raw_table(10), dp_delta=1e-6)
    assert "--dp" not in str(raised.value)


def test_item3_a_5000_row_table_releases_its_numbers_with_a_noise_warning(client, tmp_path):
    from dp_dask import synthesize
    from dp_dask.data.demo import generate_census

    raw = generate_census(5000, seed=1).compute()
    # No warning is required here any more: it came from a text column in which the draft found
    # no level; the joint text thresholds (draft_text) find levels in every column of this
    # table, and the release's own figure (postprocess.noise_level) stays below WARN_RATIO
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        released = synthesize(raw, epsilon=1.0, ledger=False, noise_sampler="numpy",
                              noise_seed=1)
    assert not released.attrs["dp_dask"]["privacy"]["one_command"]["left_out"]
    # the numbers searched, not left out: each note says the range found (coarsely where the
    # table is below the full search's size, which the searches measured together now reach)
    numbers = {"age", "hours_per_week", "household_size"}
    assert numbers <= set(released.columns)
    assert not numbers & set(released.attrs["dp_dask"]["privacy"]["one_command"]["left_out"])
    notes = released.attrs["dp_dask"]["notes"]
    assert all(any(note.startswith(f"{number}: ") and "found under DP" in note for note in notes)
               for number in numbers)


def test_item1_a_job_config_without_schema_is_the_one_command(tmp_path):
    from dp_dask.cli import job_spec

    raw_table(10).to_parquet(tmp_path / "raw.parquet")
    config = tmp_path / "job.yaml"
    config.write_text("data: raw.parquet\nprivacy: {epsilon: 1}\noutput: {out: rel}\n")
    spec = job_spec(config, [])
    assert spec.schema is None and spec.epsilon == 1.0
