"""The privacy ledger: recording, budget refusal before any read, retries, composition, CLI."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.methods.copula import GaussianCopulaSynthesizer
from dp_dask.methods.dpcopula_hybrid import DPCopulaHybridSynthesizer
from dp_dask.privacy import epsilon_spent, rho_budget, zcdp_rho_for
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
    assert dataset_name_for("/x/adult.csv") == "adult"
    assert dataset_name_for("/x/adult.csv.gz") == "adult"
    assert dataset_name_for(Path("/x/people.parquet")) == "people"
    assert dataset_name_for("/x/parts/") == "parts"
    assert dataset_name_for(correlated_frame(3)) == IN_MEMORY
    assert dataset_name_for(correlated_frame(3), "census-2020") == "census-2020"
    with pytest.raises(ValueError):
        dataset_name_for("a.csv", " ")


# --- fit and the ledger -------------------------------------------------------------------


def test_fit_records_an_entry(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=1.0, delta=1e-6,
                                            ledger=ledger, calibration_draws=2_000)
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


def test_mixed_units_total_one_row_with_k1_at_up_to_4_rho(tmp_path):
    """A unit release with K = 1 bounds one row's change only at twice its sensitivity (a row
    moved between two units changes both: L2 2 against the unit's √2): 2ρ measured, 4ρ
    selected, 2ε if pure; K >= 2 within its own. Where units mix, `ledger list` says so in one
    line with that total."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for run, column, k in (("row", None, None), ("k1", "customer_id", 1),
                           ("k10", "customer_id", 10), ("laplace", "customer_id", 1)):
        made = entry(0.5, 0.0, run=run) if run == "laplace" else entry(1.0, 1e-6, 0.1, run=run)
        ledger.mark_spent(ledger.reserve(replace(made, unit_column=column,
                                                 unit_max_rows=k)).entry.id)
    delta = ledger.total("people").delta
    (line,) = [x for x in report(ledger).splitlines() if x.startswith("  one row, all units")]
    as_rows = [entry(1.0, 1e-6, rho, run=str(rho)) for rho in (0.1, 0.4, 0.1)]
    expected = composed([*as_rows, entry(1.0, 0.0, run="laplace")], delta)
    assert f"ε={expected.epsilon:.6g} at δ={delta:.3g}" in line
    assert "K = 1 (and auto) releases at up to 4ρ" in line
