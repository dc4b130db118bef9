"""The budget split as a value, rendered in one place; the one command's split in the record
(issue 66): each method builds a dp_dask.privacy.split.BudgetSplit, the record stores it
(``privacy.budget_parts``), render_split alone writes ``privacy.budget_split``, and the audit's
reader (PrivacyRecord.from_metadata) gets every part back."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

import dp_dask
from dp_dask.one_command import draft_and_fit, split_budget
from dp_dask.privacy.labels import PRIVATE_SAMPLERS
from dp_dask.privacy.record import PrivacyRecord
from dp_dask.privacy.split import BudgetSplit, render_split
from dp_dask.stats import DependentPrivacyWarning, release_stats
from dp_dask.synthesizer import Synthesizer

PACKAGE = Path(dp_dask.__file__).parent
# where the methods build their records: none may write the split's prose
BUILDERS = [*sorted((PACKAGE / "methods").rglob("*.py")), PACKAGE / "stats.py"]
SEEDED = {"noise_sampler": "numpy", "noise_seed": 4, "ledger": False}


def people_frame() -> pd.DataFrame:
    frame = correlated_frame(3000)
    frame["person"] = [f"p{i % 1000}" for i in range(len(frame))]
    return frame


def split_prose_sites(path: Path) -> list[str]:
    """Where ``path`` names the metadata's ``budget_split`` key: as a string (a dict key, a
    subscript) or as a keyword argument."""
    sites = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value == "budget_split":
            sites.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.keyword) and node.arg == "budget_split":
            sites.append(f"{path.name}:{node.value.lineno}")
    return sites


def test_item1_no_method_writes_budget_split_prose():
    sites = [site for path in BUILDERS for site in split_prose_sites(path)]
    assert sites == [], f"budget_split written outside dp_dask.privacy: {sites}"


def releases() -> list[tuple[str, dict]]:
    """The ``privacy`` metadata of one seeded release per method and option path."""
    frame = people_frame()
    cases = [(method, {"small_domain": 2} if method == "dpcopula-hybrid" else {})
             for method in sorted(Synthesizer.methods)] + [
        ("marginals", {"neighbours": "add_remove"}),
        ("marginals", {"rounds": 2, "accountant": "zcdp"}),
        ("marginals", {"privacy_unit": {"column": "person", "max_rows": "auto"}}),
        ("dpview", {"neighbours": "add_remove"})]
    released = [(f"{method} {options}", Synthesizer.create(
        method, SMALL_SCHEMA_PATH, epsilon=1.0, delta=1e-6, **SEEDED, **options
    ).fit(frame).model.metadata["privacy"]) for method, options in cases]
    for options in ({}, {"mechanism": "tabular-ddp", "network_share": 0.5}):
        with warnings.catch_warnings():  # tabular-ddp's, on its weaker notion: known here
            warnings.simplefilter("ignore", DependentPrivacyWarning)
            released.append((f"stats {options}", release_stats(
                frame.drop(columns="person"), SMALL_SCHEMA_PATH, epsilon=1.0, **SEEDED,
                **options).metadata["privacy"]))
    return released


@pytest.fixture(scope="module")
def released(client):
    return releases()


def test_item1_every_release_renders_its_split_from_its_parts(released):
    for case, privacy in released:
        split = PrivacyRecord.from_metadata(privacy).split
        assert isinstance(split, BudgetSplit), case
        assert split == BudgetSplit.from_json(privacy["budget_parts"]), case
        rendered = privacy["budget_split"].removeprefix(
            "NOT A GUARANTEE (seeded noise); noise calibrated as follows: ")
        # after a choice of K, its share comes first: the measurements' split follows it
        assert rendered.endswith(render_split(split)), case


def test_item3_every_method_metadata_round_trips_through_the_record(released):
    for case, privacy in released:
        assert PrivacyRecord.from_metadata(privacy).to_metadata() == privacy, case


def test_item1_split_keeps_each_part_as_values(released):
    privacy = dict(released)["dpcopula-kendall {}"]
    histograms, correlations = PrivacyRecord.from_metadata(privacy).split.parts
    assert (histograms.symbol, correlations.symbol) == ("epsilon1", "epsilon2")
    assert histograms.epsilon + correlations.epsilon == pytest.approx(1.0)
    assert histograms.epsilon / correlations.epsilon == pytest.approx(privacy["k"])
    assert histograms.count * histograms.epsilon_each == pytest.approx(histograms.epsilon)


def test_item2_a_one_command_release_records_its_split_as_a_value(client):
    rng = np.random.default_rng(0)
    raw = pd.DataFrame({"group": rng.choice(["a", "b", "c"], 4000, p=[0.5, 0.3, 0.2]),
                        "age": rng.integers(18, 80, 4000).astype(np.int64)})
    result = draft_and_fit(raw, epsilon=1.0, delta=1e-6, **SEEDED)
    privacy = result.synthesizer.model.metadata["privacy"]
    expected = {**split_budget(1.0, 1e-6, 0.45), "left_out": []}
    read = PrivacyRecord.from_metadata(privacy)
    # the record the fit built carries it: the metadata is rendered once, from that record
    assert result.synthesizer.privacy_record_.one_command == expected
    assert read.one_command == expected == privacy["one_command"]
    assert read.to_metadata() == privacy
    assert read.cost.epsilon == pytest.approx(expected["release"]["epsilon"])
    assert privacy["noise_sampler"] not in PRIVATE_SAMPLERS  # seeded: labelled, not DP
