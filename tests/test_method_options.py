"""A method's own parameters from the API, the CLI (--method-options JSON) and a job config."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL_SCHEMA_PATH

from dp_dask.cli import main
from dp_dask.config import load_config
from dp_dask.methods.marginals import MarginalsConfig
from dp_dask.synthesizer import Synthesizer, load_model
from dp_dask.tuning import as_config, changed


def test_each_method_lists_its_own_parameters_only():
    assert Synthesizer.methods["dpview"].options() == ("view_size", "rows", "tries",
                                                       "layout_seed", "neighbours", "config")
    assert Synthesizer.methods["dpcopula-mle"].options() == ("blocks", "k", "histograms")
    assert "epsilon" not in Synthesizer.methods["copula"].options()


def test_create_names_the_methods_options_for_an_unknown_one():
    with pytest.raises(ValueError, match=r"'dpview' has no option 'k'; its options: view_size, "
                                         r"rows, tries, layout_seed, neighbours, config"):
        Synthesizer.create("dpview", SMALL_SCHEMA_PATH, k=4)


def test_cli_passes_method_options_to_the_method(client, data, tmp_path, capsys):
    out = tmp_path / "release"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "dpcopula-kendall", "--method-options", '{"k": 2}',
                 "--epsilon", "3", "--ledger", str(tmp_path / "ledger.sqlite"),
                 "--rows", "500", "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0, capsys.readouterr().err
    privacy = load_model(out / "model").metadata["privacy"]
    assert "epsilon1 = 2 " in privacy["budget_split"] and "k = epsilon1/epsilon2 = 2" in \
        privacy["budget_split"]


def test_cli_passes_a_config_to_the_method_and_names_its_fields(client, data, tmp_path,
                                                               capsys):
    argv = ["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--method",
            "dpview", "--epsilon", "3", "--ledger", str(tmp_path / "ledger.sqlite"),
            "--rows", "500", "--scheduler", client.scheduler.address, "--quiet"]
    options = {"view_size": 3, "config": {"max_rounds": 3}}
    code = main([*argv, "--out", str(tmp_path / "release"), "--method-options",
                 json.dumps(options)])
    assert code == 0, capsys.readouterr().err
    metadata = load_model(tmp_path / "release" / "model").metadata
    assert metadata["parameters"]["config"] == {"max_rounds": 3}
    assert metadata["model"]["consistency_rounds"] <= 3
    code = main([*argv, "--out", str(tmp_path / "other"), "--method-options",
                 '{"config": {"max_round": 3}}'])
    assert code == 2
    assert "DPViewConfig has no field 'max_round'; its fields: usefulness" in \
        capsys.readouterr().err
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize(("options", "message"), [
    ('{"view_size": 3}', "method 'dpcopula-kendall' has no option 'view_size'; its options: k, "
                         "histograms"),
    ('{"accountant": "zcdp"}', "give accountant with --accountant"),
])
def test_cli_refuses_a_wrong_method_option_before_anything_runs(tmp_path, data, capsys, options,
                                                                message):
    out, ledger = tmp_path / "release", tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "dpcopula-kendall", "--method-options", options,
                 "--ledger", str(ledger), "--quiet"])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not ledger.exists() and not out.exists()


def test_job_config_gives_method_options(tmp_path, data):
    config = tmp_path / "job.yaml"
    config.write_text(f"data: {data}\nschema: {SMALL_SCHEMA_PATH}\nmethod: dpview\n"
                      "method_options: {view_size: 3, tries: 50, config: {plan_rounds: 20}}\n"
                      "privacy: {epsilon: 1}\noutput: {out: release}\n")
    _, values = load_config(config)
    given = {"view_size": 3, "tries": 50, "config": {"plan_rounds": 20}}
    assert values["method_options"] == given
    from dp_dask.cli import job_spec

    args = job_spec(config, [])
    assert args.method_options == given
    assert Synthesizer.create("dpview", SMALL_SCHEMA_PATH, ledger=False,
                              **args.method_options).config.plan_rounds == 20
    args = job_spec(config, ["--method-options", json.dumps({"view_size": 4})])
    assert args.method_options == {"view_size": 4}


def test_flags_of_method_parameters_go_to_the_methods_that_declare_them():
    """--accountant, --workload, --mechanism, --within-attribute reach a method as its
    ``options()`` declare, with no method named in the CLI: ignored by a method without the
    parameter, except --workload, refused there."""
    from dp_dask.cli import build_parser
    from dp_dask.cli.common import flag_parameters

    def given(*argv: str) -> dict:
        return flag_parameters(build_parser().parse_args(
            ["synth", "--data", "x", "--schema", "demo", "--out", "o", *argv]))

    assert given("--accountant", "zcdp", "--workload", "a,b") == {
        "accountant": "zcdp", "workload": [["a", "b"]]}  # marginals, the default
    assert given("--method", "copula", "--accountant", "exact") == {
        "accountant": "exact", "mechanism": "gaussian", "within_attribute": "pairwise"}
    assert given("--method", "dpcopula-mle", "--accountant", "zcdp") == {}
    with pytest.raises(ValueError, match=r"^--workload: method 'copula' takes no workload "
                                         r"\(marginals only\)$"):
        given("--method", "copula", "--workload", "a,b")


def test_marginals_config_is_validated_and_names_its_fields_for_an_unknown_one():
    with pytest.raises(ValueError, match=r"MarginalsConfig has no field 'max_estimate'; its "
                                         r"fields: cells_exponent, one_way_share, "):
        Synthesizer.create("marginals", SMALL_SCHEMA_PATH, config={"max_estimate": 2},
                           ledger=False)
    with pytest.raises(ValueError, match="max_estimates must be an integer >= 0"):
        as_config(MarginalsConfig, {"max_estimates": 1.5})
    given = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, config={"max_estimates": 2},
                               ledger=False)
    assert given.config == MarginalsConfig(max_estimates=2)
    assert changed(given.config) == {"max_estimates": 2}
    assert as_config(MarginalsConfig, None) == MarginalsConfig()
    assert not changed(MarginalsConfig())


def test_cli_gives_the_marginals_config_and_the_release_records_the_fields_changed(
        client, data, tmp_path, capsys):
    out = tmp_path / "release"
    options = {"config": {"max_estimates": 1, "empty_within_sigmas": 3}}
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "marginals", "--method-options", json.dumps(options),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--rows", "500",
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0, capsys.readouterr().err
    model = load_model(out / "model")
    assert model.metadata["config"] == {"max_estimates": 1, "empty_within_sigmas": 3.0}
    assert model.sampler().config == MarginalsConfig(max_estimates=1, empty_within_sigmas=3.0)


def test_job_config_gives_the_marginals_config(tmp_path, data):
    config = tmp_path / "job.yaml"
    config.write_text(f"data: {data}\nschema: {SMALL_SCHEMA_PATH}\nmethod: marginals\n"
                      "method_options: {config: {max_estimates: 2}}\n"
                      "privacy: {epsilon: 1}\noutput: {out: release}\n")
    from dp_dask.cli import job_spec

    assert job_spec(config, []).method_options == {"config": {"max_estimates": 2}}


def test_synth_help_lists_the_marginals_config_fields(capsys):
    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the marginals config's fields (docs/tuning.md): cells_exponent=0.333333," in text
    assert "max_estimates=4" in text and "unbalanced_candidates_per_row=2" in text
