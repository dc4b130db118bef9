"""The CLI jobs on a real cluster, and the notebooks executed as a user would run them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import fsspec
import nbformat
import pandas as pd
import pytest
import zarr
from conftest import ROOT
from nbclient import NotebookClient

from dp_dask.cli import main
from dp_dask.release import verify_release


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


@pytest.mark.parametrize("method, options, accounting", [
    ("marginals", [], "exact"),
    ("copula", ["--mechanism", "laplace"], "advanced composition"),  # the paper's pipeline
])
def test_synth_on_adult_writes_zarr_parquet_metadata(client, adult_csv, tmp_path, capsys,
                                                     method, options, accounting):
    code = main(["synth", "--data", str(adult_csv), "--schema", "adult", "--out",
                 str(tmp_path), "--epsilon", "1", "--method", method, *options, "--rows", "5000",
                 "--partition-rows", "2000", "--zarr", *scheduler(client)])
    assert code == 0
    printed = capsys.readouterr().out
    assert accounting in printed and "synthetic.zarr" in printed
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert metadata["privacy"]["mechanism"] == (options[1] if options else "gaussian")
    assert metadata["privacy"]["k"] == 15 + 105
    assert metadata["method"].startswith(method if method == "marginals" else "dp-gaussian")
    assert metadata["n_rows"] == 32_561
    assert zarr.open_array(str(tmp_path / "synthetic.zarr"), mode="r").shape == (5000, 177)
    frame = pd.read_parquet(tmp_path / "synthetic.parquet")
    assert frame.shape == (5000, 15)
    assert (tmp_path / "model" / "model.npz").exists()


def test_fit_then_sample_without_the_data(client, adult_csv, tmp_path):
    model = tmp_path / "model"
    assert main(["fit", "--data", str(adult_csv), "--schema", "adult", "--model", str(model),
                 *scheduler(client)]) == 0
    assert main(["sample", "--model", str(model), "--out", str(tmp_path / "release"),
                 "--rows", "3000", "--seed", "9", *scheduler(client)]) == 0
    frame = pd.read_parquet(tmp_path / "release" / "synthetic.parquet")
    assert len(frame) == 3000
    metadata = json.loads((tmp_path / "release" / "metadata.json").read_text())
    assert metadata["sampling"]["seed"] == 9 and metadata["privacy"]["epsilon"] == 1.0


@pytest.mark.parametrize("problem, message", [
    ("missing-file", "does not exist"),
    ("unknown-category", "column 'sex': 1 out-of-domain value(s) (not among its"),
    ("missing-column", "missing column(s) ['income']"),
])
def test_bad_input_exits_2_with_a_clear_message(client, adult_csv, tmp_path, capsys,
                                                problem, message):
    data = tmp_path / "bad.csv"
    frame = pd.read_csv(adult_csv, dtype=str, nrows=500)
    if problem == "unknown-category":
        frame.loc[123, "sex"] = "Robot"
        frame.to_csv(data, index=False)
    elif problem == "missing-column":
        frame.drop(columns=["income"]).to_csv(data, index=False)
    code = main(["synth", "--data", str(data), "--schema", "adult", "--out",
                 str(tmp_path / "out"), *scheduler(client)])
    assert code == 2
    assert message in capsys.readouterr().err


def test_demo_runs_end_to_end(client, tmp_path, capsys):
    assert main(["demo", "--demo-rows", "30000", "--out", str(tmp_path),
                 *scheduler(client)]) == 0
    printed = capsys.readouterr().out
    utility, end = json.JSONDecoder().raw_decode(printed, printed.index("{"))
    assert utility["one_way_tvd_mean"] < 0.05
    ks = dict(re.findall(r"(\w+) KS ([\d.]+) W1", printed[end:]))  # the numeric columns' values
    assert set(ks) == {"age", "hours_per_week", "household_size"}
    assert all(float(value) < 0.2 for value in ks.values())
    assert (tmp_path / "release" / "synthetic.parquet").exists()


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there_with_outputs_stripped():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "cluster", "privacy"}
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        assert not any(c.get("outputs") or c.get("execution_count") for c in cells), path.name


def execute(notebook: Path, client, tmp_path: Path, monkeypatch) -> tuple[list[dict], str]:
    """As from a fresh clone: run in an empty folder, without the shared data (each generates
    its own), on the suite's cluster (DP_DASK_SCHEDULER) with small data. The outputs, and the
    text printed, after checking no cell failed."""
    monkeypatch.setenv("DP_DASK_SCHEDULER", client.scheduler.address)
    monkeypatch.setenv("DP_DASK_NOTEBOOK_ROWS", "5000")
    monkeypatch.setenv("DP_DASK_NOTEBOOK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("DP_DASK_SHARED", str(tmp_path / "no-shared-folder"))
    document = nbformat.read(notebook, as_version=4)
    NotebookClient(document, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in document.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return outputs, "".join(o.get("text", "") for o in outputs
                            if o.get("output_type") == "stream")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(notebook: Path, client, tmp_path, monkeypatch):
    outputs, printed = execute(notebook, client, tmp_path, monkeypatch)
    if notebook.stem == "cluster":
        assert f"dashboard: http://{client.scheduler.address.split('//')[1].split(':')[0]}" \
            in printed
        if importlib.util.find_spec("ipywidgets") is None:  # progress falls back to text
            assert "100% Completed" in printed
    if notebook.stem == "quickstart":
        assert (tmp_path / "work" / "evaluation" / "report.html").exists()
        assert any("image/png" in o.get("data", {}) for o in outputs)  # the comparison plots


def test_cluster_notebook_writes_model_and_release_to_s3(client, tmp_path, monkeypatch,
                                                         s3_options):
    """The notebook's object-storage variant, against an S3 server (moto) on 127.0.0.1."""
    out = "s3://dp-dask/notebook"
    monkeypatch.setenv("DP_DASK_NOTEBOOK_OUT", out)
    monkeypatch.setenv("DP_DASK_STORAGE_OPTIONS", json.dumps(s3_options))
    _, printed = execute(ROOT / "notebooks" / "cluster.ipynb", client, tmp_path, monkeypatch)
    assert "release complete: 5,000 rows" in printed
    assert verify_release(f"{out}/release", storage_options=s3_options)["rows"] == 5000
    assert fsspec.filesystem("s3", **s3_options).isfile("dp-dask/notebook/model/model.json")
    assert not {"model", "release"} & {p.name for p in (tmp_path / "work").iterdir()}
