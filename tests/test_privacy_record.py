"""One privacy record per release (issue 66): a value (dp_dask.privacy.record) that the ledger
entry, the release metadata and the audit all read, rendered to metadata in one place."""

from __future__ import annotations

import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.audit.scenarios import Scenario
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.record import Cost, PrivacyRecord
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer


def people_frame():
    frame = correlated_frame(3000)
    frame["person"] = [f"p{i % 1000}" for i in range(len(frame))]
    return frame


def fitted(method: str, tmp_path, **options) -> Synthesizer:
    frame = people_frame()
    return Synthesizer.create(method, SMALL_SCHEMA_PATH, epsilon=1.0, delta=1e-6,
                              noise_sampler="numpy", noise_seed=2, dataset_name=method,
                              ledger=Ledger(tmp_path / "ledger.sqlite"), **options).fit(frame)


def entry_cost(synthesizer: Synthesizer) -> Cost:
    entry = synthesizer.ledger_entry_
    return Cost(entry.epsilon, entry.delta, entry.mechanism, entry.accountant, entry.rho)


@pytest.mark.parametrize(("method", "options"), [
    ("marginals", {"neighbours": "add_remove"}),
    ("marginals", {"privacy_unit": {"column": "person", "max_rows": "auto"}}),
    ("dpview", {"neighbours": "add_remove"}),
    ("copula", {}),
])
def test_item3_the_ledger_the_metadata_and_the_audit_read_one_record(client, tmp_path, method,
                                                                     options):
    synthesizer, frame = fitted(method, tmp_path, **options), people_frame()
    record = synthesizer.privacy_record_
    privacy = synthesizer.model.metadata["privacy"]
    assert isinstance(record, PrivacyRecord) and privacy == record.to_metadata()
    # the ledger reserved the record's replace-one-row cost, before the fit; the metadata
    # shows it (replace_one_row where the release's notion is another) and reads back to it
    assert entry_cost(synthesizer) == record.ledger_cost == synthesizer.ledger_cost()
    read = PrivacyRecord.from_metadata(privacy)
    assert read.cost == record.cost and read.ledger_cost == record.ledger_cost
    if options.get("neighbours") == "add_remove":
        assert record.charge is not None and record.charge.epsilon > record.cost.epsilon
        assert privacy["replace_one_row"] == {"epsilon": record.charge.epsilon,
                                              "rho": record.charge.rho}
    # the audit holds replace-one neighbours to the ledger's cost, its own to the release's
    for notion, cost in (("replace", entry_cost(synthesizer)), ("add_remove", record.cost)):
        scenario = Scenario(method, method, notion, synthesizer.schema, (frame, frame))
        assert scenario.claim(synthesizer.model, 0.01) == cost.epsilon_at(0.01)


def test_item3_a_choice_of_k_is_rendered_from_the_record_split(client, tmp_path):
    synthesizer = fitted("marginals", tmp_path,
                         privacy_unit={"column": "person", "max_rows": "auto"})
    record = synthesizer.privacy_record_
    split = record.rho_split
    assert record.cost.rho == pytest.approx(split["max_rows_choice"] + split["measurements"])
    rendered = synthesizer.model.metadata["privacy"]["budget_split"]
    assert (f"rho {split['max_rows_choice']:.6g} to choosing max_rows (privacy_unit.auto), "
            f"then rho {split['measurements']:.6g} to the measurements: ") in rendered


def test_item3_stats_render_their_record_in_the_same_place(client, tmp_path):
    frame = correlated_frame(2000)
    release = release_stats(frame, SMALL_SCHEMA_PATH, epsilon=1.0, noise_sampler="numpy",
                            noise_seed=1, ledger=Ledger(tmp_path / "ledger.sqlite"))
    privacy = release.metadata["privacy"]
    read = PrivacyRecord.from_metadata(privacy)
    assert read.cost == Cost(1.0, 0.0, "laplace", privacy["accountant"], None)
    assert privacy["differentially_private"] is False and privacy["label"].startswith(
        "NON-PRIVATE")
