"""Privacy units: protect a person (all rows of one ``customer_id``), not one row.

A release declares its unit as ``privacy_unit: {column: customer_id, max_rows: K}`` (schema JSON,
job config, ``--privacy-unit``/``--max-rows-per-unit``, ``privacy_unit=``); without one the unit
is a row. :func:`bound_contributions` keeps at most K rows of each unit, out of core, before
anything is encoded or counted, and drops the unit column: it never reaches a model or a release.
The counts are then those of the bounded data, so n means rows after bounding.

A unit is identified by its value as text (:func:`unit_text`: 7, 7.0 and "7" are one unit, as an
integer column read as float once a null appears must stay one), and every null (None, NaN, NA) is
one and the same unit. Which K rows a unit keeps depends on that unit's rows and a seed alone,
never on another unit, on file position or on partitioning: each row is ranked by a keyed hash of
its unit's text, its schema codes (and fine cells) and its copy number among the unit's identical
rows, under a per-release seed (secret, or derived from ``noise_seed``), and a unit keeps its K
smallest (:func:`row_keys`). The unit's text and the copy number are in the hash so that each
unit keeps a K-subset of its rows that is uniform over the seed: hashed on the codes alone, every
unit would prefer the same code combinations (the smallest hashes) and the bounded data would
over-represent them. The unit's text, not its stored value, is hashed: 7 and 7.0 are one unit and
one key. Rows with the same codes and fine cells are numbered in any order: every count sees them
alike, so which of them a unit keeps gives the same counts. So neighbouring data sets that differ
in one unit give bounded data sets that differ in that unit's at most K rows (a stable
transformation), whatever the other units hold. Rows whose unit is null form ONE unit together,
bounded to K like any other (each null row its own unit would let one person with nulls contribute
unboundedly).

The rows never move (:func:`bound_contributions`). A copy number needs all of a unit's identical
rows, which any partition may hold, so the cut-off is found where each unit's rows meet, but of a
narrow frame, four integers a row: the unit's text under two SipHash keys (a unit is told apart
by both, 128 bits: two of U units share them with probability below U²/2¹²⁹, and would then be
bounded as one), the key's state before the copy number (a keyed hash of the unit's text and the
codes: rows of a unit are copies where it is equal, and two different rows share it, or a key,
with probability 2⁻⁶⁴, which changes only which of that unit's rows it keeps) and the row's place
(partition and position, packed in one integer). That frame is shuffled on the unit (Dask's
P2P shuffle, disk-backed, where a distributed client runs), each unit's kept places found, and
the places shuffled back to their partition as a bit mask (one bit a row); then every partition
is read again and filtered in place, in its own order. The kept rows are those the shuffle of
whole rows on the unit kept (before issue 67): same keys, same rule.

A schema drafted under DP with a unit (:mod:`dp_dask.data.draft_dp`) is bounded alike before any
schema exists: its rows are ranked with their values' text hashes in place of codes
(:func:`row_keys` without a schema, the same keys). Every guarantee here is about
the raw data's units, whatever K each release bounded them to: a draft and a release of the same
unit column compose (basic composition), any K with any K; a draft of another unit (a row) never
counts inside a unit's total (:func:`drafted_record`), and a release under a unit refuses it unless
told otherwise (:func:`check_drafted_unit`).

A unit-shaped release's unit-level attributes are those the schema declares, or with
``unit_level: "auto"`` those too found under DP (:func:`find_unit_level`, over the counts of
:func:`varying_units_graph`): both searches of the unit's own shape (its K, its constant
attributes) live here, beside the bounding whose unit they read.

Size: the unit's record, bounding and its two DP searches (max_rows "auto", unit_level "auto")
share the unit's identity (:func:`unit_text`) and its neighbours; the searches may move to a
module of their own (units_search.py) if a third comes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from distributed import Client, default_client, wait

from dp_dask.data.counts import partition_reduction
from dp_dask.data.encode import EncodingError, encode_partition, fine_cells
from dp_dask.data.order import order_seed
from dp_dask.data.schema import Schema
from dp_dask.data.text import category_text
from dp_dask.privacy.labels import NEIGHBOURING
from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.selection import (
    calibrate_selection,
    noisy_max_index,
    pure_charge,
    pure_epsilon,
)
from dp_dask.tuning import as_config, changed, check_fields

ROW_UNIT: dict[str, Any] = {"unit": "row"}
AUTO = "auto"  # max_rows chosen under DP (choose_max_rows)
# max_rows "auto": the candidates (public), the quantile (level / levels) of the rows per unit
# the chosen one covers, its rule in words, and the prior's odds of each candidate against the
# next larger one (ties prefer the smaller); the share of ρ it spends: UnitConfig.auto_share.
AUTO_CANDIDATES = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)
AUTO_QUANTILE = (9, 10)
AUTO_RULE = "the smallest candidate covering the quantile of rows per unit"
AUTO_TIE_ODDS = 2
NULL_RULE = "rows whose unit is null form one unit, bounded to max_rows like any other"
# unit_level "auto": attributes not declared unit-level are found so under DP (find_unit_level),
# with UnitConfig.unit_level_share and unit_level_threshold
UNIT_LEVEL_MODES = ("declared", AUTO)
_SEED_STREAM = 0x0B0D  # the bounding seed's stream of noise_seed (the order's is 0x0DE5)
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class UnitConfig:
    """The privacy unit's tuned numbers (docs/tuning.md, by field name), read by every method's
    fit and by the draft under DP: the shares of the budget its two searches spend and the
    threshold of the second. Set as the unit's ``config`` (``privacy_unit={..., "config":
    {"auto_share": 0.1}}``, ``--unit-config '{"auto_share": 0.1}'``, a job's
    ``privacy.unit_config``); a release records the fields that differ from their defaults in
    its unit's record (``privacy_unit.config``). Never tuned on the data being released."""

    # max_rows "auto" (choose_max_rows): the share of the release's ρ (of a draft's ε) it spends
    auto_share: float = 0.05
    # unit_level "auto" (find_unit_level): the share of the release's ρ the search spends (pure
    # ε-DP, Laplace), and the public threshold on the noisy share of varying units (among units
    # of two rows or more) below which an attribute is taken as unit-level
    unit_level_share: float = 0.05
    unit_level_threshold: float = 0.05

    def __post_init__(self) -> None:
        """ValueError naming the field where a share or the threshold is not in (0, 1), or the
        two shares leave the measurements nothing."""
        check_fields(self, positive=("auto_share", "unit_level_share", "unit_level_threshold"))
        for name in ("auto_share", "unit_level_share", "unit_level_threshold"):
            if getattr(self, name) >= 1:
                raise ValueError(f"UnitConfig.{name} must be below 1, not "
                                 f"{getattr(self, name)!r}")
        if self.auto_share + self.unit_level_share >= 1:
            raise ValueError("UnitConfig.auto_share + unit_level_share must be below 1 (the "
                             f"measurements spend the rest), not {self.auto_share!r} + "
                             f"{self.unit_level_share!r}")


UNIT_DEFAULTS = UnitConfig()


@dataclass(frozen=True)
class PrivacyUnit:
    """The column whose value identifies a unit (a person), the most rows one keeps, and the
    unit's tuned numbers (:class:`UnitConfig`)."""

    column: str
    max_rows: int | str  # an integer >= 1, or AUTO
    # which attributes are unit-level (constant within a unit) in a unit-shaped release: those
    # the schema declares, or AUTO: those too that find_unit_level finds under DP
    unit_level: str = "declared"
    config: UnitConfig = UNIT_DEFAULTS

    def __post_init__(self) -> None:
        """ValueError naming the column where K is neither an integer >= 1 nor "auto", or
        unit_level is neither "declared" nor "auto": built directly too, a unit of K <= 0 would
        keep no row at all."""
        if not isinstance(self.column, str) or not self.column:
            raise ValueError(f"privacy_unit column must be a column name, got {self.column!r}")
        k = self.max_rows
        if k != AUTO and (isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1):
            raise ValueError(f"privacy unit {self.column!r}: max_rows must be an integer >= 1 "
                             f"or {AUTO!r}, got {k!r}")
        if self.unit_level not in UNIT_LEVEL_MODES:
            raise ValueError(f"privacy unit {self.column!r}: unit_level must be one of "
                             f"{list(UNIT_LEVEL_MODES)}, got {self.unit_level!r}")
        try:  # a dict (from YAML, JSON or a schema) as its config
            object.__setattr__(self, "config", as_config(UnitConfig, self.config))
        except ValueError as exc:
            raise ValueError(f"privacy unit {self.column!r}: config: {exc}") from None

    @classmethod
    def of(cls, spec: PrivacyUnit | dict[str, Any] | None) -> PrivacyUnit | None:
        """A unit from ``{"column": ..., "max_rows": K}`` and optionally ``"unit_level"`` and
        ``"config"`` (a :class:`UnitConfig` or a dict of some of its fields; None: the unit is
        a row); ValueError naming the column where K is neither an integer >= 1 nor "auto"."""
        if spec is None or isinstance(spec, PrivacyUnit):
            return spec
        if not isinstance(spec, dict) or not ({"column", "max_rows"} <= set(spec) <= {
                "column", "max_rows", "unit_level", "config"}):
            raise ValueError("privacy_unit must be {'column': ..., 'max_rows': K} (and "
                             "optionally 'unit_level': 'declared' or 'auto', 'config': "
                             f"{{...}}), got {spec!r}")
        k = spec["max_rows"]
        return cls(spec["column"], k if k == AUTO or not isinstance(k, np.integer) else int(k),
                   spec.get("unit_level", "declared"), spec.get("config") or UNIT_DEFAULTS)

    @property
    def unit_level_auto(self) -> bool:
        """Whether attributes not declared unit-level are looked for under DP."""
        return self.unit_level == AUTO

    def check(self, schema: Schema) -> None:
        """ValueError where the unit column is also something the schema reads: it would reach
        the model."""
        if self.column in set(schema.names) | set(schema.columns):
            raise ValueError(f"privacy unit column {self.column!r} is also an attribute of "
                             f"schema {schema.name!r}; a unit column never reaches a model: "
                             "drop it from the schema")

    def to_json(self) -> dict[str, Any]:
        tuned = changed(self.config)
        return {"column": self.column, "max_rows": self.max_rows,
                **({"unit_level": self.unit_level} if self.unit_level_auto else {}),
                **({"config": tuned} if tuned else {})}


def unit_record(unit: PrivacyUnit | None, seeded: bool,
                hashed: str = "their codes") -> dict[str, Any]:
    """What a release records of its unit: the row, or the column, K and how rows were kept
    (never the seed; ``seeded``: derived from noise_seed; ``hashed``: what the keyed hash
    reads)."""
    if unit is None:
        return dict(ROW_UNIT)
    seed = "a seed derived from noise_seed" if seeded else "a secret seed"
    tuned = changed(unit.config)  # none by default: such records stay as they were
    return {"unit": unit.column, "max_rows": unit.max_rows, "null_units": NULL_RULE,
            "bounding": f"at most {unit.max_rows} rows per unit, the smallest by a keyed hash "
                        f"of {hashed} under {seed} (dp_dask.data.units); counts and n are "
                        "of the bounded rows", **({"config": tuned} if tuned else {})}


def neighbouring(notion: str, unit: PrivacyUnit | None) -> str:
    """The release's neighbouring data sets in words: a row's (NEIGHBOURING), or a unit's."""
    if unit is None:
        return NEIGHBOURING[notion]
    change = {"replace": "replace", "add_remove": "add or remove"}[notion]
    return (f"{change} all rows of one {unit.column!r} (at most {unit.max_rows} after bounding); "
            "n private")


def rows_per_unit_graph(ddf: dd.DataFrame, column: str) -> dd.Series:
    """Lazily, how many units hold each number of rows (clipped past the largest candidate):
    the exact counts :func:`choose_max_rows` reads on the driver."""
    sizes = ddf[column].map_partitions(unit_text, meta=(column, object)).value_counts(
        dropna=False)
    return sizes.clip(upper=AUTO_CANDIDATES[-1] + 1).value_counts()


def auto_scores(sizes: pd.Series) -> np.ndarray:
    """Each of :data:`AUTO_CANDIDATES`' score under the rule "the smallest candidate covering
    the AUTO_QUANTILE q = i/k of the rows per unit" (``sizes``: units by their number of rows),
    lower is better, of L∞ sensitivity k.

    Score. Each unit's row count maps to its ceiling candidate, the smallest candidate >= it
    (past the largest: one more index); ``covered[j]`` counts the units whose ceiling index is
    <= j (those candidate j keeps whole), n all units. ``u[j] = k·covered[j] − i·n`` is >= 0
    exactly when candidate j covers q of the units, and never falls as j grows. Candidate j is
    the rule's answer when it covers and j − 1 does not, so its score is
    ``max(0, −u[j]) + max(0, u[j − 1] + 1)`` (u[−1] = −i·n: no unit has 0 rows): 0 at the
    answer alone (u is an integer, so u[j − 1] < 0 means u[j − 1] + 1 <= 0), and past it the
    margin by which the candidate before already covered. OpenDP's quantile score of the raw
    counts instead ties every candidate past the quantile (on 1,000 units of 6 rows K = 10 to
    1,000 all score n: a uniform draw, up to 100 times the noise), and over the ceiling indices
    it need not be least at the answer (920 units of 6 rows and 80 of 30: K = 10, which keeps
    92 % of the units whole, scores 720 and K = 20 200; here 0 and 201).

    Sensitivity. One unit changes one ceiling index, and the score is f(u[j]) + g(u[j − 1])
    with f falling, g rising, both 1-Lipschitz. Replaced (n fixed), covered[j] moves by
    [b <= j] − [a <= j] (a, b: the ceiling indices of the unit removed and added), of one sign
    at every j, so u[j − 1] and u[j] each move by 0 or k times that sign: f and g move in
    opposite directions, by at most k each, the score by at most k. Added (removed: the
    negatives), u[j] moves by k·[the unit's index <= j] − i, so (u[j − 1], u[j]) move by
    (−i, −i) (the score by at most i), (k − i, k − i) (at most k − i) or (−i, k − i) (f and g
    both fall, by at most k − i and i: k). The L∞ sensitivity is k under either notion, as
    for OpenDP's quantile score."""
    level, levels = AUTO_QUANTILE
    counts = sizes.to_numpy(dtype=np.int64)
    ceiling = np.searchsorted(AUTO_CANDIDATES, sizes.index.to_numpy(dtype=np.int64), side="left")
    covered = np.array([counts[ceiling <= j].sum() for j in range(len(AUTO_CANDIDATES))])
    margin = levels * covered - level * counts.sum()  # u: >= 0 where a candidate covers
    before = np.r_[-level * counts.sum(), margin[:-1]]
    return (np.maximum(0, -margin) + np.maximum(0, before + 1)).astype(np.float64)


def choose_max_rows(sizes: pd.Series, rho: float, accountant: str, *, sampler: str,
                    rng: np.random.Generator | None) -> tuple[int, dict[str, Any]]:
    """K: the smallest of :data:`AUTO_CANDIDATES` covering the AUTO_QUANTILE of the rows per
    unit (``sizes``: units by their number of rows), by the exponential mechanism over
    :func:`auto_scores` (L∞ sensitivity k) charged ``rho``, and its record.

    Ties. Where scores tie or nearly tie the data cannot tell the candidates apart, and the
    cautious choice is the smaller K: a larger bound adds noise in proportion to K on every
    count it measures, while past the quantile it can keep whole at most the 1 − q of units
    left. So each candidate carries a public prior, its odds AUTO_TIE_ODDS times less than the
    candidate before it (the Gumbel draw over the negated scores less j·ln(AUTO_TIE_ODDS)·scale):
    data-independent, it changes no sensitivity, and it weighs as much as a score difference
    of ln AUTO_TIE_ODDS (0.69) noise scales, so that a clear score decides and a tie halves the
    odds at each larger candidate."""
    level, levels = AUTO_QUANTILE
    selection = calibrate_selection(rho, float(levels), accountant)
    prior = np.arange(len(AUTO_CANDIDATES)) * math.log(AUTO_TIE_ODDS) * selection.scale
    k = AUTO_CANDIDATES[noisy_max_index(-(auto_scores(sizes) + prior), selection,
                                        sampler=sampler, rng=rng)]
    return k, {"max_rows": AUTO, "chosen": k, "rule": AUTO_RULE, "quantile": level / levels,
               "candidates": list(AUTO_CANDIDATES), "rho": selection.rho,
               "mechanism": "exponential mechanism (OpenDP make_noisy_max, Gumbel) over the "
                            "score of the rule (0 at the smallest candidate covering the "
                            "quantile, else the units short of it or the margin by which the "
                            f"candidate before covers), L-inf sensitivity {levels}; ties prefer "
                            f"the smaller K (a public prior, each candidate's odds 1/"
                            f"{AUTO_TIE_ODDS} of the one before)"}


_VARYING_UNIT = "__unit_text__"


def _unit_codes(frame: pd.DataFrame, schema: Schema, column: str,
                candidates: list[int]) -> pd.DataFrame:
    """Per row its unit as text (:func:`unit_text`) and the codes of attributes ``candidates``
    (``c0``, ``c1``, ...)."""
    codes = encode_partition(frame, schema)
    return pd.DataFrame({_VARYING_UNIT: unit_text(frame[column]).to_numpy(),
                         **{f"c{j}": codes[i].astype(np.int64)
                            for j, i in enumerate(candidates)}},
                        index=pd.RangeIndex(len(frame)))


def _varying_counts(per_unit: pd.DataFrame, count: int) -> np.ndarray:
    """Of a partition of units (each one's lowest and highest code per candidate, its rows):
    the units whose codes of each candidate differ, then the units of two rows or more."""
    varying = [int((per_unit[f"hi{j}"] != per_unit[f"lo{j}"]).sum()) for j in range(count)]
    return np.array([*varying, int((per_unit["rows"] >= 2).sum())], dtype=np.int64)


def varying_units_graph(ddf: dd.DataFrame, schema: Schema, column: str,
                        candidates: list[int]) -> Any:
    """Lazily, per attribute of ``candidates`` (indices into ``schema``) the number of units
    (of ``column``, as :func:`unit_text` tells them apart, nulls one unit) whose rows hold more
    than one of its codes, then the number of units of two rows or more: one unit moves each
    count by at most 1. A groupby of the unit's text and the codes: no whole row moves."""
    meta = pd.DataFrame({_VARYING_UNIT: pd.Series([], dtype=object),
                         **{f"c{j}": pd.Series([], dtype=np.int64)
                            for j in range(len(candidates))}})
    keyed = ddf.map_partitions(_unit_codes, schema, column, candidates, meta=meta)
    # every group needs one aggregate at least: the unit column itself gives the rows
    spec = {"rows": (_VARYING_UNIT, "size"),
            **{f"{end}{j}": (f"c{j}", how) for j in range(len(candidates))
               for end, how in (("lo", "min"), ("hi", "max"))}}
    per_unit = keyed.groupby(_VARYING_UNIT, dropna=False).agg(split_out=ddf.npartitions,
                                                              **spec)
    return partition_reduction(per_unit, _varying_counts, len(candidates))


def find_unit_level(counts: np.ndarray, names: list[str], rho: float, accountant: str, *,
                    sampler: str, rng: np.random.Generator | None, threshold: float
                    ) -> tuple[list[str], dict[str, Any]]:
    """The attributes ``names`` (not declared unit-level) found unit-level, and the record of
    the search: Laplace noise on ``counts`` (:func:`varying_units_graph`: per attribute the
    units in which it varies, then the units of two rows or more), pure ε-DP charged ``rho``
    under ``accountant`` (:func:`~dp_dask.privacy.selection.pure_epsilon`), L1 sensitivity
    len(names) + 1 (one unit, replaced, added or removed, moves each count by at most 1). An
    attribute whose noisy count of varying units is below ``threshold`` (the unit's
    :attr:`UnitConfig.unit_level_threshold`) of the
    noisy count of units of two rows is found unit-level; where that count is not above 3
    noise scales (too few units of two rows to tell) none is: a tie keeps the declared
    schema, as a release without the search has it. Post-processing of the noisy counts."""
    sensitivity = len(names) + 1
    epsilon = pure_epsilon(rho, accountant)
    scale = sensitivity / epsilon * (1 + 1e-12)  # rounded towards more noise
    noisy = laplace_noise(np.asarray(counts, dtype=np.int64), scale, sensitivity=sensitivity,
                          sampler=sampler, rng=rng)
    varying, several = np.clip(noisy[:-1], 0.0, None), float(noisy[-1])
    enough = several > 3 * scale
    shares = varying / several if enough else np.full(len(names), np.nan)
    found = [name for name, share in zip(names, shares, strict=True)
             if enough and share < threshold]
    spent = pure_charge(sensitivity / scale, accountant)
    note = (f"found unit-level under DP (constant within every synthetic unit): "
            f"{', '.join(found)}" if found else "no attribute found unit-level under DP"
            + ("" if enough else " (too few units of two rows or more to tell)"))
    return found, {
        "unit_level": AUTO, "candidates": list(names), "found": found, "note": note,
        "threshold": threshold, "rho": spent, "epsilon": sensitivity / scale,
        "scale": scale, "l1_sensitivity": sensitivity,
        "noisy_varying_units": {name: float(v) for name, v in zip(names, noisy[:-1],
                                                                  strict=True)},
        "noisy_units_of_two_rows": several,
        "mechanism": "Laplace (OpenDP make_laplace), pure epsilon-DP: per attribute not "
                     "declared unit-level the count of units in which it takes more than one "
                     "value, and the count of units of two rows or more, over all of each "
                     "unit's rows (before bounding); one unit moves each count by at most 1. "
                     "An attribute whose noisy share of varying units (of the units of two "
                     f"rows or more) is below {threshold:g} is unit-level"}


def unit_seed(noise_seed: int | None) -> int:
    """The bounding's seed, once per fit on the driver (secret unless ``noise_seed``)."""
    return order_seed(noise_seed, _SEED_STREAM)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every output bit depends on every input bit."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _keyed_hash(parts: np.ndarray, seed: int, state: np.ndarray | None = None) -> np.ndarray:
    """Per row (a column of ``parts``, integers) its hash under ``seed``, as int64; from a
    ``state`` (a hash of earlier parts) it goes on hashing ``parts`` after those: hashing
    a, b then c from the state after a, b equals hashing a, b, c."""
    h = (np.full(parts.shape[1], seed & _MASK, dtype=np.uint64) if state is None
         else state.view(np.uint64))
    with np.errstate(over="ignore"):
        for part in parts:
            h = _mix(h ^ part.astype(np.uint64) ^ np.uint64(seed >> 64 & _MASK))
    return h.view(np.int64)


def _unit_keys(units: np.ndarray, state: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows holding every row of their units (``units``: each row's unit as an integer id;
    ``state``: :func:`_row_states`), each row's key and its copy number: a keyed hash of its
    unit's text, its parts and its copy number among the unit's identical rows (equal state).
    Hashing the unit and the copy number makes each unit keep a K-subset of its rows that is
    uniform over the seed: hashed on the values alone, every unit would prefer the same values
    (the smallest hashes), and identical rows would count once. Rows are numbered among
    identical ones only, so which copies a unit keeps never changes what is counted."""
    copy = _copy_numbers(units, state)
    return _keyed_hash(copy[None, :], seed, state), copy


def _copy_numbers(units: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Each row's number (0, 1, ...) among the rows of its unit with its state."""
    order = _by_unit_then(units, state)
    starts = np.r_[True, (np.diff(units[order]) != 0) | (np.diff(state[order]) != 0)]
    positions = np.arange(len(order))
    copy = np.empty(len(order), dtype=np.int64)
    copy[order] = positions - np.maximum.accumulate(np.where(starts, positions, 0))
    return copy


# Bits of a 64-bit hash kept beside a unit's id in one sort key (the id in the rest: 2^24 units
# a partition of the narrow frame, far more than one holds)
_HASH_BITS = 40


def _by_unit_then(units: np.ndarray, values: np.ndarray, *ties: np.ndarray) -> np.ndarray:
    """The order of rows by unit (``units``: ids 0..U-1), then ``values`` (int64 hashes), then
    ``ties``: what ``np.lexsort((*ties[::-1], values, units))`` gives, from one argsort of a
    single int64 key (the unit's id above the hash's top :data:`_HASH_BITS` bits) where the
    ids fit beside them and no two rows of a unit share those bits with different hashes (a
    pair does with probability 2^-40); the full lexsort otherwise."""
    # the signed hash's top bits, shifted to 0..2^40-1: the order of the signed values
    top = (values >> (64 - _HASH_BITS)) + (1 << (_HASH_BITS - 1))
    if len(units) and int(units.max()) < 1 << (63 - _HASH_BITS):
        order = np.argsort((units.astype(np.int64) << _HASH_BITS) | top, kind="stable")
        same = (np.diff(units[order]) == 0) & (np.diff(top[order]) == 0)
        if not (same & (np.diff(values[order]) != 0)).any() and (not ties or not same.any()):
            return order
    return np.lexsort((*ties[::-1], values, units))


# A second SipHash key: a unit is told apart by its text's two 64-bit hashes (module docstring)
_SECOND_KEY = "dp_dask-unit-id2"


def _text_hashes(values: pd.Series, *hash_keys: str) -> list[np.ndarray]:
    """Each row's 64-bit hash (pandas' SipHash, under its fixed key and each of ``hash_keys``)
    of the encoder's text of its value (:func:`unit_text`), 0 for a null; each distinct value
    is turned to text and hashed once."""
    texts, inverse = category_text(values)
    if inverse is None:  # an object column of strings, one a row
        inverse, texts = pd.factorize(np.asarray(texts, dtype=object))
    texts = np.asarray(texts, dtype=object)
    null = values.isna().to_numpy()
    hashes = []
    for key in (None, *hash_keys):
        options = {"categorize": False} | ({} if key is None else {"hash_key": key})
        hashed = np.append(pd.util.hash_array(texts, **options) if len(texts) else
                           np.zeros(0, dtype=np.uint64), np.uint64(0))[inverse]  # -1: a null
        hashed[null] = 0
        hashes.append(hashed)
    return hashes


def _row_parts(frame: pd.DataFrame, schema: Schema | None, column: str
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Each row's unit as its text's two hashes (:func:`_text_hashes`; the first is what the
    key hashes), and the integer parts its key hashes and ties break on: with a ``schema`` its
    codes and fine cells; without, the hash of each other column's text (a null 0), as int64.
    All are functions of the row alone, the same in any partition."""
    unit = frame[column]
    first, second = _text_hashes(unit, _SECOND_KEY)
    if schema is None:
        return first, second, [_text_hashes(frame[c])[0].view(np.int64)
                               for c in frame.columns if c != column]
    codes = encode_partition(frame, schema)
    fine = [fine_cells(frame[schema.attributes[i].column], codes[i], schema.attributes[i])
            for i in schema.fine_grids]
    return first, second, list(np.vstack([codes.astype(np.int64), *fine]) if fine
                               else codes.astype(np.int64))


def _row_states(frame: pd.DataFrame, schema: Schema | None, column: str, seed: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's unit as its text's two hashes (:func:`_row_parts`), and its state: the keyed
    hash of the first and of its parts, to which the copy number is added (:func:`_unit_keys`).
    Rows of one unit are identical (copies) where their states are equal."""
    first, second, parts = _row_parts(frame, schema, column)
    state = _keyed_hash(np.vstack([first, *(p.astype(np.uint64) for p in parts)]), seed)
    return first.view(np.int64), second.view(np.int64), state


def _unit_ids(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Each row's unit as an integer id, the units told apart by both text hashes: the first
    hash's ids where each holds one second hash (all but a 2^-64 collision), else by both."""
    a, firsts = pd.factorize(first)
    seconds = np.zeros(len(firsts), dtype=second.dtype)
    seconds[a] = second
    if np.array_equal(seconds[a], second):
        return a
    b = pd.factorize(second)[0]
    return pd.factorize(a * np.int64(b.max(initial=0) + 1) + b)[0]


def row_keys(frame: pd.DataFrame, schema: Schema | None, column: str, seed: int
             ) -> np.ndarray:
    """(3, rows) for a partition holding every row of its units (``column``): per row a keyed
    hash of its unit's text, its codes and fine cells (without a ``schema``: its other columns'
    text hashes, :func:`_row_parts`) and its copy number among the unit's identical rows, then
    its state (the hash before the copy number, :func:`_row_states`) and copy number (the
    tiebreak). A function of the unit's own rows, the schema and the seed alone: never of file
    position (the copy numbers only tell identical rows apart) nor of another unit."""
    first, second, state = _row_states(frame, schema, column, seed)
    key, copy = _unit_keys(_unit_ids(first, second), state, seed)
    return np.vstack([key, state, copy])


def unit_text(values: pd.Series) -> pd.Series:
    """Each row's unit as text (object dtype), None where null (None, NaN, NA, NaT): the
    encoder's text of a value (:func:`~dp_dask.data.text.category_text`: 7, 7.0 and "7" are
    "7"), equal for equal units whatever their storage type (an integer column read as float
    once a null appears, a number or its text), and all nulls make one unit."""
    texts, inverse = category_text(values)
    text = np.array(texts, dtype=object)
    if inverse is not None:  # a missing value's -1 is overwritten below
        text = np.append(text, None)[inverse]
    text[values.isna().to_numpy()] = None
    return pd.Series(text, index=values.index, dtype=object)


def _with_unit_text(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    return frame.assign(**{column: unit_text(frame[column])})


# The narrow frame bounding moves instead of the rows, all int64: per row its unit (its text's
# two hashes), its state (_row_states) and where it lies (its partition's number above its
# position's _PLACE_BITS bits: four integers a row, not five). The places kept come back as
# (partition, position).
_UNIT, _UNIT_2, _STATE, _PLACE = ("__unit__", "__unit_2__", "__state__", "__place__")
_PARTITION, _ROW = ("__partition__", "__row__")
_NARROW = pd.DataFrame({name: np.array([], dtype=np.int64)
                        for name in (_UNIT, _UNIT_2, _STATE, _PLACE)})
_PLACES = pd.DataFrame({name: np.array([], dtype=np.int64) for name in (_PARTITION, _ROW)})
_PLACE_BITS = 40  # a partition of up to 2^40 rows, 2^23 partitions


def _narrow(frame: pd.DataFrame, schema: Schema | None, column: str, seed: int,
            partition_info: dict | None = None) -> pd.DataFrame:
    """One partition's narrow frame (:data:`_NARROW`)."""
    first, second, state = _row_states(frame, schema, column, seed)
    number = 0 if partition_info is None else partition_info["number"]
    place = (np.int64(number) << _PLACE_BITS) | np.arange(len(frame), dtype=np.int64)
    return pd.DataFrame(np.vstack([first, second, state, place]).T, columns=_NARROW.columns)


def _places(place: np.ndarray) -> pd.DataFrame:
    """Packed places as (partition, position) (:data:`_PLACES`)."""
    return pd.DataFrame({_PARTITION: place >> _PLACE_BITS,
                         _ROW: place & ((1 << _PLACE_BITS) - 1)})


def _kept_places(narrow: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    """The places (partition, position) of the rows a partition of the narrow frame keeps, it
    holding every row of its units: a unit of at most ``max_rows`` rows keeps them all, a
    larger one its ``max_rows`` of smallest key (:func:`_unit_keys`; equal keys, which two
    different rows have with probability 2⁻⁶⁴, by state, then copy number)."""
    units = _unit_ids(narrow[_UNIT].to_numpy(), narrow[_UNIT_2].to_numpy())
    large = np.bincount(units)[units] > max_rows if len(units) else np.zeros(0, dtype=bool)
    if not large.any():
        return _places(narrow[_PLACE].to_numpy())
    units, state = units[large], narrow[_STATE].to_numpy()[large]
    key, copy = _unit_keys(units, state, seed)
    order = _by_unit_then(units, key)
    if np.any((np.diff(units[order]) == 0) & (np.diff(key[order]) == 0)):
        order = _by_unit_then(units, key, state, copy)
    sorted_units = units[order]
    positions = np.arange(len(order))
    starts = np.r_[True, sorted_units[1:] != sorted_units[:-1]]
    rank = positions - np.maximum.accumulate(np.where(starts, positions, 0))
    kept = np.r_[np.flatnonzero(~large), np.flatnonzero(large)[order[rank < max_rows]]]
    return _places(narrow[_PLACE].to_numpy()[np.sort(kept)])


def _kept_mask(places: pd.DataFrame) -> pd.DataFrame:
    """One partition's kept positions as a bit mask (np.packbits; bit i: row i kept, rows past
    the mask's end dropped): one bit a row is all that waits for the filter."""
    mask = np.zeros(int(places[_ROW].max()) + 1 if len(places) else 0, dtype=bool)
    mask[places[_ROW].to_numpy()] = True
    return pd.DataFrame({"bits": np.packbits(mask)})


def _kept_rows(frame: pd.DataFrame, bits: pd.DataFrame, column: str) -> pd.DataFrame:
    """A partition's kept rows (``bits``: :func:`_kept_mask`), in place, the unit column
    dropped."""
    mask = np.unpackbits(bits["bits"].to_numpy(), count=len(frame)).astype(bool)
    return frame[mask].drop(columns=column)


def _bounded(frame: pd.DataFrame, schema: Schema | None, column: str, max_rows: int,
             seed: int) -> pd.DataFrame:
    """One partition holding every row of its units: each unit's ``max_rows`` rows of
    smallest key (:func:`row_keys`), the unit column dropped; what :func:`bound_contributions`
    keeps of the same rows in any partitioning."""
    places = _kept_places(_narrow(frame, schema, column, seed), max_rows, seed)
    return frame.iloc[places[_ROW].to_numpy()].drop(columns=column)


def _running_client() -> Client | None:
    """The distributed client that computes here: None where there is none, or where the
    scheduler in force is another (e.g. ``dask.config.set(scheduler="synchronous")`` beside a
    client, as the audit runs its neighbours), whose tasks run on no worker: P2P needs one."""
    try:
        client = default_client()
    except ValueError:
        return None
    return client if getattr(dask.base.get_scheduler(), "__self__", None) is client else None


def shuffle_method() -> str:
    """P2P (out of core, disk-backed) where a distributed client runs, else tasks."""
    return "tasks" if _running_client() is None else "p2p"


def bound_contributions(ddf: dd.DataFrame, schema: Schema | None, unit: PrivacyUnit,
                        seed: int) -> dd.DataFrame:
    """``ddf`` (the schema's columns and the unit's) with at most ``unit.max_rows`` rows per
    unit, chosen by :func:`row_keys` (module docstring; without a ``schema``, drafting one, over
    every column of ``ddf`` but the unit's), without the unit column, each row in its own
    partition and order.

    The narrow frame (:data:`_NARROW`) is shuffled on the unit, each unit's kept places found
    where its rows meet (:func:`_kept_places`), and the places shuffled back to their partition
    as bit masks, computed here (``persist``, waited for on a cluster, so that no row is held
    while the shuffles run); the frame returned reads ``ddf`` again and keeps the rows the
    masks mark. Bounding thus reads the input twice and moves 32 bytes a row, never a row."""
    if unit.column not in ddf.columns:  # before anything is read
        raise EncodingError(f"input lacks the privacy unit column {unit.column!r}")
    method = shuffle_method()
    narrow = ddf.map_partitions(_narrow, schema, unit.column, seed, meta=_NARROW)
    places = narrow.shuffle(on=_UNIT, shuffle_method=method).map_partitions(
        _kept_places, unit.max_rows, seed, meta=_PLACES)
    count = ddf.npartitions
    by_partition = places.set_index(_PARTITION, divisions=[*range(count), count - 1],
                                    shuffle_method=method)
    masks = by_partition.map_partitions(
        _kept_mask, meta=pd.DataFrame({"bits": np.array([], dtype=np.uint8)})).persist()
    if _running_client() is not None:  # there persist returns at once: the rows must wait
        wait(masks)
    return dd.map_partitions(_kept_rows, ddf, masks, unit.column, align_dataframes=False,
                             meta=ddf._meta.drop(columns=unit.column))


def _unit_column(record: dict[str, Any]) -> str | None:
    """The column of a unit record (:func:`unit_record`); None for a row."""
    return record["unit"] if "max_rows" in record else None


def drafted_unit(drafted: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A DP draft's unit record (a schema's ``drafted_under_dp``) and the neighbouring notions
    ("replace", "add_remove") its (ε, δ) holds under. Drafts made before they were recorded:
    one row, replaced (they read the public n)."""
    return drafted.get("privacy_unit", dict(ROW_UNIT)), list(drafted.get("notions", ["replace"]))


def drafted_record(drafted: dict[str, Any], *, epsilon: float, delta: float,
                   unit: PrivacyUnit | None, notion: str) -> dict[str, Any]:
    """What a release of ``(epsilon, delta)`` under ``unit`` (None: a row) and ``notion``
    records of the DP draft of its schema (``drafted``: the schema's ``drafted_under_dp``):
    the draft's ε, δ, columns, unit and neighbours, and ``with_this_release``, their
    basic-composition total, only where both protect the same unit under one notion. Both
    guarantees are then about the raw data's units (all rows of one value of the column,
    whatever K each bounded it to), so any K composes with any K. Otherwise each part stands
    under its own unit and notion, ``not_combined`` says why, and no total is claimed."""
    drafted_as, notions = drafted_unit(drafted)
    record = {key: drafted.get(key) for key in ("epsilon", "delta", "columns",
                                                "differentially_private", "ledger")}
    record |= {"privacy_unit": drafted_as,
               "neighbouring": drafted.get("neighbouring", NEIGHBOURING["replace"])}
    column = None if unit is None else unit.column
    protects = "one row" if column is None else f"all rows of one {column!r}"
    if _unit_column(drafted_as) == column and notion in notions:
        record["with_this_release"] = {
            "epsilon": epsilon + drafted["epsilon"], "delta": delta + drafted["delta"],
            "composition": f"basic (an upper bound): the draft and this release both protect "
                           f"{protects} under {notion} neighbours"}
    else:
        drafted_column = _unit_column(drafted_as)
        record["not_combined"] = (
            f"the draft protects {'one row' if drafted_column is None else repr(drafted_column)}"
            f" ({' or '.join(notions)} neighbours), this release {protects} ({notion}): each "
            "guarantee holds for its own unit and neighbours only; no combined total")
    return record


def check_drafted_unit(schema: Schema, unit: PrivacyUnit | None, accepted: bool) -> None:
    """ValueError where a release under ``unit`` would use a schema drafted under DP at
    another unit (a row), unless ``accepted``: the draft read each unit's rows without bound,
    so the unit's guarantee does not cover the schema. Checked before any budget is spent."""
    drafted = schema.drafted_under_dp
    if unit is None or not drafted or accepted:
        return
    column = _unit_column(drafted_unit(drafted)[0])
    if column == unit.column:
        return
    at = "at row level" if column is None else f"under another privacy unit ({column!r})"
    raise ValueError(
        f"schema {schema.name!r} was drafted under DP {at}, but this release protects all rows "
        f"of one {unit.column!r}: the draft read each {unit.column!r}'s rows without bound, so "
        "no guarantee of the unit covers the schema. Draft it again under the unit (dp-dask "
        f"schema draft ... --privacy-unit {unit.column} --max-rows-per-unit K), or pass "
        "--accept-row-level-draft (accept_row_level_draft=True) to release anyway: each "
        "guarantee is then stated under its own unit, with no combined total")
