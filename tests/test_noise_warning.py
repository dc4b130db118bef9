"""Issue 65, "noise warning at synth time": a release whose noise is comparable to its counts
warns at the fit, with the figure (dp_dask.postprocess.noise_level), and records it in its
metadata; the CLI prints it. The figure reads noisy counts and public σ only."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import SMALL_SCHEMA, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask import Synthesizer
from dp_dask.checks import DpDaskWarning
from dp_dask.cli import main
from dp_dask.postprocess.consistency import Measurement, estimated_rows
from dp_dask.postprocess.noise_level import WARN_RATIO, noise_level, noise_record


def fitted(rows: int) -> tuple[Synthesizer, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0, ledger=False,
                                         noise_sampler="numpy", noise_seed=3
                                         ).fit(correlated_frame(rows))
    return synthesizer, [w for w in caught if issubclass(w.category, DpDaskWarning)
                         and "comparable to the counts" in str(w.message)]


def test_issue65_noise_a_40_row_table_at_epsilon_1_warns_with_the_figure(client):
    synthesizer, warned = fitted(40)
    assert len(warned) == 1
    model = synthesizer.model
    noise = model.metadata["quality"]["noise"]
    tables = [m for m in model.measurements if len(m.attributes) == 2]
    # the figure of the noisy tables: n̂ their inverse-variance total, never the exact 40
    rows = estimated_rows([m for m in model.measurements if len(m.attributes) <= 2])
    assert noise["rows_estimate"] == rows and noise["measured"] == len(tables)
    ratios = sorted(m.sigma * m.values.size / rows for m in tables)
    assert noise["ratio"] == pytest.approx(ratios[len(ratios) // 2])
    assert noise["ratio"] == pytest.approx(noise["sigma"] / noise["mean_cell"])
    # σ ≈ 27 on tables of 6 to 24 cells; n̂ is 40 give or take a few σ / √tables: σ / mean
    # cell is far above 1 whatever the draw
    assert noise["sigma"] > 10 and noise["ratio"] >= 3 * WARN_RATIO
    message = str(warned[0].message)
    for figure in (f"σ = {noise['sigma']:.3g}", f"mean noisy cell count of "
                   f"{noise['mean_cell']:.3g}", f"σ / mean cell = {noise['ratio']:.3g}"):
        assert figure in message
    assert "Spend more ε" in message and "fewer or coarser columns" in message
    assert noise["warning"] == message
    assert warned[0].filename == __file__  # pointed at the caller's fit


def test_issue65_noise_a_20000_row_table_at_epsilon_1_does_not_warn(client):
    synthesizer, warned = fitted(20_000)
    assert warned == []
    assert "quality" not in synthesizer.model.metadata  # such releases stay as they were


def test_noise_level_is_the_median_tables_sigma_against_its_mean_cell():
    tables = [Measurement((0, 1), np.full(4, 25.0), 2.0),  # 2 · 4 / 100 = 0.08
              Measurement((0, 2), np.full(10, 10.0), 5.0),  # 0.5
              Measurement((1, 2), np.full(50, 2.0), 4.0)]  # 2
    level = noise_level(tables, 100)
    assert (level["sigma"], level["cells"], level["mean_cell"], level["ratio"]) == (
        5.0, 10, 10.0, 0.5)
    assert noise_record(tables, 100) == {}  # 0.5 < WARN_RATIO
    assert noise_record(tables, 40)["quality"]["noise"]["ratio"] == pytest.approx(1.25)
    assert noise_record([], 40) == {}


def test_issue65_noise_synth_cli_prints_and_records_the_figure(client, tmp_path, capsys):
    frame = correlated_frame(40, seed=2)
    (tmp_path / "data.csv").write_text(frame.to_csv(index=False))
    (tmp_path / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    assert main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--epsilon", "1", "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--rows", "40",
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    out, err = capsys.readouterr()
    noise = json.loads((tmp_path / "out" / "metadata.json").read_text())["quality"]["noise"]
    assert f"dp-dask: warning: {noise['warning']}" in err
    assert f"noise: σ / mean noisy cell count = {noise['ratio']:.3g}" in out
