"""The audit's neighbouring data sets: tiny public inputs and the canaries that tell them apart.

White-box canaries (the audit tests the mechanisms' calibration, not scale). Each pair moves the
fields its mechanism releases, by the most one row (or one unit) may:

* the methods' base: rows that leave one value of every attribute unused. Replace one row:
  D = base + a typical row, D' = base + the canary, which differs from it in every attribute (so
  every measured marginal moves by its full sensitivity): an unused category, a size at a bin's
  edge (50), a city outside the schema (counted in its public "other" bin). Add/remove: D = base,
  D' = base + the canary. ``copies`` > 1 replaces that many rows: the neighbours of a release
  whose sensitivity is undercounted that many times;
* DPCopula-MLE: a sorted input where replacing the first row shifts every later row by one
  position (the blocks of consecutive rows of finding 1);
* a privacy unit: every base row its own unit, and one unit of several rows, typical on D and
  canaries on D' (:func:`unit_pair`); the rows per unit that choose K (:func:`unit_sizes_pair`);
* the schema draft under DP (``dp_dask.data.draft_dp``): under a privacy unit, a unit holding
  more than K rows of a city nobody else has, present on D' and absent from D
  (:func:`draft_unit_pair`); a text column whose replaced row takes a label near the threshold
  away and brings a lone "SECRET" (:func:`text_pair`); several text columns, whose replaced row
  takes a value near the joint mechanism's second-round threshold away in each and brings a
  lone "SECRET" to each (:func:`joint_text_pair`), and the same beside two numeric columns,
  the text rounds then sharing one budget with the numeric searches (:func:`together_pair`);
  a column of
  distinct values, one of them duplicated on D' (:func:`identifier_pair`); and, for the
  searches that threshold noisy counts of public cells (a timestamp's years, a number's
  octaves), one row moved from a cell just above the threshold at the low end of the data to
  one just below it at the high end (:func:`years_pair`, :func:`octave_pair`), the most a row
  moves the found range.

A threshold's place is a public number (the scale and the miss probability the drafting
publishes), read from the drafting's own functions. Where a correct release hides the canary
entirely (a cell far below its threshold), the pair sits where a planted bug's lower threshold
would show it (:mod:`dp_dask.audit.plants`): there the correct release's ε̂ is 0 and the planted
one's is not.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import dask
import numpy as np
import pandas as pd

from dp_dask.data.draft_dp import ROWS_SHARE
from dp_dask.data.draft_numeric import (
    GROW_MISS,
    OCTAVE_MISS,
    SENSITIVITY,
    StepNoise,
    joint_searches,
    search_cells,
    threshold,
    year_cells,
)
from dp_dask.data.draft_points import POINT_SHARE
from dp_dask.data.draft_split import SEARCH_DELTA, split_delta, split_epsilon
from dp_dask.data.draft_text import DISTINCT_SHARE, TextPlan, row_weights, text_plan
from dp_dask.data.draft_types import TYPE_SHARE
from dp_dask.data.schema import Schema, load_schema
from dp_dask.privacy.selection import calibrate_threshold, zcdp_epsilon

BASE_ROWS = 120
SEED = 20261127  # the base data's seed: the neighbours are fixed, public test inputs
EPSILON = 2.0
DELTA = 1e-6

AUDIT_SCHEMA = {
    "schema_version": 1, "name": "audit",
    "attributes": [
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue", "violet"]},
        {"name": "size", "type": "numeric", "edges": [0, 10, 20, 50, "inf"], "max": 1000},
        {"name": "city", "type": "categorical", "categories": ["a", "b", "c", "d"],
         "extra": ["other"], "on_unknown": "other"},
        {"name": "grade", "type": "categorical", "categories": [f"g{i}" for i in range(6)]},
    ]}
# the same with a public fine grid on size (the marginals' fine histograms)
FINE_SCHEMA = {**AUDIT_SCHEMA, "name": "audit-fine", "attributes": [
    AUDIT_SCHEMA["attributes"][0],
    {**AUDIT_SCHEMA["attributes"][1], "fine": {"start": 0, "stop": 50, "step": 5}},
    *AUDIT_SCHEMA["attributes"][2:]]}
TYPICAL = {"colour": "red", "size": 5, "city": "a", "grade": "g0"}
# an unused category, a value on a bin's edge, a value outside the schema ("other")
CANARY = {"colour": "violet", "size": 50, "city": "zz-not-in-schema", "grade": "g5"}

MLE_BLOCK_PAIRS = 60  # blocks of two rows: the noise is small beside the shift
# the schema draft's DP bins: quantiles over a public grid; the canary is the largest value
DRAFT_GRID = {"start": 0, "stop": 200, "step": 10}
DRAFT_CANARY = 190

UNIT = "person"  # the privacy unit's column
UNIT_ROWS = 8  # the canary unit's rows (more than the max_rows audited: bounding keeps fewer)
# the unit-shaped release's schema: the city declared unit-level (the unit model measures it
# with the rows per unit), and its rows ordered by the grade, the colour's lag-1 table measured
UNIT_SHAPED_SCHEMA = {**AUDIT_SCHEMA, "name": "audit-unit-shaped", "attributes": [
    *AUDIT_SCHEMA["attributes"][:2], {**AUDIT_SCHEMA["attributes"][2], "unit_level": True},
    AUDIT_SCHEMA["attributes"][3]]}
UNIT_ORDER, UNIT_LAG = "grade", "colour"
# auto K (units.auto_scores, the rule "the smallest candidate covering the 0.9 quantile"): with
# the canary's one row, 459 units of one row, one of two and 50 of three put the quantile exactly
# at K = 1 (u = 10·covered − 9·n = 0 for K = 1, 10 for K = 2: scores 0, 1, 11 for K = 1, 2, 3);
# the canary's 1000 rows on D' take one unit from every covered count (u = −10, 0: scores 10, 0,
# 1), so K = 1 and K = 3 trade places by twice the sensitivity, the most one unit can move
UNIT_SIZES = {1: 458, 2: 1, 3: 50}
UNIT_CANARY_ROWS = 1000

# the wide schema the marginals' "tables": "auto" sends to a spanning tree of pairs
WIDE_ATTRIBUTES = 6
WIDE_SIZE = 3

TEXT_COLUMN, TEXT_CANARY, TEXT_NEAR = "colour", "SECRET", "amber"
# the unit draft's K: three noise scales above the threshold a row's calibration (bound 1) puts
# on its one text column (ε less n̂'s, the types' and the distinct count's shares), so that a
# unit's K rows of one value pass at least 97.5 % of the time if the draft calibrated at bound 1
# while bounding at K (the plant "unit-draft-at-row-sensitivity"); at bound K they pass with a
# probability of at most δ
_ROW_THRESHOLD = calibrate_threshold(
    EPSILON * (1 - ROWS_SHARE - TYPE_SHARE) * (1 - DISTINCT_SHARE), DELTA)
DRAFT_UNIT_K = _ROW_THRESHOLD.threshold + math.ceil(3 * _ROW_THRESHOLD.scale)
DRAFT_UNIT_ROWS = 2 * DRAFT_UNIT_K  # the canary unit's rows: more than K, bounding keeps K
DRAFT_UNIT_CITY = "zz-rare-city"  # the canary unit's value, held by no other unit
# The joint text mechanism (two or more text columns, draft_text's Gaussian rounds): the columns,
# their two large levels each (far above the first round's threshold: released there) and the
# rows of each large level
JOINT_TEXT_COLUMNS = ("colour", "city")
JOINT_TEXT_LARGE = (("red", "blue"), ("a", "b"))
JOINT_TEXT_LARGE_ROWS = 150
IDENTIFIER_COLUMN = "code"  # not an identifier by its name: the DP rule decides
IDENTIFIER_ROWS = 121
YEARS_COLUMN, YEARS_CORE = "when", (2019, 2022)
OCTAVE_COLUMN = "amount"


def _column_epsilon(column: str, typed: bool) -> float:
    """The ε a one-column draft at :data:`EPSILON` gives ``column``, in draft_under_dp's budget
    order: n̂'s share, the type step's where the column's type is decided under DP (every drafted
    column's, a timestamp's nullability included), then the rest split over the columns."""
    rest = EPSILON * (1 - ROWS_SHARE - (TYPE_SHARE if typed else 0.0))
    return split_epsilon(rest, [column], [], delta=DELTA)[column]


# The ε of one step of the numeric searches (draft_numeric): a timestamp's year counts take its
# column's whole ε; an integer's octaves half of what its point masses leave
# (draft_points.POINT_SHARE), the cells inside the other half.
YEARS_STEP_EPSILON = _column_epsilon(YEARS_COLUMN, typed=True)
OCTAVE_STEP_EPSILON = _column_epsilon(OCTAVE_COLUMN, typed=True) * (1 - POINT_SHARE) / 2
# Where the planted bugs of the numeric searches put their thresholds (dp_dask.audit.plants):
# the year counts at sensitivity 1 instead of 2; the octave steps at sensitivity 1 and each at
# the draft's whole ε (no share taken for n̂, the types, the point masses, the other step): the
# scale 1/ε, 2/0.3825 = 5.2 times too small. Less is not resolved in a few thousand trials: a
# quartered scale (grow threshold 3.01, between the counts 3 and 4) gave ε̂ 1.34 at 500 trials
# and 1.60 at 2,000, one at the column's whole ε (4.44 times) 2.26 and 1.69 at seeds 0 and 1
# (1,000 trials), against the claim 1.942.
YEARS_NOISE_DIVISOR = 2
OCTAVE_NOISE_DIVISOR = SENSITIVITY * EPSILON / OCTAVE_STEP_EPSILON
IDENTIFIER_NOISE_DIVISOR = 60


def base_frame(rows: int = BASE_ROWS, seed: int = SEED) -> pd.DataFrame:
    """Rows that never use the canary's values (nor "other", nor a size >= 50)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"colour": rng.choice(["red", "green", "blue"], rows),
                         "size": rng.integers(0, 50, rows),
                         "city": rng.choice(["a", "b", "c", "d"], rows),
                         "grade": rng.choice([f"g{i}" for i in range(5)], rows)})


def with_row(frame: pd.DataFrame, row: dict[str, Any], copies: int = 1) -> pd.DataFrame:
    return pd.concat([frame, pd.DataFrame([row] * copies)], ignore_index=True)


def canary_pair(notion: str, copies: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    base = base_frame()
    if notion == "replace":
        return with_row(base, TYPICAL, copies), with_row(base, CANARY, copies)
    return base, with_row(base, CANARY, copies)


def sorted_pair() -> tuple[Schema, pd.DataFrame, pd.DataFrame]:
    """DPCopula-MLE's pair: rows (x, lo), (x, hi) for x = 0..K−1 in that order; the neighbour
    replaces the first row by (K, hi), which a sorted file puts last."""
    k = MLE_BLOCK_PAIRS
    schema = load_schema({"schema_version": 1, "name": "audit-sorted", "attributes": [
        {"name": "x", "type": "numeric", "edges": list(range(k + 2))},
        {"name": "y", "type": "categorical", "categories": ["lo", "hi"]}]})
    rows = [(x, y) for x in range(k) for y in ("lo", "hi")]
    d0 = pd.DataFrame(rows, columns=["x", "y"])
    d1 = pd.DataFrame(rows[1:] + [(k, "hi")], columns=["x", "y"])
    return schema, d0, d1


def draft_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A numeric column, and the same with its typical row replaced by the largest value."""
    base = base_frame()[["size"]]
    return (with_row(base, {"size": TYPICAL["size"]}),
            with_row(base, {"size": DRAFT_CANARY}))


def unit_pair(rows: int = UNIT_ROWS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every base row its own unit; one more unit of ``rows`` rows, typical on D, canaries on D'
    (replace one unit: n moves by nothing here, every table by ``rows`` rows before bounding)."""
    base = base_frame().assign(**{UNIT: [f"p{i}" for i in range(BASE_ROWS)]})
    return (with_row(base, {**TYPICAL, UNIT: "canary"}, rows),
            with_row(base, {**CANARY, UNIT: "canary"}, rows))


def unit_sizes_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Units of :data:`UNIT_SIZES` rows, and the canary unit: one row on D, 1000 on D'. It
    moves the rule's answer from K = 1 to K = 2, K = 1's and K = 3's scores by the sensitivity
    in opposite directions."""
    units = [f"u{i}-{size}" for size, count in UNIT_SIZES.items() for i in range(count)
             for _ in range(size)]
    frame = pd.DataFrame({UNIT: units})
    return (with_row(frame, {UNIT: "canary"}),
            with_row(frame, {UNIT: "canary"}, UNIT_CANARY_ROWS))


def wide_schema() -> Schema:
    return load_schema({"schema_version": 1, "name": "audit-wide", "attributes": [
        {"name": f"w{a}", "type": "categorical",
         "categories": [f"v{v}" for v in range(WIDE_SIZE)]} for a in range(WIDE_ATTRIBUTES)]})


def wide_pair(copies: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A wide table whose last value of every attribute is unused, and the canary that uses
    them all (replace one row, or ``copies``)."""
    rng = np.random.default_rng(SEED)
    names = [f"w{a}" for a in range(WIDE_ATTRIBUTES)]
    base = pd.DataFrame({c: rng.choice([f"v{v}" for v in range(WIDE_SIZE - 1)], BASE_ROWS)
                         for c in names})
    return (with_row(base, {c: "v0" for c in names}, copies),
            with_row(base, {c: f"v{WIDE_SIZE - 1}" for c in names}, copies))


def draft_unit_pair(split: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A text column (the city) and the unit column, every base row its own unit; D' adds the
    canary unit: :data:`DRAFT_UNIT_ROWS` rows of :data:`DRAFT_UNIT_CITY`. ``split`` > 1 gives
    its rows to that many units instead (equal shares): bounded at 1 row per unit, they keep
    ``split`` of its rows, as a unit bounded at K = ``split`` rows does."""
    base = base_frame()[["city"]].assign(**{UNIT: [f"p{i}" for i in range(BASE_ROWS)]})
    canary = pd.DataFrame({"city": [DRAFT_UNIT_CITY] * DRAFT_UNIT_ROWS,
                           UNIT: [f"canary-{i % split}" if split > 1 else "canary"
                                  for i in range(DRAFT_UNIT_ROWS)]})
    return base, pd.concat([base, canary], ignore_index=True)


def text_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """One text column: three labels far above the threshold, :data:`TEXT_NEAR` on it (the
    draft's Laplace threshold of one text column, :func:`joint_text_plan` at one column: ε less
    n̂'s, the type step's and the distinct count's shares, δ less the point masses'); the
    replaced row is one of TEXT_NEAR's on D, a lone :data:`TEXT_CANARY` on D'."""
    near = joint_text_plan(columns=1).single.threshold
    base = pd.DataFrame({TEXT_COLUMN: ["red"] * 40 + ["green"] * 40 + ["blue"] * 40
                         + [TEXT_NEAR] * (near - 1)})
    return (with_row(base, {TEXT_COLUMN: TEXT_NEAR}),
            with_row(base, {TEXT_COLUMN: TEXT_CANARY}))


def joint_text_plan(delta: float = DELTA, columns: int = len(JOINT_TEXT_COLUMNS)) -> TextPlan:
    """The text mechanism's calibration in a draft of ``columns`` text columns alone at
    (:data:`EPSILON`, ``delta``) (:data:`JOINT_TEXT_COLUMNS`' by default; one column's is the
    Laplace threshold), from public facts as the draft computes it: ε less n̂'s and the type
    step's shares (every column is text, so the text columns take all the rest), δ less the
    point masses' and the searches' shares (:func:`~dp_dask.data.draft_dp.split_delta`: their
    types are decided under DP, so each may be searched)."""
    text_delta = split_delta(delta, columns, texts=True)[1]
    return text_plan(EPSILON * (1 - ROWS_SHARE - TYPE_SHARE), text_delta, columns)


def joint_text_pair(copies: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Text columns :data:`JOINT_TEXT_COLUMNS`: two large levels each (released by the first
    round), and rows holding :data:`TEXT_NEAR` in every column, as many as put its weighted
    count on the second round's threshold (rounded up) on D; their weight is a row's with all
    m values unreleased, ⌊1000/√m⌋, the most a replaced row moves each of its keys. The replaced
    row holds TEXT_NEAR in every column on D, a lone :data:`TEXT_CANARY` in every column on D'
    (the full L2 distance √2 · 1000 of the second round; √(2m) of the first). ``copies`` > 1
    replaces that many such rows (TEXT_NEAR's rows on D the same)."""
    return _replaced(_joint_text_base(_near_rows(joint_text_plan().second.threshold) - copies),
                     copies)


def _near_rows(threshold: float) -> int:
    """The rows of :data:`TEXT_NEAR` that put its weighted count on the second round's
    ``threshold`` (rounded up), each at the weight of a row with every joint text column's
    value unreleased, ⌊1000/√m⌋."""
    weight = int(row_weights(np.ones((1, len(JOINT_TEXT_COLUMNS)), dtype=bool))[0])
    return math.ceil(threshold / weight)


def _joint_text_base(near: int) -> pd.DataFrame:
    """:data:`JOINT_TEXT_COLUMNS`' two large levels each and ``near`` rows of
    :data:`TEXT_NEAR` in every column."""
    large = JOINT_TEXT_LARGE_ROWS * len(JOINT_TEXT_LARGE[0])
    return pd.DataFrame({
        column: [levels[i % len(levels)] for i in range(large)] + [TEXT_NEAR] * near
        for column, levels in zip(JOINT_TEXT_COLUMNS, JOINT_TEXT_LARGE)})


def _replaced(base: pd.DataFrame, copies: int, same: dict[str, Any] | None = None
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """D and D': ``base`` with ``copies`` rows of TEXT_NEAR in every text column, or of a lone
    :data:`TEXT_CANARY` (``same``: the replaced rows' other columns, equal on both sides)."""
    same = same or {}
    return (with_row(base, dict.fromkeys(JOINT_TEXT_COLUMNS, TEXT_NEAR) | same, copies),
            with_row(base, dict.fromkeys(JOINT_TEXT_COLUMNS, TEXT_CANARY) | same, copies))


# The draft's two Gaussian parts in one budget (draft_split.gaussian_together): the joint text
# pair's columns beside two integer columns that are the same on both sides, so that its text
# rounds share one zCDP budget with the numeric searches
TOGETHER_NUMBERS = ("amount", "count")
TOGETHER_ROW = {"amount": 40, "count": 30}  # the replaced row's numbers, on both sides


def _together_frame(near: int) -> pd.DataFrame:
    """:func:`_joint_text_base` with ``near`` rows of :data:`TEXT_NEAR`, and the integer
    columns :data:`TOGETHER_NUMBERS` spread over a few octaves."""
    frame = _joint_text_base(near)
    frame[TOGETHER_NUMBERS[0]] = [16 + i % 48 for i in range(len(frame))]
    frame[TOGETHER_NUMBERS[1]] = [20 + i % 40 for i in range(len(frame))]
    return frame


@functools.cache
def together_second_round() -> dict[str, Any]:
    """The second text round's record in a draft of that shape at (:data:`EPSILON`,
    :data:`DELTA`), the text rounds measured with the numeric searches: read from a draft of
    a table of the same columns and about the same rows (the calibration reads public facts
    alone: the columns' kinds, their number, δ, K and the noisy n̂, whose share of the text
    budget is capped at this size)."""
    from dp_dask.data.draft import draft_schema  # the drafting, not a copy of its split

    near = _near_rows(joint_text_plan().second.threshold)
    with dask.config.set(scheduler="synchronous"):
        drafted = draft_schema(_together_frame(near), dp_epsilon=EPSILON, dp_delta=DELTA,
                               ledger=False, noise_sampler="numpy", noise_seed=0
                               ).schema["drafted_under_dp"]
    return drafted["text"]["levels"]["rounds"][1]


def together_pair(copies: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`joint_text_pair`'s canary where the text rounds and the numeric searches share
    one budget: TEXT_NEAR's weighted count on the second round's threshold of that budget
    (:func:`together_second_round`, below the rounds' threshold converted apart) on D, the
    replaced row holding TEXT_NEAR in every text column on D and a lone :data:`TEXT_CANARY` in
    each on D', its numbers the same."""
    near = _near_rows(together_second_round()["threshold"])
    return _replaced(_together_frame(near - copies), copies, TOGETHER_ROW)


def identifier_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A column of distinct values (an identifier by the DP rule: its noisy count of distinct
    values is far above half the rows), and the same with one value repeated."""
    values = [f"c{i:04d}" for i in range(IDENTIFIER_ROWS)]
    # a boolean column beside it (drafted from its public type): a schema of ids alone is none
    flags = [i % 2 == 0 for i in range(IDENTIFIER_ROWS)]
    return (pd.DataFrame({IDENTIFIER_COLUMN: values, "flag": flags}),
            pd.DataFrame({IDENTIFIER_COLUMN: values[:-1] + values[:1], "flag": flags}))


def _boundary_counts(cut: float) -> tuple[int, int]:
    """Rows of the low and high boundary cells on D (D' moves one from low to high): the low
    one at the threshold ``cut`` rounded up, the high one a row below it."""
    low = math.ceil(cut)
    return low, low - 1


def years_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Timestamps: 60 rows in each core year, and two boundary years around the year search's
    threshold at :data:`YEARS_NOISE_DIVISOR` times its ε (:data:`YEARS_STEP_EPSILON`)."""
    scale = SENSITIVITY / (YEARS_STEP_EPSILON * YEARS_NOISE_DIVISOR)
    low, high = _boundary_counts(threshold(scale, len(year_cells()) - 1, OCTAVE_MISS))
    first, last = YEARS_CORE
    years = ([y for y in range(first, last + 1) for _ in range(60)]
             + [first - 1] * (low - 1) + [last + 1] * high)

    def frame(extra: int) -> pd.DataFrame:
        stamps = pd.to_datetime([f"{y}-06-15" for y in years + [extra]])
        return pd.DataFrame({YEARS_COLUMN: stamps})

    return frame(first - 1), frame(last + 1)


# The numeric searches measured together (draft_numeric.joint_searches): two integer columns, the
# canary's and one the same in both neighbours, each with the rows a point-mass step needs
SEARCHES_COLUMNS = (OCTAVE_COLUMN, "count")
SEARCHES_ROWS = 400


def _searches_shares(epsilon: float) -> dict[str, float]:
    """The shares of a draft of the two columns of :data:`SEARCHES_COLUMNS` at ``epsilon``,
    from public facts as the draft computes them: ε less n̂'s and the type step's shares, split
    equally (two numbers). Of each, the searches keep :data:`SEARCH_KEPT`."""
    rest = epsilon * (1 - ROWS_SHARE - TYPE_SHARE)
    return split_epsilon(rest, list(SEARCHES_COLUMNS), [], delta=DELTA)


# the part of a column's budget its search steps keep: its point masses take the rest (the
# audit's columns hold the rows a point-mass step needs)
SEARCH_KEPT = 1 - POINT_SHARE


def searches_step_noise(epsilon: float = EPSILON) -> StepNoise:
    """The octave step's Gaussian noise of :data:`OCTAVE_COLUMN` in that draft at ``epsilon``:
    the searches' one budget (their point masses' included) at :data:`SEARCH_DELTA` of δ, half
    of what a column's point masses leave of its ρ a step."""
    shares = _searches_shares(epsilon)
    cells = search_cells("integer", "int64")
    kept = dict.fromkeys(shares, SEARCH_KEPT)
    rhos = joint_searches(shares, dict.fromkeys(shares, cells), SEARCH_DELTA * DELTA,
                          kept=kept)
    assert rhos is not None, "two searched columns at the audit's ε are measured together"
    return StepNoise.for_step(shares[OCTAVE_COLUMN] * SEARCH_KEPT / 2,
                              rhos[OCTAVE_COLUMN] * SEARCH_KEPT / 2, 1)


def _searches_noise_divisor() -> float:
    """The factor on the draft's ε at which its searches' octave step gets the planted bug's σ:
    the searches' summed ε taken as their ρ unconverted, every step at all of it and at L2
    sensitivity 1 (a row's add/remove), σ = 1/√(2ε_N). In closed form, one conversion: the
    shares grow with ε in proportion, so the octave column's ρ is its fixed part r of the
    budget's, and the step's σ = √2/√(k·ρ_col) (k: :data:`SEARCH_KEPT`) is the target where the
    budget's ε is that of ρ_col/r (a bisection over the draft's ε took 700 conversions, 2.8 s
    at every import)."""
    shares = _searches_shares(EPSILON)
    total = sum(shares.values())
    target = 1.0 / math.sqrt(2.0 * total)
    column_rho = SENSITIVITY / (SEARCH_KEPT * target**2)  # a step of half k·ρ_col
    budget = zcdp_epsilon(column_rho * total / shares[OCTAVE_COLUMN], SEARCH_DELTA * DELTA)
    # the conversion back to ρ rounds down (1e-6): a hair more ε keeps σ at most the target
    return budget / total * (1 + 1e-6)


# The plant "searches-budget-unconverted" (dp_dask.audit.plants): about 16 times the σ. A
# canary at the correct σ's grow threshold (24 rows) is beyond what the auditor resolves: the
# step's Gaussian at ρ 0.004 moves by μ = 0.15 between neighbours
SEARCHES_NOISE_DIVISOR = _searches_noise_divisor()


def searches_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`octave_pair`'s canary at the searches' Gaussian octave step (measured together
    with a second integer column, the same on both sides): the zero cell and [64, 128) around
    its grow threshold at :data:`SEARCHES_NOISE_DIVISOR` times the draft's ε; D' moves a row
    from the zero cell (5) to [64, 128) (100)."""
    noise = searches_step_noise(EPSILON * SEARCHES_NOISE_DIVISOR)
    low, high = _boundary_counts(noise.threshold(1, GROW_MISS))
    values = ([16 + i % 16 for i in range(100)] + [32 + i % 32 for i in range(100)]
              + [5] * (low - 1) + [100] * high)
    values += [40 + i % 8 for i in range(SEARCHES_ROWS - len(values) - 1)]
    other = [20 + i % 40 for i in range(len(values) + 1)]
    return (pd.DataFrame({OCTAVE_COLUMN: values + [5], "count": other}),
            pd.DataFrame({OCTAVE_COLUMN: values + [100], "count": other}))


def octave_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Integers: 100 rows in each of the octaves [16, 32) and [32, 64), spread thinly over
    their values (no cell passes, so nothing trims the range), and the zero cell [0, 16) and
    [64, 128) around the grow threshold of the octave search at :data:`OCTAVE_NOISE_DIVISOR`
    times its ε (:data:`OCTAVE_STEP_EPSILON`). D' moves a row from the zero cell (5) to
    [64, 128) (100): the found range's ends move both ways."""
    scale = SENSITIVITY / (OCTAVE_STEP_EPSILON * OCTAVE_NOISE_DIVISOR)
    low, high = _boundary_counts(threshold(scale, 1, GROW_MISS))  # one cell's: a neighbour's
    values = ([16 + i % 16 for i in range(100)] + [32 + i % 32 for i in range(100)]
              + [5] * (low - 1) + [100] * high)
    return (pd.DataFrame({OCTAVE_COLUMN: values + [5]}),
            pd.DataFrame({OCTAVE_COLUMN: values + [100]}))
