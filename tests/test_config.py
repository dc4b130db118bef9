"""Job configs (``dp-dask run job.yaml``): end to end on the suite's cluster, CLI overrides,
the shipped examples in pipelines/, and bad configs refused with the key named (exit 2)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import ADULT_CSV, ROOT, SMALL_SCHEMA_PATH

from dp_dask.cli import main
from dp_dask.config import ConfigError, load_config
from dp_dask.release import verify_release


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def write_config(directory: Path, text: str) -> Path:
    path = directory / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def job(tmp_path) -> Path:
    """A config whose schema, output and ledger are relative to the config's directory."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "small.json").write_text(SMALL_SCHEMA_PATH.read_text())
    return write_config(tmp_path, """\
        version: 1
        data: ${TEST_INPUT}
        schema: schemas/small.json
        method: marginals
        privacy:
          epsilon: 0.5
          delta: 1.0e-6
        output:
          out: release
          rows: 3000
          seed: 3
          partition_rows: 1000
        ledger:
          path: ledger.sqlite
          dataset_name: people
        """)


def test_config_runs_end_to_end_with_overrides(client, job, data, tmp_path, monkeypatch,
                                               capsys):
    monkeypatch.setenv("TEST_INPUT", str(data))
    monkeypatch.chdir(tmp_path.parent)  # relative paths follow the config, not the cwd
    code = main(["run", str(job), "--epsilon", "2", "--rows", "2000", *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    release = tmp_path / "release"
    record = verify_release(release, checksums=True)
    assert record["rows"] == 2000  # the override
    assert record["seed"] == 3 and record["partitions"] == 2  # the config
    metadata = json.loads((release / "metadata.json").read_text())
    assert metadata["privacy"]["epsilon"] == 2.0 and metadata["privacy"]["delta"] == 1e-6
    assert metadata["ledger"]["dataset_name"] == "people"
    assert (tmp_path / "ledger.sqlite").is_file()
    summary = json.loads((tmp_path / "release.run.json").read_text())
    assert summary["config"] == str(job)
    assert summary["privacy"]["epsilon"] == 2.0
    assert summary["release"]["rows"] == 2000
    assert summary["paths"]["data"] == str(data)
    assert summary["paths"]["schema"] == str(tmp_path / "schemas" / "small.json")


def test_adult_example_config(client, tmp_path, monkeypatch, capsys):
    if not ADULT_CSV.exists():
        pytest.fail(f"public Adult data not found at {ADULT_CSV} (set DP_DASK_SHARED)")
    monkeypatch.setenv("DP_DASK_DATA", str(ADULT_CSV.parents[1]))
    monkeypatch.setenv("DP_DASK_OUT", str(tmp_path / "adult"))
    code = main(["run", str(ROOT / "pipelines" / "adult.yaml"), "--rows", "5000",
                 "--ledger", str(tmp_path / "ledger.sqlite"), *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    record = verify_release(tmp_path / "adult")
    assert record["rows"] == 5000 and record["method"] == "marginals"
    assert record["privacy"]["epsilon"] == 1.0
    assert record["privacy"]["delta"] == 2.0**-30


def test_demo_example_config(client, tmp_path, monkeypatch, capsys):
    from dp_dask.demo import write_census

    data = write_census(tmp_path / "census.parquet", n_rows=4_000, partition_rows=2_000)
    monkeypatch.setenv("DP_DASK_DEMO_DATA", str(data))
    monkeypatch.setenv("DP_DASK_OUT", str(tmp_path / "demo"))
    code = main(["run", str(ROOT / "pipelines" / "demo.yaml"), "--rows", "2000",
                 "--ledger", str(tmp_path / "ledger.sqlite"), *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    record = verify_release(tmp_path / "demo")
    assert record["rows"] == 2000 and record["partition_rows"] == 50_000
    assert len(record["columns"]) == 15


VALID = """\
    data: {data}
    schema: {schema}
    privacy:
      epsilon: 1
    output:
      out: release
    """


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text + "privacy_budget: 3\n", "unknown key 'privacy_budget'"),
    (lambda text: text.replace("epsilon: 1", "epsilon: 1\n  epsilom: 2"),
     "unknown key 'privacy.epsilom'"),
    (lambda text: text + "  rows: ten\n", "output.rows: Input should be a valid integer"),
    (lambda text: text.replace("epsilon: 1", "epsilon: [1, 2]"),
     "privacy.epsilon: Input should be a valid number"),
    (lambda text: text.replace("epsilon: 1", "epsilon: -1"), "privacy.epsilon: must be > 0"),
    (lambda text: text.replace("epsilon: 1", "delta: 0.1"), "privacy.epsilon: required"),
    (lambda text: text + "method: mst\n", "method: 'mst' is not one of"),
    (lambda text: text + "cluster:\n  memory_limit: lots\n", "cluster.memory_limit: must be"),
    (lambda text: text.replace("out: release", "out: ${NO_SUCH_VARIABLE_X}/release"),
     "output.out: environment variable NO_SUCH_VARIABLE_X is not set"),
    (lambda text: text.replace("data: ", "data: missing-"), "data: "),
    (lambda text: text + "  - [", "is not valid YAML"),
    (lambda text: "- just\n- a list\n", "expected a mapping"),
])
def test_bad_config_is_refused_naming_the_key(tmp_path, data, capsys, edit, message):
    config = write_config(tmp_path, edit(textwrap.dedent(VALID).format(
        data=data, schema=SMALL_SCHEMA_PATH)))
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dp-dask: error: config {config}"), err
    assert message in err
    assert err.count("\n") == 1  # one line
    assert not (tmp_path / "release").exists()


def test_missing_data_names_the_resolved_path(tmp_path, data):
    config = write_config(tmp_path, textwrap.dedent(VALID).format(
        data="inputs/none.csv", schema=SMALL_SCHEMA_PATH))
    with pytest.raises(ConfigError, match=r"data: .*/inputs/none\.csv does not exist"):
        load_config(config)


def test_variables_and_relative_paths(tmp_path, data, monkeypatch):
    monkeypatch.setenv("TEST_ROOT", str(data.parent))
    monkeypatch.delenv("TEST_UNSET", raising=False)
    config = write_config(tmp_path, f"""\
        data: ${{TEST_ROOT}}/{data.name}
        schema: adult
        privacy: {{epsilon: 1}}
        output: {{out: "${{TEST_UNSET:-out}}/r", summary: s.json}}
        storage_options: {{anon: true}}
        ledger: {{path: "~/l.sqlite"}}
        """)
    values = load_config(config)
    assert values["data"] == str(data)
    assert values["schema"] == "adult"  # a built-in name, not a path
    assert values["output.out"] == str(tmp_path / "out" / "r")
    assert values["output.summary"] == str(tmp_path / "s.json")
    assert values["ledger.path"] == str(Path.home() / "l.sqlite")
    assert values["storage_options"] == {"anon": True}
    assert "privacy.delta" not in values  # left to the option's default


def test_override_errors_name_the_option(tmp_path, data, capsys):
    config = write_config(tmp_path, textwrap.dedent(VALID).format(
        data=data, schema=SMALL_SCHEMA_PATH))
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(config), "--epsilon", "0"])
    assert exit_.value.code == 2
    assert "argument --epsilon: must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "release").exists()
