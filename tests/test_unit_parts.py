"""A unit-shaped release's nested privacy record (issues 66, 67): the unit model, fitted inside
the release on a table of one row per unit, records its measurements as a part of the release's
record (its own ρ and share, the release's unit and neighbours, how it composes into the
release's guarantee), never as a release of its own: no (ε, δ), no DP claim, no row unit."""

from __future__ import annotations

import json

import pytest
from test_unit_shape import PANEL_SCHEMA, K, panel

from dp_dask.data.schema import load_schema
from dp_dask.methods.marginals.config import DEFAULTS
from dp_dask.privacy.accounting import rho_budget
from dp_dask.synthesizer import Synthesizer, load_model

EPSILON, DELTA = 2.0, 1e-6


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_item3_the_unit_models_record_is_a_part_of_the_release(client, tmp_path, neighbours):
    """Before (652615b) the unit model's record read as a release of its own, under the vetted
    sampler: "differentially_private": true, ε = 2, δ = 1e-06, "replace one row; n public",
    privacy unit "row", and a budget split ending "the exact accountant gives (2, 1e-06)-DP",
    for what is only its share of a guarantee about units: AssertionError on its
    neighbouring, "replace one row; n public" != "replace all rows of one 'uid' ..."."""
    synthesizer = Synthesizer.create(
        "marginals", load_schema(PANEL_SCHEMA), epsilon=EPSILON, delta=DELTA, ledger=False,
        privacy_unit={"column": "uid", "max_rows": K}, unit_shape=True,
        neighbours=neighbours).fit(panel(600))  # the vetted sampler: a real release's claims
    release = synthesizer.model.metadata["privacy"]
    part = synthesizer.model.units.metadata["privacy"]
    # under the release's unit and notion, not a row's
    assert part["neighbouring"] == release["neighbouring"]
    assert part["neighbouring"].startswith(("replace all rows of one 'uid'",
                                            "add or remove all rows of one 'uid'"))
    assert part["privacy_unit"] == release["privacy_unit"]
    assert part["privacy_unit"]["unit"] == "uid" and part["privacy_unit"]["max_rows"] == K
    # its own share: the release's rho_split's term, unit_share of the measurements' ρ
    assert part["part"] == "the unit model"
    assert part["rho"] == release["rho_split"]["unit_model"]
    assert part["rho_share"] == pytest.approx(DEFAULTS.unit_share, rel=1e-12)
    assert release["rho"] == pytest.approx(rho_budget(EPSILON, DELTA), rel=1e-12)
    assert (part["mechanism"], part["accountant"]) == (release["mechanism"],
                                                       release["accountant"])
    # no claim of its own: no (ε, δ), no DP label, no accountant's (ε, δ) in its split
    for claim in ("epsilon", "delta", "differentially_private", "label", "reason",
                  "replace_one_row"):
        assert claim not in part
    assert "accountant gives" not in part["budget_split"]
    assert "replace one row" not in json.dumps(part)
    assert part["budget_split"].endswith("one part of the release: see composes_into")
    assert part["composes_into"].startswith(
        f"one part of the release, no guarantee on its own: its rho {part['rho']:.6g} is one "
        f"term of the release's rho {release['rho']:.6g}")
    assert (f"({EPSILON:g}, {DELTA:g})-DP for the whole release under its neighbours "
            f"({release['neighbouring']})") in part["composes_into"]
    # the release's own record keeps its claim, and the part is saved as it reads
    assert release["differentially_private"] is True
    assert f"gives ({EPSILON:g}, {DELTA:g})-DP" in release["budget_split"]
    saved = load_model(synthesizer.save(tmp_path / "model"))
    assert saved.units.metadata["privacy"] == part
    assert json.loads((tmp_path / "model" / "units" / "model.json").read_text())[
        "metadata"]["privacy"] == json.loads(json.dumps(part))
