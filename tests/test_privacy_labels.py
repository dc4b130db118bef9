"""Honest labels: test releases say they are not private, owner-only outputs stay out of
releases, local services listen on loopback, and no raw value reaches a release file."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import RAW_VALUE, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.cluster import dask_client
from dp_dask.evaluate.tables import ReleaseDirectoryError, write_tables
from dp_dask.methods.copula import GaussianCopulaSynthesizer
from dp_dask.privacy.labels import NON_PRIVATE_LABEL, OWNER_ONLY, describe, is_private


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def synth(client, source, out, *extra) -> list[str]:
    return ["synth", "--data", str(source), "--schema", str(SMALL_SCHEMA_PATH), "--out", str(out),
            "--rows", "1000", *extra, *scheduler(client)]


def test_seeded_noise_is_labelled_non_private(client, people_csv, tmp_path, capsys):
    assert main(synth(client, people_csv, tmp_path / "test", "--noise-sampler", "numpy",
                      "--noise-seed", "5")) == 0
    printed = capsys.readouterr().out
    assert NON_PRIVATE_LABEL in printed and "released with" not in printed
    privacy = json.loads((tmp_path / "test" / "metadata.json").read_text())["privacy"]
    assert privacy["differentially_private"] is False and privacy["label"] == NON_PRIVATE_LABEL
    assert "seed" in privacy["reason"] and privacy["budget_split"].startswith("NOT A GUARANTEE")
    # Sampling again from the saved test model keeps the label.
    assert main(["sample", "--model", str(tmp_path / "test" / "model"), "--out",
                 str(tmp_path / "again"), "--rows", "100", *scheduler(client)]) == 0
    assert NON_PRIVATE_LABEL in capsys.readouterr().out
    again = json.loads((tmp_path / "again" / "metadata.json").read_text())["privacy"]
    assert again["differentially_private"] is False

    assert main(synth(client, people_csv, tmp_path / "real")) == 0
    assert "released with ε=1.0" in capsys.readouterr().out
    privacy = json.loads((tmp_path / "real" / "metadata.json").read_text())["privacy"]
    assert privacy["differentially_private"] is True and "OpenDP" in privacy["reason"]


def test_labels_of_older_models_follow_their_sampler():
    old = {"epsilon": 1.0, "delta": 1e-9, "mechanism": "gaussian", "accountant": "zCDP"}
    assert is_private({**old, "noise_sampler": "opendp"})
    assert not is_private({**old, "noise_sampler": "numpy"})
    assert describe({**old, "noise_sampler": "numpy"}).startswith(NON_PRIVATE_LABEL)


def test_no_raw_value_reaches_a_release_file(client, people_csv, tmp_path, suite_ledger):
    assert RAW_VALUE in people_csv.read_text()
    assert main(synth(client, people_csv, tmp_path, "--partition-rows", "250")) == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "model.json" for p in files) and len(files) > 5
    for path in files:
        assert RAW_VALUE.encode() not in path.read_bytes(), path
    assert RAW_VALUE.encode() not in suite_ledger.read_bytes()  # the ledger holds no values
    frame = pd.read_parquet(tmp_path / "synthetic.parquet")
    assert set(frame["city"].astype(str)) <= {"a", "b", "c", "d", "e", "other"}


def test_an_encoding_error_names_the_column_not_the_value(client, tmp_path, capsys):
    frame = correlated_frame(300)
    frame.loc[17, "colour"] = RAW_VALUE
    frame.to_csv(tmp_path / "bad.csv", index=False)
    assert main(synth(client, tmp_path / "bad.csv", tmp_path / "out")) == 2
    captured = capsys.readouterr()
    assert "'colour'" in captured.err and "1 out-of-domain value" in captured.err
    assert RAW_VALUE not in captured.err + captured.out  # --show-values: tests/test_schema_encode
    assert not (tmp_path / "out").exists()


def test_owner_only_outputs_stay_out_of_releases(client, people_csv, tmp_path, capsys):
    release = tmp_path / "release"
    release.mkdir()
    (release / "metadata.json").write_text(json.dumps({"privacy": {"epsilon": 1.0}}))
    records = pd.DataFrame([{"method": "m", "workload": "Q1", "queries": 3, "beta": 1.0,
                             "average": 1.0, "maximum": 2.0}])
    with pytest.raises(ReleaseDirectoryError, match="inside the release directory"):
        write_tables(records, release / "eval" / "deeper", "alpha-beta", "title")
    assert not (release / "eval").exists()
    paths = write_tables(records, release / "eval", "alpha-beta", "title", force=True)
    assert OWNER_ONLY in paths["csv"].read_text().splitlines()[0]
    assert pd.read_csv(paths["csv"], comment="#").shape == (1, 6)
    assert paths["md"].read_text().lower().startswith(f"> **{OWNER_ONLY}**")
    # The CLI refuses before reading the data (which does not even exist here).
    code = main(["evaluate", "--data", str(tmp_path / "nothing.csv"), "--synthetic",
                 str(tmp_path / "nothing.parquet"), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(release / "eval"), *scheduler(client)])
    assert code == 2
    assert "inside the release directory" in capsys.readouterr().err
    code = main(["report", "--data", str(tmp_path / "nothing.csv"), "--schema",
                 str(SMALL_SCHEMA_PATH), "--out", str(release), *scheduler(client)])
    assert code == 2
    assert "inside the release directory" in capsys.readouterr().err
    # A metadata.json that is not a release's does not count.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metadata.json").write_text('{"title": "notes"}')
    write_tables(records, tmp_path / "other" / "eval", "alpha-beta", "title")


def test_local_cluster_listens_on_loopback():
    with dask_client(n_workers=1) as client:
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        workers = client.scheduler_info()["workers"]
        assert all(address.startswith("tcp://127.0.0.1:") for address in workers)


def test_synthesizer_ledger_false_still_labels(client, tmp_path):
    model = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, ledger=False, noise_sampler="numpy",
                                      noise_seed=1, calibration_draws=2_000).fit(
        correlated_frame(500)).model
    assert model.metadata["privacy"]["differentially_private"] is False
    assert "ledger" not in model.metadata
