"""A unit-shaped release's fit, what in it serves units alone (issue 67; the model and its
sampler: :mod:`.unit_shape`): the budget share its unit model and lag-1 table take, the lag-1
table's measurement, and the release's one privacy record of its parts.

:meth:`~.synthesizer.MarginalSynthesizer._fit_unit_shaped` runs the steps in this order: the
unit model (the marginals method on the unit table, ``MarginalsConfig.unit_share`` of the
measurements' ρ, its noise from its own seed stream, :func:`unit_model_seed`; with
``own_tables`` its own tables' repeats after its one-shot measurements, :func:`measure_own`),
the lag-1 table (:func:`measure_lag`, ``lag_share``), the row model (the rest, less the own
tables' shares; its own tables' repeats likewise), then :func:`unit_shaped_model` adds the
parts' charges to the row model's record: the one record of the release.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

import numpy as np

from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.methods.marginals.measurements import Measurer
from dp_dask.methods.marginals.model import MarginalModel
from dp_dask.methods.marginals.plan import budget_shares
from dp_dask.methods.marginals.unit_shape import (
    LAG_WEIGHT,
    UnitShapedModel,
    ordinal,
    release_schema,
    unit_level,
)
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.accounting import gaussian_rho, gaussian_sigma, table_sensitivity
from dp_dask.privacy.noise import gaussian_noise
from dp_dask.privacy.record import PrivacyRecord
from dp_dask.privacy.split import BudgetPart


@dataclass(frozen=True)
class OwnTables:
    """A unit-shaped release's *own tables* (``own_tables``): the 1-/2-way tables of a group of
    unit-level attributes measured again on the unit table (one row per unit: a row's
    sensitivity), and those of a group of row-level attributes measured again on the rows (K
    rows' sensitivity), each group at its share of the measurements' ρ, every repeat merged with
    its model's own measurement of the same table by inverse variance. A parent–child release
    (:mod:`dp_dask.relational`) names the parent's attributes and the child's: each table's own
    1-/2-way marginals then carry a budget of their own beside the models' tables."""

    units: tuple[str, ...]
    rows: tuple[str, ...]
    units_share: float
    rows_share: float

    @property
    def share(self) -> float:
        return self.units_share + self.rows_share


def check_own_tables(given: dict[str, Any] | None, schema: Schema) -> OwnTables | None:
    """``own_tables`` (``{"units": {"attributes": [...], "share": s}, "rows": {...}}``, either
    part optional) checked against ``schema``: attributes of the schema, unit-level ones under
    "units", row-level ones under "rows", shares in (0, 1). Raises ValueError naming them."""
    if given is None:
        return None
    if not isinstance(given, dict) or not given or set(given) - {"units", "rows"}:
        raise ValueError("own_tables: expected a mapping with 'units' and/or 'rows', each "
                         f"{{'attributes': [names], 'share': fraction}}, got {given!r}")
    parts: dict[str, tuple[tuple[str, ...], float]] = {}
    for part, unit_level_wanted in (("units", True), ("rows", False)):
        entry = given.get(part, {"attributes": [], "share": 0.0})
        names, share = tuple(entry.get("attributes", ())), entry.get("share")
        if isinstance(share, bool) or not isinstance(share, int | float) or not (
                0 < share < 1 or (share == 0 and not names)):
            raise ValueError(f"own_tables: {part}: share must be a fraction of the "
                             f"measurements' rho in (0, 1), got {share!r}")
        for name in names:
            if name not in schema.names:
                raise ValueError(f"own_tables: {part}: schema {schema.name!r} has no "
                                 f"attribute {name!r}")
            if unit_level_wanted and not schema[name].unit_level:
                raise ValueError(f"own_tables: {part}: attribute {name!r} is not unit-level "
                                 "(the unit table holds the unit-level attributes alone)")
        parts[part] = names, float(share)
    return OwnTables(parts["units"][0], parts["rows"][0], parts["units"][1], parts["rows"][1])


def own_queries(schema: Schema, names: tuple[str, ...], rho: float
                ) -> tuple[list[tuple[int, ...]], float] | None:
    """The 1-way and 2-way queries over the attributes ``names`` of ``schema`` and their ρ
    (None: no attribute)."""
    if not names:
        return None
    indices = sorted(schema.names.index(name) for name in names)
    return [(i,) for i in indices] + list(combinations(indices, 2)), rho


def measure_own(measurer: Measurer, measured: list[Measurement],
                own: tuple[list[tuple[int, ...]], float] | None
                ) -> tuple[list[Measurement], dict[str, Any] | None]:
    """``measured`` with the own tables' queries ``own`` (:func:`own_queries`; None: none)
    measured again by ``measurer`` (its counts, sensitivity, accountant, noise; drawn after
    its one-shot measurements), their ρ split as a release of those tables alone splits it
    (:func:`~.plan.budget_shares`), each merged with its first measurement by inverse variance
    (:func:`.adaptive.merged`); and the record of the repeats."""
    if own is None:
        return measured, None
    queries, rho = own
    shares = budget_shares(measurer.schema, queries, config=measurer.config)
    repeats = measurer.draw(queries, shares * rho / measurer.rho)
    names = measurer.schema.names
    return adaptive.merged(measured + repeats), {
        "rho": rho, "l2_sensitivity": measurer.sensitivity,
        "sigma": {" x ".join(names[a] for a in m.attributes): m.sigma for m in repeats}}


def unit_shape_share(unit_shape: bool, lag: bool = False,
                     config: MarginalsConfig = DEFAULTS) -> float:
    """The share of the measurements' ρ a unit model and a lag-1 table spend (``config``'s
    ``unit_share`` and ``lag_share``; none without them)."""
    return (config.unit_share if unit_shape else 0.0) + (config.lag_share if lag else 0.0)


def unit_model_seed(noise_seed: int | None) -> int | None:
    """The unit model's noise seed: its own stream of ``noise_seed`` (None: OS entropy)."""
    if noise_seed is None:
        return None
    return int(np.random.SeedSequence([noise_seed, 67]).generate_state(1)[0])


def measure_lag(counts: np.ndarray, schema: Schema, sequence: tuple[int, int], rho: float,
                max_rows: int, *, neighbours: str, accountant: str, sampler: str,
                noise_seed: int | None) -> tuple[np.ndarray | None, dict[str, Any]]:
    """The lag-1 table's Gaussian measurement of ``counts`` (the ``sequence``'s order and lag
    attributes), charged ``rho`` (``config.lag_share`` of the measurements'): one unit's pairs
    weigh LAG_WEIGHT in all (:func:`.unit_shape.lag_pairs`), non-negative, so the table moves
    as one row's times LAG_WEIGHT (table_sensitivity of a row). At K = ``max_rows`` = 1 no unit
    holds a pair: nothing measured or spent."""
    order, lag = sequence
    size = int(schema.sizes[lag])
    record: dict[str, Any] = {"order": schema.names[order], "attribute": schema.names[lag]}
    if max_rows < 2:
        return None, record | {"rho": 0.0, "measured": "no: at K = 1 no unit holds two rows"}
    sensitivity = table_sensitivity(neighbours, "l2") * LAG_WEIGHT
    sigma = gaussian_sigma(rho, sensitivity, accountant)
    rng = None if noise_seed is None else np.random.default_rng([noise_seed, 671])
    noisy = gaussian_noise(counts, sigma, sensitivity=sensitivity, sampler=sampler, rng=rng)
    steps = ordinal(schema.attributes[lag])
    return (noisy if steps else noisy.reshape(size, size)) / LAG_WEIGHT, record | {
        "kind": "steps (this code - previous code)" if steps else "table (previous x this)",
        "rho": gaussian_rho(sigma, sensitivity, accountant),
        "sigma_per_unit": sigma / LAG_WEIGHT,
        "l2_sensitivity": sensitivity,
        "measured": "the (previous, this) codes of consecutive rows within each unit, ordered "
                    "by the order attribute (ties by the lag code), each unit's p pairs "
                    f"weighing {LAG_WEIGHT} // p (a unit counted once), Gaussian noise"}


def unit_shaped_model(rows: MarginalModel, units: MarginalModel, record: PrivacyRecord,
                      unit_record: PrivacyRecord, row_rho: float,
                      lag: tuple[np.ndarray | None, dict[str, Any]] | None, *,
                      unit_share: float, neighbours: str, column: str, max_rows: int,
                      own: dict[str, dict[str, Any] | None] | None = None
                      ) -> tuple[UnitShapedModel, PrivacyRecord]:
    """The release's model and its one privacy record: ``record``, the one the row model's fit
    made (of ``row_rho``), with the unit model's charge (``unit_record``'s ρ, ``unit_share`` of
    the measurements') and the ``lag`` table's (its noisy table and record; None: no sequence)
    added, rendered into the ``rows`` model's metadata beside the ``unit_shape`` record of the
    ``column``'s units of at most ``max_rows`` rows. The ``units`` model's own record becomes
    a part of the release's (:meth:`~dp_dask.privacy.record.PrivacyRecord.part_metadata`): its
    fit saw a table of one row per unit and would otherwise claim the release's (ε, δ) for
    itself, per row. ``own``: the own tables' records by part ("units", "rows"; None: not
    measured; :func:`measure_own`), their ρ added too."""
    own = {part: found for part, found in (own or {}).items() if found}
    own_rho = sum(found["rho"] for found in own.values())
    unit_rho = unit_record.cost.rho
    lag_table, lag_record = lag if lag is not None else (None, None)
    lag_rho = lag_record["rho"] if lag_record else 0.0
    lag_part = (BudgetPart(f"the lag-1 table of {lag_record['attribute']!r}", rho=lag_rho,
                           norm="L2", sensitivity=lag_record.get("l2_sensitivity", 0.0)),
                ) if lag_record else ()
    split = {**(record.rho_split or {}), "unit_model": unit_rho,
             **({"lag": lag_rho} if lag_record else {}),
             **{f"own_tables_{part}": found["rho"] for part, found in own.items()},
             "row_model": row_rho}
    if "measurements" in split:  # after a choice of K: every measurement's ρ
        split["measurements"] += unit_rho + lag_rho + own_rho
    unit_part = BudgetPart("the unit model (1-/2-way tables of the unit table)", rho=unit_rho,
                           share=unit_share, norm="L2",
                           sensitivity=table_sensitivity(neighbours, "l2"),
                           note="one row per unit: a row's sensitivity")
    own_parts = tuple(BudgetPart(f"the {part} own tables", count=len(found["sigma"]),
                                 rho=found["rho"], norm="L2",
                                 sensitivity=found["l2_sensitivity"],
                                 note=", ".join(found["sigma"]))
                      for part, found in own.items())
    record = replace(
        record, cost=replace(record.cost, rho=record.cost.rho + unit_rho + lag_rho + own_rho),
        rho_split=split, split=replace(record.split, parts=(
            unit_part, *lag_part, *own_parts,
            BudgetPart("the row model", rho=row_rho, parts=record.split.parts))))
    rows.metadata["privacy"] = record.to_metadata()
    units.metadata["privacy"] = unit_record.part_metadata("the unit model", record)
    rows.metadata["unit_shape"] = {
        "unit": column, "max_rows": max_rows,
        "unit_level": [rows.schema.names[i] for i in unit_level(rows.schema)],
        "unit_model": {"attributes": units.schema.names, "rho": unit_rho,
                       "units": units.n_rows,
                       "noise_sigma": units.metadata["model"]["noise_sigma"]},
        "unit_value": "per unit, the smallest combination of its unit-level codes among its "
                      "kept rows",
        "dealing": "units drawn from the unit model, rows from the row model, each row dealt "
                   "to a unit of its unit-level codes (the rest to the rooms left), the unit's "
                   "values and id then written on its rows",
        **({"lag": lag_record} if lag_record else {}),
        **({"own_tables": own | {
            "measured": "the units part's 1-/2-way tables again on the unit table (a row's "
                        "sensitivity), the rows part's again on the rows (K rows'), each merged "
                        "with its model's measurement of the table by inverse variance"}}
           if own else {})}
    return (UnitShapedModel(rows, units, release_schema(rows.schema, column), column, lag_table),
            record)
