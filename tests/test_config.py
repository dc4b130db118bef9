"""Job configs (``dp-dask run job.yaml``): end to end on the suite's cluster, CLI overrides,
the shipped examples in pipelines/ and docs/config.md, synth and stats jobs, and bad configs
refused with the key named (exit 2)."""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from pathlib import Path

import pytest
from conftest import ADULT_CSV, ROOT, SMALL_SCHEMA_PATH

from dp_dask.cli import job_spec, main
from dp_dask.config import ConfigError, load_config
from dp_dask.release import verify_release
from dp_dask.stats import DDP_STATEMENT, DP_STATEMENT


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
    from dp_dask.data.demo import write_census

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
    assert_refused(tmp_path, edit(textwrap.dedent(VALID).format(
        data=data, schema=SMALL_SCHEMA_PATH)), message, capsys)


def assert_refused(tmp_path: Path, text: str, message: str, capsys) -> None:
    config = write_config(tmp_path, text)
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
    job, values = load_config(config)
    assert job == "synth"  # without a job key
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


# Stats jobs (job: stats): the config fills dp-dask stats' job spec.
STATS = """\
    job: stats
    data: {data}
    schema: schemas/small.json
    privacy:
      epsilon: 1
      noise_sampler: numpy
      noise_seed: 7
    output:
      out: histograms
    ledger:
      path: ledger.sqlite
      run_id: stats-1
    """


def schema_beside(directory: Path) -> None:
    (directory / "schemas").mkdir()
    (directory / "schemas" / "small.json").write_text(SMALL_SCHEMA_PATH.read_text())


def test_stats_config_writes_what_the_command_line_writes(client, people_csv, tmp_path,
                                                          monkeypatch, capsys):
    schema_beside(tmp_path)
    config = write_config(tmp_path, textwrap.dedent(STATS).format(data=people_csv))
    monkeypatch.chdir(tmp_path.parent)  # relative paths follow the config, not the cwd
    assert main(["run", str(config), *scheduler(client)]) == 0, capsys.readouterr().err
    by_hand = tmp_path / "by-hand"
    assert main(["stats", "--data", str(people_csv), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(by_hand), "--epsilon", "1", "--noise-sampler", "numpy",
                 "--noise-seed", "7", "--ledger", str(tmp_path / "by-hand.sqlite"),
                 "--run-id", "stats-1", *scheduler(client)]) == 0
    assert "ε-differential privacy (pure DP)" in capsys.readouterr().out
    released = tmp_path / "histograms"
    assert sorted(p.name for p in released.iterdir()) == sorted(p.name for p in by_hand.iterdir())
    for name in ("histograms.json", "histograms.csv"):
        assert (released / name).read_text() == (by_hand / name).read_text()
    counts = json.loads((released / "histograms.json").read_text())["columns"]
    assert sum(counts["colour"].values()) != pytest.approx(2_000, abs=1e-9)  # noisy
    metadata, expected = (json.loads((d / "metadata.json").read_text()) for d in (released,
                                                                                   by_hand))
    metadata.pop("created"), expected.pop("created")
    assert metadata == expected
    assert metadata["privacy"]["statement"] == DP_STATEMENT
    assert metadata["ledger"] == {"dataset_name": "people", "run_ids": ["stats-1"]}
    assert (tmp_path / "ledger.sqlite").is_file()  # the config's, beside it
    summary = json.loads((tmp_path / "histograms.run.json").read_text())
    assert summary["command"] == "stats" and summary["config"] == str(config)
    assert summary["method"] == "laplace" and summary["paths"]["data"] == str(people_csv)
    assert summary["paths"]["json"] == str(released / "histograms.json")
    assert summary["privacy"]["notion"] == "differential privacy"
    assert summary["ledger"]["path"] == str(tmp_path / "ledger.sqlite")
    assert not (tmp_path / "by-hand.run.json").exists()  # plain commands write none unasked

    # an override after the file wins
    assert main(["run", str(config), "--epsilon", "2", "--out", str(tmp_path / "eps2"),
                 "--run-id", "stats-2", *scheduler(client)]) == 0
    privacy = json.loads((tmp_path / "eps2" / "metadata.json").read_text())["privacy"]
    assert privacy["epsilon"] == 2.0 and "scale 2m/ε = 4 per count" in privacy["budget_split"]


def test_tabular_ddp_config_states_dependent_dp(client, people_csv, tmp_path, capsys):
    schema_beside(tmp_path)
    config = write_config(tmp_path, textwrap.dedent(STATS).format(data=people_csv) + (
        "stats: {mechanism: tabular-ddp, k: 2, network_from_noisy_tables: 0.3}\n"))
    assert main(["run", str(config), *scheduler(client)]) == 0
    captured = capsys.readouterr()
    assert "dp-dask: warning: tabular-ddp releases under ε-dependent" in captured.err
    assert "dependent differential privacy" in captured.out
    privacy = json.loads((tmp_path / "histograms" / "metadata.json").read_text())["privacy"]
    assert privacy["notion"] == "dependent differential privacy"
    assert privacy["statement"] == DDP_STATEMENT and privacy["k"] == 2
    assert "noisy" in privacy["network"]["source"]
    summary = json.loads((tmp_path / "histograms.run.json").read_text())["privacy"]
    assert summary["notion"] == "dependent differential privacy"
    assert summary["statement"] == DDP_STATEMENT and summary["differentially_private"] is False
    assert summary["mechanism"] == "tabular-ddp"



def test_an_override_replaces_the_configs_network_source(tmp_path, data):
    config = write_config(tmp_path, textwrap.dedent(STATS_VALID).format(
        data=data, schema=SMALL_SCHEMA_PATH) + "stats: {mechanism: tabular-ddp, network: n.json}\n")
    args = job_spec(config, [])
    assert args.network == str(tmp_path / "n.json") and args.network_from_noisy_tables is None
    for override in (["--network-from-noisy-tables", "0.3"], ["--network-from=0.3"]):
        args = job_spec(config, override)  # a unique prefix, as argparse reads it
        assert args.network is None and args.network_from_noisy_tables == 0.3
        assert args.command == "stats" and args.mechanism == "tabular-ddp"
    args = job_spec(config, ["--public-sample", "p.csv"])
    assert args.network is None and args.public_sample == "p.csv"


def test_stats_paths_are_relative_to_the_config(tmp_path, data):
    config = write_config(tmp_path, f"""\
        job: stats
        data: {data}
        schema: adult
        stats: {{mechanism: tabular-ddp, network: nets/net.json}}
        privacy: {{epsilon: 1}}
        output: {{out: out}}
        """)
    assert load_config(config) == ("stats", {
        "data": str(data), "schema": "adult", "stats.mechanism": "tabular-ddp",
        "stats.network": str(tmp_path / "nets" / "net.json"), "privacy.epsilon": 1.0,
        "output.out": str(tmp_path / "out")})
    config.write_text(config.read_text().replace("network: nets", "public_sample: pub"))
    assert load_config(config)[1]["stats.public_sample"] == str(tmp_path / "pub" / "net.json")


STATS_VALID = "    job: stats\n" + VALID


@pytest.mark.parametrize(("base", "edit", "message"), [
    ("stats", lambda text: text + "  rows: 10\n",
     "key 'output.rows' applies to synth, sample and demo jobs only, not to a stats job"),
    ("stats", lambda text: text + "method: marginals\n",
     "key 'method' applies to synth, fit and demo jobs only"),
    ("stats", lambda text: text + "storage_options: {anon: true}\n",
     "key 'storage_options' applies to synth, fit, sample and tables jobs only"),
    ("stats", lambda text: text.replace("epsilon: 1", "epsilon: 1\n  delta: 0.1"),
     "key 'privacy.delta' applies to synth, fit, demo and tables jobs only"),
    ("synth", lambda text: text + "stats:\n  k: 3\n",
     "key 'stats' applies to stats jobs only, not to a synth job"),
    ("synth", lambda text: "job: synth\n" + text + "stats: {}\n", "key 'stats' applies to stats"),
    ("stats", lambda text: text + "stats:\n  netwrk: n.json\n", "unknown key 'stats.netwrk'"),
    ("stats", lambda text: text + "stats:\n  mechanism: ddp\n",
     "stats.mechanism: 'ddp' is not one of laplace, tabular-ddp"),
    ("stats", lambda text: text + "stats:\n  k: 0\n", "stats.k: must be a positive integer"),
    ("stats", lambda text: text + "stats:\n  network: n.json\n  public_sample: p.csv\n",
     "stats.network, stats.public_sample: give one of them"),
    ("stats", lambda text: text.replace("job: stats", "job: stat"),
     "job: 'stat' is not one of synth, stats"),
    ("stats", lambda text: text.replace("epsilon: 1", "noise_seed: 1"),
     "privacy.epsilon: required"),
])
def test_bad_stats_config_is_refused_naming_the_key(tmp_path, data, capsys, base, edit,
                                                    message):
    template = {"synth": VALID, "stats": STATS_VALID}[base]
    assert_refused(tmp_path, edit(textwrap.dedent(template).format(
        data=data, schema=SMALL_SCHEMA_PATH)), message, capsys)


def docs_example(heading: str) -> str:
    """The first YAML block after ``heading`` in docs/config.md."""
    text = (ROOT / "docs" / "config.md").read_text()
    return re.search(r"```yaml\n(.*?)```", text[text.index(heading):], re.S).group(1)


def test_docs_stats_example_runs(client, adult_csv, tmp_path, monkeypatch, capsys):
    config = tmp_path / "adult-stats.yaml"
    config.write_text(docs_example("### Stats jobs"))
    monkeypatch.setenv("DP_DASK_DATA", str(adult_csv.parents[1]))
    monkeypatch.setenv("DP_DASK_OUT", str(tmp_path / "stats"))
    assert main(["run", str(config), "--ledger", str(tmp_path / "ledger.sqlite"),
                 *scheduler(client)]) == 0
    assert "weaker than differential privacy" in capsys.readouterr().err
    metadata = json.loads((tmp_path / "stats" / "metadata.json").read_text())
    assert metadata["n_rows"] == 32_561 and metadata["schema"]["attributes"] == 15
    assert metadata["privacy"]["notion"] == "dependent differential privacy"
    assert metadata["privacy"]["differentially_private"] is False
    assert metadata["ledger"]["dataset_name"] == "adult"
    summary = json.loads((tmp_path / "stats.run.json").read_text())
    assert summary["privacy"]["statement"] == DDP_STATEMENT


def test_a_config_and_the_command_line_fill_the_same_spec(tmp_path, data):
    """One job spec: the config's keys and synth's options give the same fields, defaults
    included, and an option after the file wins."""
    from dp_dask.cli import build_parser, job
    from dp_dask.config import SynthSpec

    config = write_config(tmp_path, f"""\
        data: {data}
        schema: {SMALL_SCHEMA_PATH}
        method: copula
        storage_options: {{anon: true}}
        privacy: {{epsilon: 0.5, delta: 1.0e-6, mechanism: laplace, noise_seed: 4}}
        output: {{out: release, rows: 300, seed: 2}}
        cluster: {{workers: 2, memory_limit: 0.5, options: {{a: 1}}}}
        ledger: {{path: l.sqlite, force: true}}
        """)
    argv = ["--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--method", "copula",
            "--storage-options", '{"anon": true}', "--epsilon", "0.5", "--delta", "1e-6",
            "--mechanism", "laplace", "--noise-seed", "4", "--out", str(tmp_path / "release"),
            "--rows", "300", "--seed", "2", "--workers", "2", "--memory-limit", "0.5",
            "--cluster-options", '{"a": 1}', "--ledger", str(tmp_path / "l.sqlite"), "--force"]
    by_hand = job(build_parser().parse_args(["synth", *argv]))
    from_config = job_spec(config, [])
    assert isinstance(by_hand, SynthSpec) and isinstance(from_config, SynthSpec)
    assert by_hand.config is None and from_config.config == config
    assert dataclasses.replace(from_config, config=None) == by_hand
    assert job_spec(config, ["--rows", "7", "--zarr"]) == dataclasses.replace(
        from_config, rows=7, zarr=True)


@pytest.mark.parametrize("command", ["synth", "fit", "sample", "stats", "demo", "tables"])
def test_every_option_of_a_job_command_is_a_field_of_its_spec(command):
    """A new option without its spec field would reach neither run nor the YAML: refused here.
    (sample's loaded model is the job's own state, no option.)"""
    from dp_dask.cli.run import JOB_COMMANDS
    from dp_dask.config import SPECS

    options = {action.dest for action in JOB_COMMANDS[command].arguments()._actions}
    assert options == {field.name for field in dataclasses.fields(SPECS[command])} - {
        "command", "config", "loaded_model"}
