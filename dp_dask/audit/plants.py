"""Planted bugs: the audit must fail on each (tests, ``.ci/audit``, ``dp-dask audit --plant``).

A plant changes fields of its scenario (:class:`~dp_dask.audit.scenarios.Scenario`), never the
code: the release it makes is the one the bug would make, and the claim it is held to stays the
correct release's. Four kinds of field:

* ``noise_divisor``: the release drawn with its noise scales divided by it (it runs at the
  budget that buys that much less noise): a σ or Laplace scale calibrated too small, a
  sensitivity undercounted, a budget not split over steps;
* ``frames``: neighbours that differ by more than the claim's sensitivity allows (two rows
  replaced where the calibration assumes one; a unit's K kept rows spread over K units of one
  row each, where the calibration is a row's);
* ``options``: what the release is asked, where the bug changes a public input: a privacy unit
  that keeps more rows than the noise assumes, a threshold calibrated for a larger δ;
* ``steps``, ``public_sample``: a method with one step swapped on its instance (a function
  of the instance and the step's arguments: its rows' random order undone, a unit-shaped
  release's lag-1 table weighing each pair whole), a draft made from the data as if it were a
  public sample.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.dataframe as dd
from dask.delayed import Delayed

from dp_dask.audit.canaries import (
    DRAFT_UNIT_K,
    DRAFT_UNIT_ROWS,
    IDENTIFIER_NOISE_DIVISOR,
    OCTAVE_NOISE_DIVISOR,
    SEARCHES_NOISE_DIVISOR,
    UNIT,
    UNIT_ROWS,
    YEARS_NOISE_DIVISOR,
    canary_pair,
    draft_unit_pair,
    joint_text_pair,
    together_pair,
    wide_pair,
)
from dp_dask.audit.scenarios import STATS_UNIT_K, UNIT_K, UNIT_SHAPED_K, Scenario
from dp_dask.methods.marginals.synthesizer import MarginalSynthesizer
from dp_dask.methods.marginals.unit_shape import lag_count_graph, unit_count_graph
from dp_dask.synthesizer import Synthesizer

WIDE_ROWS = 4  # the rows tables-auto-rows-undercounted's neighbours replace
# the rows joint-text-rows-undercounted's neighbours replace: the fewest the audit resolves at
# a few hundred trials (the near value's presence on D against none on D'); 8 are not (ε̂ < 0 at
# 150 trials), nor √(2m) = 2, an L2 distance of one column's K for m = 2 (docs/privacy.md)
JOINT_TEXT_ROWS = 16
# together-rows-undercounted's: its text share is half the joint pair's (two of four columns),
# so its second round's σ is larger (6,490 against 4,761 weighted rows): 16 rows, 1.7 σ, are not
# resolved (ε̂ 1.80 against the claim 1.94 at 300 trials); 24 are 2.6 σ, as 16 are there
TOGETHER_ROWS = 24


def input_order(method: Synthesizer, codes: dd.DataFrame) -> dd.DataFrame:
    """DPCopula-MLE's ``_row_order`` undone: its blocks cut from the input's own row order
    (finding 1)."""
    return codes


def lag_pairs_unweighted(method: MarginalSynthesizer, ddf: dd.DataFrame) -> Delayed:
    """A unit-shaped release's ``_count_graph`` (the rows' counts, the unit table's, the lag-1
    table's) with every pair of the lag-1 table weighing what a unit's pairs weigh in all: a
    unit of K rows moves it K − 1 times its calibration."""
    return dask.delayed(tuple)([
        method._row_count_graph(ddf),
        unit_count_graph(ddf, method.schema, method.units_schema),
        lag_count_graph(ddf, method.schema, *method.sequence, once=False)])


@dataclass(frozen=True)
class Plant:
    """A planted bug: its name, the scenario it is audited on, what it does wrong, and the
    scenario's fields it changes (``options`` merged into the scenario's)."""

    name: str
    scenario: str
    bug: str
    changes: dict[str, Any] = field(default_factory=dict)

    def apply(self, scenario: Scenario) -> Scenario:
        changes = dict(self.changes)
        if "options" in changes:
            changes["options"] = {**scenario.options, **changes["options"]}
        return dataclasses.replace(scenario, **changes)


def _plants() -> list[Plant]:
    return [
        Plant("sigma-halved", "marginals", "the Gaussian measurements drawn with half the σ "
              "their charge was computed for", {"noise_divisor": 2}),
        Plant("sensitivity-undercounted", "marginals", "neighbours that replace two rows: the "
              "tables' L2 sensitivity is twice what the noise is calibrated to",
              {"frames": canary_pair("replace", copies=2)}),
        Plant("mle-order-restored", "dpcopula-mle", "DPCopula-MLE's blocks cut from the "
              "input's own row order: the uniformly random order undone",
              {"steps": {"_row_order": input_order}}),
        Plant("data-dependent-bin", "schema-draft", "the schema draft's numeric bins taken from "
              "the private values (the non-DP public-sample path, fed the private data)",
              {"public_sample": True}),
        Plant("joint-sigma-halved", "marginals-joint", "the dense joint's 1-way histograms and "
              "triples drawn with half their σ", {"noise_divisor": 2}),
        Plant("tables-auto-rows-undercounted", "marginals-tables-auto", "neighbours that "
              f"replace {WIDE_ROWS} rows, as a unit of {WIDE_ROWS} rows counted as one row "
              "would: the tree selection's and the tables' sensitivity that many times their "
              "calibration's", {"frames": wide_pair(WIDE_ROWS)}),
        Plant("unit-bounding-skipped", "marginals-unit", f"the canary unit's {UNIT_ROWS} rows "
              f"all kept while the noise is calibrated to max_rows {UNIT_K}",
              {"options": {"privacy_unit": {"column": UNIT, "max_rows": UNIT_ROWS}},
               "noise_divisor": UNIT_ROWS / UNIT_K}),
        Plant("lag-pairs-unweighted", "marginals-unit-shaped", "the unit-shaped release's "
              "lag-1 table weighing each pair of a unit's rows whole instead of the unit's "
              f"pairs once in all: the canary unit's {UNIT_SHAPED_K} kept rows move it "
              f"{UNIT_SHAPED_K - 1} times the sensitivity its noise is calibrated to",
              {"steps": {"_count_graph": lag_pairs_unweighted}}),
        Plant("unit-sensitivity-skipped", "stats-unit", f"max_rows {STATS_UNIT_K} rows per "
              "unit kept, the Laplace scale a row's (2m/ε: the ×max_rows skipped)",
              {"noise_divisor": STATS_UNIT_K}),
        Plant("auto-k-sensitivity-1", "unit-auto-k", "max_rows 'auto' chosen with the "
              "quantile score's sensitivity taken as 1 instead of its 10 (the selection's ε "
              "ten times its charge)", {"noise_divisor": 10}),
        Plant("octave-scale-unsplit", "draft-octaves", "the octave search's Laplace scale at "
              "sensitivity 1 instead of 2 (add/remove's) with each of its two steps at the "
              "draft's whole ε, the budget not split (n̂, the types, the point masses, the "
              f"other step): {OCTAVE_NOISE_DIVISOR:.2f} times too small",
              {"noise_divisor": OCTAVE_NOISE_DIVISOR}),
        Plant("searches-budget-unconverted", "draft-searches-joint", "the numeric searches "
              "measured together with their summed ε taken as ρ (no conversion to zCDP), every "
              "step at all of it and at a row's add/remove L2 1: σ = 1/√(2ε) "
              f"({SEARCHES_NOISE_DIVISOR:.1f} times too small)",
              {"noise_divisor": SEARCHES_NOISE_DIVISOR}),
        Plant("years-scale-halved", "draft-years", "the year counts' Laplace scale at "
              "sensitivity 1 instead of 2 (add/remove's)", {"noise_divisor": YEARS_NOISE_DIVISOR}),
        Plant("text-threshold-without-delta", "draft-text", "the text threshold calibrated "
              "for δ = 0.3, not the draft's 1e-6 (threshold 2 for 15): a lone value passes",
              {"options": {"dp_delta": 0.3}}),
        Plant("joint-text-rows-undercounted", "draft-text-joint", "neighbours that replace "
              f"{JOINT_TEXT_ROWS} rows, as a unit of {JOINT_TEXT_ROWS} rows counted as one row "
              "would: the joint text mechanism's Gaussian rounds see that many times the "
              "distance their noise is calibrated to",
              {"frames": joint_text_pair(JOINT_TEXT_ROWS)}),
        Plant("together-rows-undercounted", "draft-gaussian-together", "neighbours that "
              f"replace {TOGETHER_ROWS} rows where the text rounds share one budget with "
              "the numeric searches: the rounds, at their part of the one budget's ρ, see "
              "that many times the distance their noise is calibrated to",
              {"frames": together_pair(TOGETHER_ROWS)}),
        Plant("identifier-count-unnoised", "draft-identifier", "the distinct-value count behind "
              "the identifier rule (released in the draft's record) with 1/60 of its noise",
              {"noise_divisor": IDENTIFIER_NOISE_DIVISOR}),
        Plant("unit-draft-at-row-sensitivity", "draft-unit", f"the unit draft bounding the "
              f"canary unit's {DRAFT_UNIT_ROWS} rows to max_rows {DRAFT_UNIT_K} while every "
              "mechanism (n̂, the types, the distinct count, the text threshold) is calibrated "
              f"at bound 1: drafted at max_rows 1 with the unit's rows given to {DRAFT_UNIT_K} "
              "units, which keeps the same rows", {
                  "options": {"privacy_unit": {"column": UNIT, "max_rows": 1}},
                  "frames": draft_unit_pair(split=DRAFT_UNIT_K)}),
    ]


# plant → the plant (its scenario, bug and changes)
PLANTS: dict[str, Plant] = {p.name: p for p in _plants()}
