"""The privacy ledger: recording, budget refusal before any read, retries, composition, CLI."""

from __future__ import annotations

import math
import threading
import warnings
from dataclasses import replace
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.checks import DpDaskWarning
from dp_dask.cli import main
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.units import PrivacyUnit, bound_contributions
from dp_dask.methods.copula import GaussianCopulaSynthesizer
from dp_dask.methods.dpcopula_hybrid import DPCopulaHybridSynthesizer
from dp_dask.privacy import epsilon_spent, rho_budget, zcdp_rho_for
from dp_dask.privacy.accounting import table_sensitivity
from dp_dask.privacy.ledger import (
    APPROX_DP,
    FAILED,
    IN_MEMORY,
    SPENT,
    BudgetExceededError,
    Entry,
    Ledger,
    LedgerError,
    compose,
    composed,
    dataset_name_for,
    default_ledger_path,
    report,
)
from dp_dask.synthesizer import Synthesizer, load_model

SHA = load_schema(SMALL_SCHEMA_PATH).sha256()
# Most fits here name their dataset by the file's stem on purpose; the warning that this is a
# fallback is checked where it is meant (test_item8b_..., test_fit_records_an_entry).
pytestmark = pytest.mark.filterwarnings(
    "ignore:no dataset name declared:dp_dask.checks.DpDaskWarning")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("input") / "people.parquet"
    dd.from_pandas(correlated_frame(3_000, seed=1), npartitions=2).to_parquet(path)
    return path


def entry(epsilon=1.0, delta=1e-6, rho=None, *, private=True, notion=APPROX_DP, run="r",
          name="people") -> Entry:
    mechanism = "gaussian" if rho is not None else "laplace"
    return Entry(name, SHA, run, epsilon, delta, mechanism, "test", rho, private,
                 "opendp" if private else "numpy", notion=notion)


def cks_delta_on_a_grid(rho: float, epsilon: float) -> float:
    """CKS 2020 Cor. 13, minimised over a dense grid of α (independent of the library's solver)."""
    alpha = 1 + np.logspace(-6, 4, 400_001)
    log_delta = ((alpha - 1) * (alpha * rho - epsilon) - np.log(alpha - 1)
                 + alpha * np.log1p(-1 / alpha))
    return float(np.exp(log_delta.min()))


def epsilon_by_bisection(rho: float, delta: float) -> float:
    lo, hi = 0.0, rho + 2 * math.sqrt(rho * math.log(1 / delta))
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if cks_delta_on_a_grid(rho, mid) <= delta else (mid, hi)
    return hi


# --- composition --------------------------------------------------------------------------


def test_gaussian_releases_compose_by_adding_rho():
    delta = 1e-6
    rho = zcdp_rho_for(1.0, delta)
    # One release composes back to its own ε (its ρ is shaved by 1e-9 for safety).
    assert compose([entry(1.0, delta, rho)], delta) == pytest.approx(1.0, rel=1e-6)
    two = compose([entry(1.0, delta, rho), entry(1.0, delta, rho)], delta)
    assert two == pytest.approx(epsilon_by_bisection(2 * rho, delta), rel=1e-4)
    # zCDP composition beats adding the ε (2) and the Bun-Steinke conversion of 2ρ.
    assert two < 2 * rho + 2 * math.sqrt(2 * rho * math.log(1 / delta)) and two < 2.0
    assert 1.4 < two < 1.5  # ≈ sqrt(2) for small ρ


def test_laplace_releases_compose_by_basic_composition():
    assert compose([entry(0.5, 0.0), entry(0.25, 0.0)], 1e-9) == 0.75
    advanced = [entry(1.0, 1e-7), entry(1.0, 1e-7)]
    assert compose(advanced, 1e-6) == 2.0
    assert compose(advanced, 1e-7) == math.inf  # their δ alone is 2e-7


def test_mixed_releases_add_the_two_parts():
    delta = 1e-6
    total = composed([entry(0.5, 1e-7), entry(1.0, 2e-6, rho=0.1)], delta)
    assert total.rho == 0.1 and total.pure_epsilon == 0.5 and total.pure_delta == 1e-7
    assert total.epsilon == pytest.approx(0.5 + epsilon_by_bisection(0.1, delta - 1e-7),
                                          rel=1e-4)
    assert total.epsilon == pytest.approx(0.5 + epsilon_spent(0.1, 9e-7, "zcdp"), rel=1e-9)


def test_test_runs_and_other_notions_are_never_summed():
    entries = [entry(1.0, 0.0), entry(5.0, 0.0, private=False),
               entry(3.0, 0.0, notion="dependent-DP")]
    total = composed(entries, 1e-9)
    assert total.epsilon == 1.0 and total.releases == 1
    assert total.test_runs == 1 and total.other_notions == 1
    assert compose([], 1e-9) == 0.0


# --- paths and names ----------------------------------------------------------------------


def test_default_path_honours_the_env_var_and_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("DP_DASK_LEDGER", str(tmp_path / "mine.sqlite"))
    assert default_ledger_path() == tmp_path / "mine.sqlite"
    monkeypatch.delenv("DP_DASK_LEDGER")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_ledger_path() == tmp_path / "config" / "dp_dask" / "ledger.sqlite"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_ledger_path() == tmp_path / ".config" / "dp_dask" / "ledger.sqlite"


def test_dataset_names():
    for path, stem in (("/x/adult.csv", "adult"), ("/x/adult.csv.gz", "adult"),
                       (Path("/x/people.parquet"), "people"), ("/x/parts/", "parts")):
        with pytest.warns(DpDaskWarning, match=f"stem {stem!r}"):
            assert dataset_name_for(path) == stem
    assert dataset_name_for(correlated_frame(3)) == IN_MEMORY
    assert dataset_name_for(correlated_frame(3), "census-2020") == "census-2020"
    with pytest.raises(ValueError):
        dataset_name_for("a.csv", " ")


# --- fit and the ledger -------------------------------------------------------------------


def test_fit_records_an_entry(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=1.0, delta=1e-6,
                                            ledger=ledger, calibration_draws=2_000)
    with pytest.warns(DpDaskWarning, match="the input file's stem 'people'"):
        synthesizer.fit(data)
    model = synthesizer.save(tmp_path / "model")
    (recorded,) = ledger.entries()
    assert recorded.dataset_name == "people" and recorded.schema_sha256 == SHA
    assert recorded.dataset_id == f"people@sha256:{SHA[:12]}"
    assert (recorded.epsilon, recorded.delta, recorded.mechanism) == (1.0, 1e-6, "gaussian")
    # the exact accountant's charge: a valid zCDP ρ too, which is how the ledger composes it
    assert recorded.rho == pytest.approx(rho_budget(1.0, 1e-6, "exact"), rel=1e-6)
    assert recorded.accountant == "exact" and recorded.notion == APPROX_DP
    assert recorded.private and recorded.counted and recorded.status == SPENT
    assert recorded.created.endswith("+00:00")  # UTC
    assert recorded.model_path == str(model.resolve())
    assert synthesizer.model.metadata["ledger"] == {"dataset_name": "people",
                                                    "run_id": recorded.run_id}
    assert ledger.total("people").epsilon == pytest.approx(1.0, rel=1e-6)


def test_budget_refusal_comes_before_reading_the_data(client, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)
    missing = tmp_path / "people.parquet"  # does not exist: reading it would fail
    with pytest.raises(BudgetExceededError, match="budget of ε=1 .*before reading any data"):
        GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=2.0, delta=1e-6,
                                  ledger=ledger).fit(missing)
    assert ledger.entries() == []
    # Within budget, the fit goes on to the read (and fails there: nothing is recorded).
    with pytest.raises(FileNotFoundError):
        GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=0.5, delta=1e-6,
                                  ledger=ledger).fit(missing)
    assert ledger.entries() == []
    # --budget-epsilon alone, without a stored budget.
    with pytest.raises(BudgetExceededError, match="--budget-epsilon"):
        GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=0.5, ledger=ledger,
                                  dataset_name="other", budget_epsilon=0.4).fit(missing)


def test_budget_composes_and_force_goes_past_it(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)

    def fit(**options):
        return GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, delta=1e-6, ledger=ledger,
                                         calibration_draws=2_000, **options).fit(data)

    fit(epsilon=0.6)
    fit(epsilon=0.6)  # zCDP: two ε=0.6 Gaussian releases compose to ≈ 0.86, within 1
    assert 0.8 < ledger.total("people").epsilon < 1.0
    with pytest.raises(BudgetExceededError):
        fit(epsilon=0.6)
    with pytest.raises(BudgetExceededError):  # Laplace ε adds to the zCDP part
        fit(epsilon=0.2, mechanism="laplace")
    forced = fit(epsilon=0.6, force=True)
    assert forced.ledger_entry_.forced and len(ledger.entries()) == 3
    assert ledger.total("people").epsilon > 1.0


def test_test_runs_are_recorded_but_not_counted(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 0.1, 1e-6)
    synthesizer = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=5.0, ledger=ledger,
                                            noise_sampler="numpy", noise_seed=1,
                                            calibration_draws=2_000).fit(data)
    (recorded,) = ledger.entries()
    assert not recorded.private and not recorded.counted and recorded.kind == "TEST (not DP)"
    assert recorded.sampler == "numpy"
    total = ledger.total("people")
    assert total.epsilon == 0.0 and total.releases == 0 and total.test_runs == 1
    assert synthesizer.model.metadata["privacy"]["differentially_private"] is False


def test_retry_with_the_same_run_id_reuses_the_saved_model(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")

    def fit(**options):
        return GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=1.0, ledger=ledger,
                                         run_id="nightly-1", calibration_draws=2_000,
                                         **options)

    first = fit().fit(data)
    first.save(tmp_path / "model")
    again = fit().fit(tmp_path / "people.parquet")  # not read: the saved model is reused
    assert again.reused_ and len(ledger.entries()) == 1
    np.testing.assert_array_equal(again.model.noisy_counts, first.model.noisy_counts)
    with pytest.raises(LedgerError, match="use a new run id"):
        fit(mechanism="laplace").fit(data)
    # The model is gone: refuse, unless forced (which records and spends again).
    (tmp_path / "model" / "model.json").unlink()
    with pytest.raises(LedgerError, match="its model is not at"):
        fit().fit(data)
    assert not fit(force=True).fit(data).reused_
    assert len(ledger.entries()) == 2


def test_a_failed_fit_releases_its_reservation(client, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    frame = correlated_frame(100).drop(columns=["flag"])
    with pytest.raises(ValueError, match="missing column"):
        GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, ledger=ledger,
                                  dataset_name="people").fit(frame)
    assert ledger.entries() == []


@pytest.fixture
def subclass():
    """A test's subclass of a real method, under its own name, out of the registry afterwards
    (every subclass registers itself under its ``name``)."""
    made: list[str] = []

    def make(base: type[Synthesizer], name: str, **methods) -> type[Synthesizer]:
        made.append(name)
        return type(f"Test{base.__name__}", (base,), {"name": name, **methods})

    yield make
    for name in made:
        Synthesizer.methods.pop(name, None)


def test_a_fit_interrupted_after_its_noise_keeps_its_charge(client, data, tmp_path, subclass):
    ledger = Ledger(tmp_path / "ledger.sqlite")

    def interrupted(self, exact, n_rows, metadata):
        GaussianCopulaSynthesizer._fit_counts(self, exact, n_rows, metadata)  # noise drawn
        raise KeyboardInterrupt  # Ctrl-C during the model's post-processing

    after = subclass(GaussianCopulaSynthesizer, "test-after-noise", _fit_counts=interrupted)
    with pytest.raises(KeyboardInterrupt):
        after(SMALL_SCHEMA_PATH, epsilon=0.5, delta=1e-6, ledger=ledger, run_id="ctrl-c",
              calibration_draws=2_000).fit(data)
    (kept,) = ledger.entries()
    assert (kept.run_id, kept.status, kept.counted) == ("ctrl-c", FAILED, True)
    assert ledger.total("people").epsilon == pytest.approx(0.5, rel=1e-6)
    assert "failed: its noise was drawn" in report(ledger)
    # its retry cannot take it over or reuse a model: refused unless forced
    with pytest.raises(LedgerError, match="its model is not at"):
        GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=0.5, delta=1e-6, ledger=ledger,
                                  run_id="ctrl-c").fit(data)
    # interrupted before any noise (while counting): nothing was drawn, the entry goes
    before = subclass(GaussianCopulaSynthesizer, "test-before-noise",
                      _rows_counted=lambda self, exact: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        before(SMALL_SCHEMA_PATH, epsilon=0.5, delta=1e-6, ledger=ledger).fit(data)
    assert [e.run_id for e in ledger.entries()] == ["ctrl-c"]


def test_a_method_that_draws_noise_while_counting_keeps_its_charge(client, data, tmp_path,
                                                                   subclass):
    """DPCopula-Hybrid draws its stratum counts' noise between its two passes over the data:
    the boundary is the first draw, not the start of ``_fit_counts``."""
    ledger = Ledger(tmp_path / "ledger.sqlite")

    def interrupted(self, exact):
        raise KeyboardInterrupt  # after pass 2, before the fit: the stratum counts are noisy

    hybrid = subclass(DPCopulaHybridSynthesizer, "test-hybrid-after-noise",
                      _rows_counted=interrupted)
    with pytest.raises(KeyboardInterrupt):
        hybrid(SMALL_SCHEMA_PATH, epsilon=1.0, small_domain=3, ledger=ledger).fit(data)
    (kept,) = ledger.entries()
    assert kept.status == FAILED and ledger.total("people").epsilon == pytest.approx(1.0)


def test_a_schema_draft_interrupted_after_its_noise_keeps_its_charge(client, tmp_path,
                                                                     monkeypatch):
    from dp_dask.data import draft, draft_dp, draft_numeric

    path = tmp_path / "people.parquet"
    correlated_frame(500, seed=2).to_parquet(path)
    ledger = Ledger(tmp_path / "ledger.sqlite")

    def interrupted(*_, **__):  # thresholding the noisy octaves: post-processing, after noise
        raise KeyboardInterrupt

    monkeypatch.setattr(draft_numeric, "_passing", interrupted)
    options = {"dp_epsilon": 0.5, "dp_delta": 1e-6, "dp_columns": ["size"], "ledger": ledger}
    with pytest.raises(KeyboardInterrupt):
        draft.draft_schema(path, **options)
    (kept,) = ledger.entries()
    assert kept.status == FAILED and ledger.total("people").pure_epsilon == 0.5
    monkeypatch.setattr(draft_dp, "read_table", interrupted)  # before any noise: dropped
    with pytest.raises(KeyboardInterrupt):
        draft.draft_schema(path, **options)
    assert ledger.entries() == [kept]


def test_ledger_false_records_nothing(client, data, tmp_path, suite_ledger):
    before = Ledger(suite_ledger).entries()
    GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, ledger=False, noise_sampler="numpy",
                              calibration_draws=2_000).fit(data)
    assert Ledger(suite_ledger).entries() == before


def test_concurrent_fits_cannot_both_pass_the_budget(tmp_path):
    ledger_path = tmp_path / "ledger.sqlite"
    Ledger(ledger_path).set_budget("people", 1.0, 1e-6)
    start = threading.Barrier(8)
    outcomes = []

    def attempt(index: int) -> None:
        ledger = Ledger(ledger_path)  # its own connections, as another process would have
        start.wait()
        try:
            ledger.reserve(entry(0.8, 0.0, run=f"run-{index}"))
            outcomes.append("recorded")
        except BudgetExceededError:
            outcomes.append("refused")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["recorded"] + ["refused"] * 7
    assert len(Ledger(ledger_path).entries()) == 1


def test_reserved_entries_count_until_cancelled(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)
    held = ledger.reserve(entry(0.8, 0.0, run="a"))
    with pytest.raises(BudgetExceededError):
        ledger.reserve(entry(0.8, 0.0, run="b"))
    ledger.cancel(held.entry.id)
    assert not ledger.reserve(entry(0.8, 0.0, run="b")).reused
    other = ledger.record(replace(entry(9.0, 0.0, run="c"), notion="dependent-DP"))
    assert other.status == SPENT and ledger.total("people").epsilon == 0.8


# --- CLI ----------------------------------------------------------------------------------


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def test_cli_budget_refusal_exits_2_before_reading(client, tmp_path, capsys):
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["ledger", "set-budget", "adult", "--epsilon", "0.5", "--delta", "1e-6",
                 "--ledger", ledger]) == 0
    assert "budget of 'adult': ε=0.5 at δ=1e-06" in capsys.readouterr().out
    code = main(["fit", "--data", str(tmp_path / "adult.csv"), "--schema", "adult",
                 "--model", str(tmp_path / "model"), "--ledger", ledger, *scheduler(client)])
    assert code == 2
    err = capsys.readouterr().err
    assert "dataset 'adult' has a budget of ε=0.5" in err and "does not exist" not in err


def test_item8b_a_dataset_named_after_its_file_warns_how_to_declare_its_name(client, tmp_path,
                                                                             capsys):
    """The same people read from x.csv and from another file would get two budgets under two
    stems: the stem is a fallback, and says so, in Python and on the CLI."""
    with pytest.warns(DpDaskWarning, match=r"no dataset name declared: .* stem 'people'.*"
                      r"--dataset-name NAME \(job config: ledger.dataset_name; Python: "
                      r"dataset_name=...\)"):
        assert dataset_name_for("/x/people.parquet") == "people"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpDaskWarning)  # a declared name, or a frame: silent
        assert dataset_name_for("/x/people.parquet", "census") == "census"
        assert dataset_name_for(correlated_frame(3)) == IN_MEMORY
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["ledger", "set-budget", "adult", "--epsilon", "0.5", "--delta", "1e-6",
                 "--ledger", ledger]) == 0
    fit = ["fit", "--data", str(tmp_path / "adult.csv"), "--schema", "adult", "--model",
           str(tmp_path / "model"), "--ledger", ledger, *scheduler(client)]
    assert main(fit) == 2  # refused by the budget, before reading the (missing) file
    err = capsys.readouterr().err
    assert ("dp-dask: warning: no dataset name declared: the ledger counts this release under "
            "the input file's stem 'adult'") in err and "--dataset-name NAME" in err
    assert main([*fit, "--dataset-name", "adult"]) == 2
    assert "no dataset name declared" not in capsys.readouterr().err


def test_cli_synth_retry_and_ledger_list(client, data, tmp_path, capsys):
    ledger = str(tmp_path / "ledger.sqlite")
    base = ["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
            str(tmp_path / "release"), "--rows", "500", "--ledger", ledger,
            "--dataset-name", "people-2024", *scheduler(client)]
    synth = [*base, "--run-id", "job-7"]
    assert main(synth) == 0
    first = capsys.readouterr().out
    assert "released with ε=1.0" in first and "run 'job-7' of people-2024@sha256:" in first
    model = load_model(tmp_path / "release" / "model")
    assert main(synth) == 0  # the retried task: same run id
    assert "reused its model" in capsys.readouterr().out
    again = load_model(tmp_path / "release" / "model")
    for first, second in zip(model.marginals.one_way, again.marginals.one_way):
        np.testing.assert_array_equal(first, second)
    assert main([*base, "--run-id", "test-1", "--noise-sampler", "numpy", "--noise-seed",
                 "3", "--out", str(tmp_path / "test-release")]) == 0
    capsys.readouterr()

    assert main(["ledger", "list", "--ledger", ledger]) == 0
    listing = capsys.readouterr().out
    lines = listing.splitlines()
    assert lines[0] == f"ledger: {ledger}"
    assert lines[1].split()[:4] == ["id", "created", "(UTC)", "dataset"]
    assert sum("job-7" in line for line in lines) == 1  # recorded once
    assert "TEST (not DP)" in listing and str(tmp_path / "release" / "model") in listing
    assert ("total 'people-2024': ε=1 at δ=9.31e-10 over 1 DP release(s)" in listing
            and "1 non-private test run(s) not counted" in listing)
    assert main(["ledger", "list", "--ledger", ledger, "--dataset", "nobody"]) == 0
    assert "no entries for dataset 'nobody'" in capsys.readouterr().out


def test_a_retried_run_id_with_other_accounting_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    recorded = entry(1.0, 1e-6, rho=0.05, run="nightly")
    first = ledger.reserve(recorded)
    ledger.mark_spent(first.entry.id)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.json").write_text("{}")
    ledger.set_paths(first.entry.id, model_path=model)
    assert ledger.reserve(recorded).reused
    for change, field in (({"accountant": "exact"}, "accountant"), ({"rho": 0.04}, "rho"),
                          ({"notion": "dependent-DP"}, "notion")):
        with pytest.raises(LedgerError, match=f"recorded with {field}=.*use a new run id"):
            ledger.reserve(replace(recorded, **change))
    # the same for an unfinished entry that a retry would take over
    held = ledger.reserve(entry(0.5, 0.0, run="killed"))
    ledger._store.release(held.entry.id)  # as if its process had died
    with pytest.raises(LedgerError, match="recorded with accountant="):
        ledger.reserve(replace(entry(0.5, 0.0, run="killed"), accountant="other"))
    assert len(ledger.entries()) == 2


def test_mixed_units_total_one_row_with_k1_at_4_rho(tmp_path):
    """The dataset's total is one row's: a unit release with K = 1 at 4ρ (2ε if pure), K >= 2
    within its own charge; where units mix, `ledger list` warns and totals each unit column
    apart, its releases alone at their own charge."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for run, column, k in (("row", None, None), ("k1", "customer_id", 1),
                           ("k10", "customer_id", 10), ("laplace", "customer_id", 1)):
        made = entry(0.5, 0.0, run=run) if run == "laplace" else entry(1.0, 1e-6, 0.1, run=run)
        ledger.mark_spent(ledger.reserve(replace(made, unit_column=column,
                                                 unit_max_rows=k)).entry.id)
    total = ledger.total("people")
    as_rows = [entry(1.0, 1e-6, rho, run=str(rho)) for rho in (0.1, 0.4, 0.1)]
    expected = composed([*as_rows, entry(1.0, 0.0, run="laplace")], total.delta)
    assert total == replace(expected, unfinished=0)
    lines = report(ledger).splitlines()
    assert f"total 'people': ε={expected.epsilon:.6g} at δ={total.delta:.3g}" in "\n".join(lines)
    warning = next(i for i, line in enumerate(lines) if line.startswith("WARNING"))
    assert "(row, 'customer_id' <= 1 rows, 'customer_id' <= 10 rows)" in lines[warning]
    assert "K = 1 or auto counts at 4ρ, 2ε if Laplace" in lines[warning + 1]
    person = composed([entry(1.0, 1e-6, 0.2, run="k"), entry(0.5, 0.0)], total.delta)
    assert lines[warning + 2] == (f"  unit 'customer_id': ε={person.epsilon:.6g} at "
                                  f"δ={total.delta:.3g} over 3 DP release(s)")


# --- item 3: one budget rule, the row's, with each unit's own total beside it ------------------


RHO_1 = rho_budget(1.0, 1e-6, "exact")  # ε = 1 at δ = 1e-6: ρ = 0.02801


def unit_release(run: str, max_rows: int | None, epsilon: float = 1.0,
                 rho: float = RHO_1) -> Entry:
    """A Gaussian release of privacy unit 'customer_id' (K = ``max_rows``, None: auto)."""
    return Entry("people", SHA, run, epsilon, 1e-6, "gaussian", "exact", rho, True, "opendp",
                 unit_column="customer_id", unit_max_rows=max_rows)


def test_item3_a_k1_unit_release_is_checked_at_what_it_costs_one_row(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)
    one_row = epsilon_spent(4 * RHO_1, 1e-6, "exact")
    assert one_row == pytest.approx(2.12, abs=0.01)
    for k in (1, None):  # K = 1, and auto (its K may be 1)
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve(unit_release(f"k{k}", k))
        message = str(refused.value)
        assert f"would bring the total to ε={one_row:.6g} (a unit release with K = 1" in message
        assert "unit 'customer_id' alone" in message and "would total ε=1" in message
    assert ledger.entries() == []
    k2 = ledger.reserve(unit_release("k2", 2)).entry  # K = 2: a row's change is within it
    ledger.mark_spent(k2.id)
    assert ledger.total("people").epsilon == pytest.approx(1.0, rel=1e-6)


def test_item3_a_units_total_leaves_out_row_level_releases(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)
    draft = Entry.for_draft(dataset_name="people", request_sha256=SHA, run_id="draft",
                            epsilon=0.1, delta=1e-8, sampler="opendp", private=True)
    ledger.mark_spent(ledger.reserve(draft).entry.id)
    unit = unit_release("k2", 2)
    with pytest.raises(BudgetExceededError) as refused:  # the row can lose the draft's ε too
        ledger.reserve(unit)
    row = composed([draft, replace(unit, unit_column=None)], 1e-6).epsilon
    alone = composed([unit], 1e-6).epsilon
    assert row > 1.05 and alone == pytest.approx(1.0, rel=1e-6)
    assert f"would bring the total to ε={row:.6g};" in str(refused.value)
    assert (f"unit 'customer_id' alone (its 1 DP release(s) with this one, at their own charge; "
            f"row-level and other units' releases not counted) would total ε={alone:.6g}"
            in str(refused.value))
    ledger.mark_spent(ledger.reserve(unit, force=True).entry.id)
    lines = report(ledger).splitlines()
    assert f"total 'people': ε={row:.6g} at δ=1e-06 over 2 DP release(s)" in "\n".join(lines)
    assert f"  unit 'customer_id': ε={alone:.6g} at δ=1e-06 over 1 DP release(s)" in lines


def test_item8d_a_row_moved_between_k1_units_moves_a_table_by_l2_2_sqrt2(tmp_path):
    """The worst case behind _as_row_level's 4ρ, with the real bounding: a row replaced by
    one in another unit (K = 1) makes both units swap their kept row between the same two
    cells of the (a, b) table, -2 and +2: L2 2√2, twice a K = 1 unit's √2, so 4× the ρ of a
    measurement as well as of a selection (not 2×, as the ledger once said)."""
    schema = Schema.from_json({"schema_version": 1, "name": "s", "attributes": [
        {"name": name, "type": "categorical", "categories": ["0", "1"]} for name in "abc"]})
    # r in unit A (cell (0, 0)) becomes r' in unit B (cell (1, 1)); A also holds s (1, 1), B t
    rows = {"r": ("A", "0", "0", "0"), "s": ("A", "1", "1", "0"), "t": ("B", "0", "0", "1")}
    before = pd.DataFrame(list(rows.values()), columns=["uid", *"abc"])
    after = pd.DataFrame([("B", "1", "1", "1"), rows["s"], rows["t"]], columns=["uid", *"abc"])

    def table(frame: pd.DataFrame, seed: int) -> pd.Series:
        kept = bound_contributions(dd.from_pandas(frame, npartitions=1), schema,
                                   PrivacyUnit("uid", 1), seed).compute()
        return kept.groupby(["a", "b"]).size().reindex(
            pd.MultiIndex.from_product([["0", "1"]] * 2), fill_value=0)

    moved = [(table(after, seed) - table(before, seed)).to_numpy() for seed in range(24)]
    worst_l2 = max(float(np.linalg.norm(m)) for m in moved)
    assert worst_l2 == pytest.approx(2 * math.sqrt(2))
    assert max(int(np.abs(m).sum()) for m in moved) == 4
    factor = (worst_l2 / table_sensitivity("replace", "l2", 1)) ** 2
    assert factor == pytest.approx(4.0)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.mark_spent(ledger.reserve(unit_release("k1", 1)).entry.id)
    assert ledger.total("people").rho == pytest.approx(factor * RHO_1)
    listing = report(ledger)  # the rule as `ledger list` states it: 4ρ, measured or selected
    assert "K = 1 or auto counts at 4ρ" in listing and "2ρ measured" not in listing
