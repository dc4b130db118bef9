"""Unit-shaped releases against today's unit release (issue 67, docs/results-units.md).

Tables: the Vella–Verbeek males panel (545 men × 1980–87, an ``nr`` id; Rdatasets' ``Males``,
shipped as linearmodels' ``wage_panel``), and a users × events table of a known structure
(tests/unit_events.py: geometric rows per user, unit-level attributes, a persistent per-user level).
Each at ε = 1 (and the sweep given), seeds 0..S−1, both releases in the same run:

* today: ``marginals`` under the privacy unit opted out of units (``unit_shape=False``, the
  default before issue 67), rows each with their own id (each row its own unit: the release
  has no units);
* unit-shaped: ``unit_shape=True``, the default under a privacy unit (with the panel's ``year``
  order and ``lwage`` lag);
* unit-shaped, found (auto): the same with no attribute declared unit-level and the privacy
  unit's ``unit_level: "auto"``: they are looked for under DP (``found``: how many of the
  declared ones were found; the unit-constant share is of the declared ones).

Printed as a markdown table: rows-per-unit TVD, unit-constant share, lag-1 correlation error
(and the real lag-1 correlation: today's release has no unit of two rows, so no lag at all),
mean 1-/2-way TVD of the rows (over attributes and pairs), wall time (fit and sample).

    python -m benchmarks.units_shape --panel /path/wage_panel.csv.bz2 --seeds 3
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.paths import load_test_helper
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.tables import markdown_table
from dp_dask.evaluate.units import unit_checks
from dp_dask.synthesizer import Synthesizer

unit_events = load_test_helper("unit_events")

PANEL_SCHEMA = {"name": "males", "attributes": [
    {"name": "year", "type": "categorical", "categories": [str(y) for y in range(1980, 1988)]},
    {"name": "black", "type": "categorical", "categories": ["0", "1"], "unit_level": True},
    {"name": "hisp", "type": "categorical", "categories": ["0", "1"], "unit_level": True},
    {"name": "educ", "type": "numeric", "edges": [0, 9, 12, 13, 16, 17], "unit_level": True},
    {"name": "exper", "type": "numeric", "edges": [0, 2, 4, 6, 8, 10, 12, 19]},
    {"name": "married", "type": "categorical", "categories": ["0", "1"]},
    {"name": "union", "type": "categorical", "categories": ["0", "1"]},
    {"name": "occupation", "type": "categorical", "categories": [str(o) for o in range(1, 10)]},
    {"name": "lwage", "type": "numeric",
     "edges": [-4, 0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 4.1]},
]}


def panel(path: str) -> pd.DataFrame:
    frame = pd.read_csv(path)
    return frame[["nr", *(a["name"] for a in PANEL_SCHEMA["attributes"])]].astype(
        {"year": str, "black": str, "hisp": str, "married": str, "union": str,
         "occupation": str})


def marginal_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, schema: Schema
                 ) -> tuple[float, float]:
    """Mean TVD of the 1-way and of the 2-way marginals (binned by the schema)."""
    codes = [encode_partition(f[schema.columns], schema) for f in (real, synthetic)]
    sizes = schema.sizes

    def tvd(groups: tuple[int, ...]) -> float:
        shape = tuple(sizes[list(groups)])
        tables = [np.bincount(np.ravel_multi_index(tuple(c[list(groups)]), shape),
                              minlength=int(np.prod(shape))) for c in codes]
        return 0.5 * float(np.abs(tables[0] / tables[0].sum()
                                  - tables[1] / tables[1].sum()).sum())
    one = np.mean([tvd((i,)) for i in range(schema.m)])
    two = np.mean([tvd(p) for p in itertools.combinations(range(schema.m), 2)])
    return float(one), float(two)


def undeclared(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with no attribute declared unit-level (for ``unit_level: "auto"`` to find)."""
    return {**spec, "attributes": [{key: value for key, value in attribute.items()
                                    if key != "unit_level"} for attribute in spec["attributes"]]}


# the releases compared: today's (rows, unit_shape opted out), unit-shaped with the schema's
# declared unit-level attributes, and unit-shaped with none declared, found under DP
RELEASES = {"today": (False, "declared"), "unit-shaped": (True, "declared"),
            "unit-shaped, found (auto)": (True, "auto")}


def run(name: str, frame: pd.DataFrame, spec: dict[str, Any], unit: str, k: int,
        epsilon: float, seed: int, sequence: tuple[str, str] | None) -> list[dict[str, Any]]:
    schema = load_schema(spec)  # the declared unit-level attributes: what is checked
    rows = []
    for label, (shaped, level) in RELEASES.items():
        options: dict[str, Any] = {"unit_shape": shaped}  # today's: rows (opted out)
        if shaped and sequence:
            options |= {"unit_order": sequence[0], "unit_lag": sequence[1]}
        start = time.perf_counter()
        synthesizer = Synthesizer.create(
            "marginals", load_schema(undeclared(spec)) if level == "auto" else schema,
            epsilon=epsilon, noise_sampler="numpy", noise_seed=seed, ledger=False,
            privacy_unit={"column": unit, "max_rows": k, "unit_level": level},
            **options).fit(frame)
        release = synthesizer.sample(seed=seed).compute()
        wall = time.perf_counter() - start
        if not shaped:  # today's release: each row its own random id
            release[unit] = np.arange(len(release)).astype(str)
        order, lag = sequence or (None, None)
        checks = unit_checks(frame, release, schema, unit, max_rows=k, order=order, lag=lag)
        one, two = marginal_tvd(frame, release, schema)
        found = synthesizer.model.metadata["privacy"]["privacy_unit"].get("unit_level", {})
        rows.append({"table": name, "release": label,
                     "found": len(set(found.get("found", []))
                                  & set(checks["unit_level"])) if found else np.nan,
                     "epsilon": epsilon, "seed": seed, "K": k,
                     "rows_per_unit_tvd": checks["rows_per_unit_tvd"],
                     "unit_constant_share": checks["unit_constant_share"],
                     "lag1_error": checks.get("lag1_error", np.nan),
                     "real_lag1": checks["lag1"]["real"] if "lag1" in checks else np.nan,
                     "one_way_tvd": one, "two_way_tvd": two, "rows": len(release),
                     "wall_s": wall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--panel", required=True, help="wage_panel.csv(.bz2): nr, year, ...")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    tables = [("males panel (K=8)", panel(args.panel), PANEL_SCHEMA, "nr", 8,
               ("year", "lwage")),
              ("males panel (K=5)", panel(args.panel), PANEL_SCHEMA, "nr", 5,
               ("year", "lwage")),
              ("events (K=10)", unit_events.events(), unit_events.EVENTS_SCHEMA, "user", 10,
               ("hour", "amount"))]
    results = pd.DataFrame([row for table in tables for epsilon in args.epsilons
                            for seed in range(args.seeds)
                            for row in run(*table[:5], epsilon, seed, table[5])])
    summary = results.groupby(["table", "epsilon", "release"], sort=False).mean(
        numeric_only=True).drop(columns=["seed", "K"])
    print(markdown_table(summary.reset_index(), "{:.3f}"))


if __name__ == "__main__":
    main()
