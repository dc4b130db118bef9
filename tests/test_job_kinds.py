"""Every job kind (synth, fit, sample, stats, demo) on its checked job spec, from the command line
or from a job config (``dp-dask run``), with the same result; ``synth --where/--balance``; bad
specs refused naming the key before anything is spent; ``dp-dask --help`` (issue 66)."""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, SMALL_SCHEMA_PATH

from dp_dask.cli import build_parser, job, job_spec, main
from dp_dask.cli.run import JOB_COMMANDS
from dp_dask.config import (
    SPECS,
    DemoSpec,
    FitSpec,
    SampleSpec,
    StatsSpec,
    SynthSpec,
    TablesSpec,
)
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import verify_release

# seeded noise (numpy): a job run twice gives the same numbers, so a config's run and the
# command line's can be compared exactly (never for a real release)
SEEDED = ["--noise-sampler", "numpy", "--noise-seed", "5"]
SEEDED_KEYS = "privacy: {epsilon: 1, noise_sampler: numpy, noise_seed: 5}"
WHERE = "colour == 'red' and size >= 10"


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def write_config(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def run_config(path: Path, text: str, client) -> None:
    config = write_config(path, text)
    assert main(["run", str(config), *scheduler(client)]) == 0


def frame(release: Path) -> pd.DataFrame:
    return pd.read_parquet(release / "synthetic.parquet")


def model_arrays(model: Path) -> dict[str, np.ndarray]:
    with np.load(model / "model.npz") as arrays:
        return dict(arrays)


@pytest.fixture(scope="module")
def fitted(client, data, tmp_path_factory) -> Path:
    """A model of ``data`` fitted by ``dp-dask fit`` (seeded noise)."""
    directory = tmp_path_factory.mktemp("fitted")
    assert main(["fit", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH),
                 "--model", str(directory / "model"), "--epsilon", "1", *SEEDED,
                 "--ledger", str(directory / "ledger.sqlite"), "--dataset-name", "people",
                 *scheduler(client)]) == 0
    return directory / "model"


def test_issue66_a_fit_config_fits_what_the_command_line_fits(client, data, fitted, tmp_path):
    run_config(tmp_path / "fit.yaml", f"""\
        job: fit
        data: {data}
        schema: {SMALL_SCHEMA_PATH}
        {SEEDED_KEYS}
        output: {{model: model}}
        ledger: {{path: ledger.sqlite, dataset_name: people, run_id: fit-1}}
        """, client)
    arrays, expected = model_arrays(tmp_path / "model"), model_arrays(fitted)
    assert arrays.keys() == expected.keys()
    for name, values in expected.items():
        np.testing.assert_array_equal(arrays[name], values, err_msg=name)
    (entry,) = Ledger(tmp_path / "ledger.sqlite").entries("people")  # spent once, recorded
    assert entry.run_id == "fit-1" and entry.status == "spent"
    summary = json.loads((tmp_path / "model.run.json").read_text())
    assert summary["command"] == "fit" and summary["paths"]["model"] == str(tmp_path / "model")


def test_issue66_a_sample_config_samples_what_the_command_line_samples(client, fitted,
                                                                       tmp_path):
    assert main(["sample", "--model", str(fitted), "--out", str(tmp_path / "by-hand"),
                 "--rows", "1500", "--seed", "4", "--partition-rows", "500", "--where", WHERE,
                 *scheduler(client)]) == 0
    (tmp_path / "jobs").mkdir()
    run_config(tmp_path / "jobs" / "sample.yaml", f"""\
        job: sample
        model: {fitted}
        output:
          out: ../release   # relative to the config
          rows: 1500
          seed: 4
          partition_rows: 500
          where: "{WHERE}"
        """, client)
    released = frame(tmp_path / "release")
    pd.testing.assert_frame_equal(released, frame(tmp_path / "by-hand"))
    assert len(released) == 1500 and len(released.query(WHERE)) == 1500
    assert verify_release(tmp_path / "release")["partitions"] == 3
    assert json.loads((tmp_path / "release.run.json").read_text())["command"] == "sample"


def test_issue66_a_demo_config_releases_what_the_command_line_releases(client, tmp_path):
    options = ["--demo-rows", "3000", "--rows", "1000", "--epsilon", "1", *SEEDED]
    assert main(["demo", "--out", str(tmp_path / "by-hand"), *options,
                 *scheduler(client)]) == 0
    run_config(tmp_path / "demo.yaml", f"""\
        job: demo
        demo: {{rows: 3000}}
        {SEEDED_KEYS}
        output: {{out: demo, rows: 1000}}
        """, client)
    pd.testing.assert_frame_equal(frame(tmp_path / "demo" / "release"),
                                  frame(tmp_path / "by-hand" / "release"))
    assert len(frame(tmp_path / "demo" / "release")) == 1000


def test_issue66_synth_where_gives_rows_that_hold_the_condition(client, data, tmp_path):
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(tmp_path / "by-hand"), "--epsilon", "1", *SEEDED,
                 "--rows", "2000", "--partition-rows", "1000", "--where", WHERE,
                 "--ledger", ledger, "--dataset-name", "people", *scheduler(client)]) == 0
    released = frame(tmp_path / "by-hand")
    assert len(released) == 2000 and len(released.query(WHERE)) == 2000
    metadata = json.loads((tmp_path / "by-hand" / "metadata.json").read_text())
    assert metadata["sampling"]["conditioned"]["where"] == WHERE

    run_config(tmp_path / "synth.yaml", f"""\
        data: {data}
        schema: {SMALL_SCHEMA_PATH}
        {SEEDED_KEYS}
        output: {{out: release, rows: 2000, partition_rows: 1000, where: "{WHERE}"}}
        ledger: {{path: ledger.sqlite, dataset_name: people}}
        """, client)
    pd.testing.assert_frame_equal(frame(tmp_path / "release"), released)


def test_issue66_synth_balance_gives_each_class_as_many_rows(client, data, tmp_path):
    assert main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(tmp_path / "out"), "--epsilon", "1", *SEEDED, "--rows", "3000",
                 "--partition-rows", "1000", "--balance", "city", "--where", "flag == 'yes'",
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset-name", "people",
                 *scheduler(client)]) == 0
    released = frame(tmp_path / "out")
    assert (released["flag"] == "yes").all()
    counts = released["city"].value_counts()
    # each partition's rows split equally among the classes, up to one row per partition
    assert counts.max() - counts.min() <= 3, counts


@pytest.mark.parametrize(("options", "message"), [
    (["--method", "copula", "--where", WHERE],
     "--where/--balance: method 'copula' cannot sample conditionally; methods that can: "
     "marginals"),
    (["--method", "dpview", "--balance", "city"], "method 'dpview' cannot sample"),
    (["--where", "shade == 'red'"], "no attribute 'shade' in schema 'small'"),
    (["--balance", "shade"], "--balance 'shade': no such attribute in schema 'small'"),
])
def test_issue66_synth_refuses_a_condition_before_spending(data, tmp_path, capsys, options,
                                                           message):
    ledger = tmp_path / "ledger.sqlite"
    assert main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(tmp_path / "out"), "--epsilon", "1", "--ledger", str(ledger),
                 "--dataset-name", "people", *options, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-dask: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert not ledger.exists() or not Ledger(ledger).entries()  # nothing spent


VALID = {
    "fit": """\
        job: fit
        data: {data}
        schema: {schema}
        privacy: {{epsilon: 1}}
        output: {{model: model}}
        ledger: {{path: ledger.sqlite}}
        """,
    "sample": """\
        job: sample
        model: {data}
        output: {{out: release}}
        """,
    "demo": """\
        job: demo
        privacy: {{epsilon: 1}}
        output: {{out: release}}
        """,
}


@pytest.mark.parametrize(("kind", "edit", "message"), [
    ("fit", lambda text: text.replace("model: model", "modle: model"),
     "unknown key 'output.modle'"),
    ("fit", lambda text: text.replace("epsilon: 1", "epsilon: lots"),
     "privacy.epsilon: Input should be a valid number"),
    ("fit", lambda text: text.replace("{model: model}", "{summary: s.json}"),
     "output.model: required"),
    ("fit", lambda text: text.replace("output: {model: model}",
                                      "output: {model: model, rows: 10}"),
     "key 'output.rows' applies to synth, sample and demo jobs only, not to a fit job"),
    ("sample", lambda text: text.replace("out: release", "out: release, where: 3"),
     "output.where: Input should be a valid string"),
    ("sample", lambda text: text + "privacy: {epsilon: 1}\n",
     "key 'privacy' applies to synth, stats, fit, demo and tables jobs only, not to a sample job"),
    ("sample", lambda text: text.replace("model: ", "model: missing/"), "does not exist"),
    ("demo", lambda text: text + "demo: {rows: many}\n",
     "demo.rows: Input should be a valid integer"),
    ("demo", lambda text: text + "demo: {rows: 0}\n", "demo.rows: must be a positive integer"),
    ("demo", lambda text: text + "data: x.csv\n",
     "key 'data' applies to synth, stats and fit jobs only, not to a demo job"),
    ("demo", lambda text: text + "ledger: {path: l.sqlite}\n",
     "key 'ledger' applies to synth, stats, fit and tables jobs only"),
])
def test_issue66_a_bad_job_config_of_each_kind_is_refused_naming_the_key(
        tmp_path, data, capsys, kind, edit, message):
    config = write_config(tmp_path / "job.yaml", edit(textwrap.dedent(VALID[kind]).format(
        data=data, schema=SMALL_SCHEMA_PATH)))
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dp-dask: error: config {config}"), err
    assert message in err and err.count("\n") == 1, err
    # nothing spent, nothing written
    assert sorted(path.name for path in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.parametrize(("argv", "spec"), [
    (["synth", "--data", "d.csv", "--schema", "adult", "--out", "r", "--where", "age > 3"],
     SynthSpec),
    (["fit", "--data", "d.csv", "--schema", "adult", "--model", "m"], FitSpec),
    (["sample", "--model", "m", "--out", "r", "--balance", "sex"], SampleSpec),
    (["stats", "--data", "d.csv", "--schema", "adult", "--out", "r"], StatsSpec),
    (["demo", "--demo-rows", "10"], DemoSpec),
    (["tables", "--tables", "{}", "--out", "r", "--max-children", "3"], TablesSpec),
])
def test_issue66_every_job_command_runs_on_its_spec(argv, spec):
    """Built from the options by one function (``job``; every option a field:
    test_config.py), a kind of job config's each."""
    built = job(build_parser().parse_args(argv))
    assert type(built) is spec and built.command == argv[0] and built.config is None
    assert set(SPECS) == set(JOB_COMMANDS) == {"synth", "fit", "sample", "stats", "demo",
                                                 "tables"}


def test_issue66_a_job_config_and_the_command_line_fill_the_same_spec(tmp_path, data):
    config = write_config(tmp_path / "job.yaml", f"""\
        job: sample
        model: {data}
        output: {{out: release, rows: 10, balance: city, decode: midpoint}}
        cluster: {{workers: 1}}
        """)
    by_hand = job(build_parser().parse_args([
        "sample", "--model", str(data), "--out", str(tmp_path / "release"), "--rows", "10",
        "--balance", "city", "--decode", "midpoint", "--workers", "1"]))
    assert dataclasses.replace(job_spec(config, []), config=None) == by_hand
    assert job_spec(config, ["--where", "flag == 'no'"]).where == "flag == 'no'"


def test_issue66_help_describes_the_tool_as_it_is(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(Gaussian copula)" not in text
    assert "The default method, marginals, measures noisy 1- and 2-way marginals" in text
    assert "--method picks another" in text and "dpcopula-kendall" in text
    assert ("Every job (synth, stats, fit, sample, demo, tables) also runs from a YAML job "
            "config") in text


def docs_examples(heading: str) -> list[str]:
    """The YAML blocks of docs/config.md's section ``heading``."""
    text = (ROOT / "docs" / "config.md").read_text()
    section = text[text.index(heading):]
    section = section[:section.index("\n### ", 1)]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def test_issue66_the_docs_fit_and_sample_examples_are_valid(adult_csv, tmp_path, monkeypatch):
    """Read into their specs (the runs of each kind: above, on the small table)."""
    fit_yaml, sample_yaml = docs_examples("### Fit and sample jobs")
    monkeypatch.setenv("DP_DASK_DATA", str(adult_csv.parents[1]))
    fit = job_spec(write_config(tmp_path / "fit.yaml", fit_yaml), [])
    assert isinstance(fit, FitSpec) and fit.data == str(adult_csv)
    assert fit.model == str(tmp_path / "adult-model") and fit.run_id == "adult-model-1"
    (tmp_path / "adult-model").mkdir()
    sample = job_spec(write_config(tmp_path / "sample.yaml", sample_yaml), [])
    assert isinstance(sample, SampleSpec) and sample.model == fit.model
    assert sample.where == "sex == 'Female'" and sample.rows == 10_000
