"""A drafted column's type decided under DP, unless the data owner declares the storage types
public (``schema draft --public-types``).

A pandas frame's dtypes, and the Parquet schema pandas writes, follow the values: one null turns
an int64 column into float64, and every field is marked nullable. Read as public, such a type
leaks that one row. So, by default, the storage type only proposes the candidates, and the draft
decides among them from noisy counts (:func:`decide_types`):

* a column stored as numbers is an integer or a float (``int64``/``float64``);
* a column stored as text (or a CSV column, which stores no type) is text, an integer or a float:
  searched as a number (:mod:`dp_dask.data.draft_numeric`) when its values are numbers;
* either is nullable, with a missing bin, or never null, without one;
* a timestamp (its candidates :data:`YEARS`) stays a timestamp: only whether it is nullable is
  decided, from the same histogram (its values count as integers: a timestamp is stored as an
  integer count of its unit), so a never-null timestamp gets no missing bin in any of its
  calendar features.

The counts come from the draft's one pass over the data (:func:`value_forms`): per column, its
values' forms, a histogram over :data:`FORMS` (missing: a null or a listed missing value; no
number: a value that does not parse as one; an integer; a fraction: any other number, by its
decimal places: 1 to :data:`MAX_DECIMALS`, or more). A replaced
row leaves one form and enters another: L1 sensitivity 2 per column, which bounds an added or
removed row's 1, and 2K where the draft bounded each privacy unit to K rows (its ``bound``).
The histograms get Laplace noise (OpenDP's ``make_laplace``) at :data:`TYPE_SHARE` of the draft's
ε, equal over the columns. A form is present only if its noisy
count passes b·ln(1/2β), β = :data:`TYPE_MISS`, so that what the values never show is not
invented (a count of zero passes with probability β):

* **nullable** only if missing values are present: a never-null column gets no missing bin, whose
  noisy share would put invented nulls into every release. Its rare nulls, fewer than the
  threshold, count in a bin of its domain (the middle bin of numbers, ``other`` of text, or the
  largest level of text drafted without ``other``). The missing form's noisy count is not the
  only one: each column's own histogram counts its missing values too (a numeric search's steps
  and a timestamp's years one more cell, a text column's levels the public key "missing"; no
  extra ε, :mod:`.draft_numeric`, :mod:`.draft_text`), and the draft decides nullability once
  those are drawn (:func:`decide_nullable`: the counts' inverse-variance weighted mean against
  what their weighted noises exceed with probability β), so a column's larger share of ε finds
  the nulls this step's small share over all columns misses (27 % of the rows needed on a
  table of 15 columns at total ε 1).
* **float** only if fractions are present: a fraction form passes, or the noisy sum of the
  fraction forms passes what the sum of their noise exceeds with probability β (Chernoff,
  :func:`~dp_dask.data.draft_numeric.tail_threshold`: fractions spread over several decimal
  places); else an integer (the rare fractions drawn back as integers of their bin); released
  with the most decimal places whose form is present
  (``"decimals"``, at most :data:`MAX_DECIMALS`; unrounded where more places are present).
  Each row is in one form, so the finer histogram keeps the sensitivity.
* **a number**, for a column stored as text, only if numbers are present and values that are no
  number are not, or are few: a noisy share of at most :data:`STRAY_SHARE` of the noisy
  non-missing values (a numeric column with a few stray words; they count as missing, said in
  the draft's notes); otherwise text, the storage's own candidate and the cautious one: a text
  column holds any value, and a word is never lost.
* **the largest form** where no value's form passes the threshold (a type budget too small for
  the table, e.g. many columns at a small ε: a 27k-row CSV of 24 coded columns at ε 0.1) but the
  noisy rows n̂ are at least :data:`LARGEST_SCALES` noise scales: the values' noisy histogram
  still says which form holds most of them (a form holding all rows loses to one of the 7 others'
  noise with probability below 8 % there), so the column takes the kind of its largest noisy
  form (text if that is "no number"; else a number, a float of that form's decimal places, its
  words strays). Summing the five fraction forms there (a sum of five noises against one) made
  text columns of 5,000 rows numbers. Defaulting to text there drafted every numeric
  column of such a CSV as text whose levels, at the same budget, could not pass their
  thresholds either: the whole column became ``other``. Below that size (a tiny table, where
  noise picks the largest form) the cautious kinds stay: text for text, integer for numbers.

The decisions are post-processing of the noisy histograms: the numeric search's cells, the text
columns' budget floor, the output ``dtype`` and the missing bin follow them, never the storage
dtype, and the attributes say ``"dtype_source": "dp"``. What stays read is the storage's family,
numbers or text, as the candidates: one row does not change it in a Parquet file (pandas stores
an integer column with a null as float64, and Arrow refuses a column of numbers and words), but a
CSV read by pandas and written to Parquet stores a numeric column with one word as text. Its type
is then decided among text and numbers, which finds the same number as its neighbour's wherever the
numbers are present; declare such a column's type (a codebook, ``--dp-grid``) on a table too small
for that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.signal import fftconvolve
from scipy.special import ndtr

from dp_dask.data.draft_numeric import Cells, search_cells, tail_threshold
from dp_dask.data.schema import Attribute
from dp_dask.privacy.noise import laplace_noise

# A fraction's form is its decimal places (its least d with the value on the 10⁻ᵈ lattice),
# 1..MAX_DECIMALS or more: the column's decimals are found in the same histogram.
MAX_DECIMALS = 4
FRACTIONS = (*(f"{d} decimal{'s' * (d > 1)}" for d in range(1, MAX_DECIMALS + 1)),
             "more decimals")
FORMS = ("missing", "no number", "integer", *FRACTIONS)
TYPE_SHARE = 0.1  # of the draft's ε
TYPE_MISS = 1e-4  # chance that a count of zero passes: a never-null column gets a missing bin
# A column stored as text is a number if its values that are no number are at most this share
# of its noisy non-missing values: those strays count as missing (a numeric attribute's
# on_unknown "clip" counts a value that is no number as missing).
STRAY_SHARE = 0.05
SENSITIVITY = 2  # L1 of a column's forms when one row is replaced by another
# Where no form passes its threshold, the largest noisy form decides on a table of at least this
# many noise scales of rows (by n̂): all rows in one form lose to the 7 others' noise with
# probability 7·½e⁻⁵(1 + 5/2) ≈ 8 % at this size, and less above it.
LARGEST_SCALES = 5
NUMBER_TYPES = {"integer": "int64", "float": "float64"}
TEXT = "text"
TIMESTAMP = "timestamp"  # a timestamp's kind: never changed by the type step
YEARS = "years"  # a timestamp column's candidates: its years


@dataclass(frozen=True)
class MissingCount:
    """One noisy count of a column's missing values: ``noisy``, its noise (``"laplace"`` of scale
    b, or ``"gaussian"`` of standard deviation σ) and the mechanism that drew it (``by``)."""

    noisy: float
    noise: str
    scale: float
    by: str

    @property
    def variance(self) -> float:
        return 2.0 * self.scale**2 if self.noise == "laplace" else self.scale**2

    def to_json(self) -> dict[str, Any]:
        return {"noisy": self.noisy, "noise": self.noise, "scale": self.scale}

    @staticmethod
    def drawn_by(mechanism: dict[str, Any]) -> list[MissingCount]:
        """The noisy counts of missing values a column's own ``mechanism`` drew, from its
        record: the record's or its steps' ``"missing"`` entries (:meth:`to_json`)."""
        parts = [mechanism, *mechanism.get("steps", [])]
        return [MissingCount(float(part["missing"]["noisy"]), part["missing"]["noise"],
                             float(part["missing"]["scale"]),
                             part["missing"].get("by", part.get("step", "own")))
                for part in parts if "missing" in part]


@dataclass(frozen=True)
class Undecided:
    """A drafted column whose kind the type step decides: the search cells of both numeric
    kinds, counted in the draft's pass, and whether it may be text (stored as text)."""

    text: bool
    cells: dict[str, Cells]

    @staticmethod
    def stored_as(text: bool) -> Undecided:
        """The candidates of a column stored as text (``text``) or as numbers."""
        return Undecided(text, {kind: search_cells(kind, None) for kind in NUMBER_TYPES})


@dataclass(frozen=True)
class Decision:
    """A column's decided type: ``kind`` text, integer, float or (kept) timestamp, and whether
    it is nullable."""

    kind: str
    nullable: bool
    from_text: bool = False  # a number stored as text: its values that are no number are missing
    decimals: int | None = None  # a float's decimal places; None: any (unrounded)
    words: int = 0  # the noisy count of values that are no number (at least 0): a number's strays
    missing: MissingCount | None = None  # the type step's noisy count of missing values

    @property
    def dtype(self) -> str:
        return TIMESTAMP if self.kind == TIMESTAMP else NUMBER_TYPES.get(self.kind, "string")


def value_forms(numbers: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """Exact counts of one partition's values per form (:data:`FORMS`): ``missing`` per row, and
    ``numbers`` each value parsed as a number (NaN where it is none)."""
    number = ~missing & ~np.isnan(numbers)
    integer = number & np.isfinite(numbers) & (np.floor(numbers) == numbers)
    left = numbers[number & ~integer]  # the fractions only: a text or integer column has none
    places = []
    for d in range(1, MAX_DECIMALS + 1):  # the least d: each fraction counts in one form
        scaled = left * 10.0**d
        # the slack absorbs binary rounding (0.1 + 0.2 has 1 decimal place)
        exact = np.isfinite(scaled) & np.isclose(scaled, np.rint(scaled), rtol=1e-12,
                                                 atol=1e-9)
        places.append(exact.sum())
        left = left[~exact]
    return np.array([missing.sum(), (~missing & ~number).sum(), integer.sum(), *places,
                     len(left)], dtype=np.int64)


def timestamp_forms(missing: np.ndarray) -> np.ndarray:
    """Exact counts of one partition's timestamps per form (:data:`FORMS`): ``missing`` per
    row, every other value an integer (its count of the storage unit since 1970)."""
    forms = np.zeros(len(FORMS), dtype=np.int64)
    forms[FORMS.index("missing")] = missing.sum()
    forms[FORMS.index("integer")] = (~missing).sum()
    return forms


def decide_types(forms: dict[str, np.ndarray], candidates: dict[str, Any], *, epsilon: float,
                 contributions: int = 1, sampler: str, rng: np.random.Generator | None,
                 rows: float | dict[str, float] | None = None
                 ) -> tuple[dict[str, Decision], dict[str, Any]]:
    """Each column's type from its exact ``forms`` (:func:`value_forms`, summed), under
    ``epsilon``-DP in all (the module docstring); ``candidates``: per column an
    :class:`Undecided`, :data:`YEARS` for a timestamp (whose nullability alone is decided), or
    anything else for a column declared numeric (a public grid).
    ``contributions``: the rows K one privacy unit holds after the draft bounded it (1: a row),
    which every sensitivity is K times. ``rows``: the draft's noisy row count n̂ (None: not
    drawn; per column: the noisy rows its forms count, n̂ less its point masses' noisy
    counts), which says whether the largest form may decide where none passes. Noise is drawn
    here, once.
    The decisions, and the record of the mechanism with the noisy counts."""
    columns = list(forms)
    sensitivity = SENSITIVITY * contributions
    scale = sensitivity * len(columns) / epsilon  # ε / len(columns) per column
    noisy = laplace_noise(np.concatenate([forms[c] for c in columns]), scale,
                          sensitivity=sensitivity * len(columns), sampler=sampler,
                          rng=rng).reshape(len(columns), len(FORMS))
    threshold = scale * math.log(1.0 / (2.0 * TYPE_MISS))
    # what the sum of the fraction forms' noise exceeds with probability TYPE_MISS
    fraction_threshold = tail_threshold(scale, len(FRACTIONS), TYPE_MISS)
    decisions: dict[str, Decision] = {}
    for column, row in zip(columns, noisy):
        missing, no_number, integer, *places = present = row > threshold
        grid = candidates[column]
        nulls = MissingCount(float(row[0]), "laplace", scale, "types")
        if isinstance(grid, str) and grid == YEARS:  # stays a timestamp, nullable or not
            decisions[column] = Decision(TIMESTAMP, bool(missing), missing=nulls)
            continue
        fractions = float(row[3:].sum())  # the noisy count of values that are no integer
        counted = rows.get(column) if isinstance(rows, dict) else rows
        if not present[1:].any() and counted is not None and counted >= LARGEST_SCALES * scale:
            # No value's form passes (a budget too small for the table): the largest noisy
            # form stands for the values, post-processing of the same counts (module docstring)
            largest = 1 + int(np.argmax(row[1:]))
            no_number, integer = largest == 1, largest == 2
            places = [largest == 3 + d for d in range(len(FRACTIONS))]
        # fractions spread over several decimal places, none passing alone, are fractions too
        fraction = any(places) or fractions > fraction_threshold
        # words among numbers: a few (a noisy share of at most STRAY_SHARE) are strays
        words = no_number and row[1] > STRAY_SHARE * max(row[1:].sum(), 1.0)
        stored_text = isinstance(grid, Undecided) and grid.text
        text = stored_text and (words or not (integer or fraction))
        # unrounded where more places, or fractions of no one form, are present
        decimals = (1 + max(np.flatnonzero(places[:-1])) if fraction and any(places[:-1])
                    and not places[-1] else None)
        decisions[column] = Decision(TEXT if text else "float" if fraction else "integer",
                                     bool(missing), bool(stored_text and not text),
                                     None if decimals is None else int(decimals),
                                     max(round(float(row[1])), 0), nulls)
    record = {
        "mechanism": "laplace histogram of value forms", "forms": list(FORMS),
        "epsilon": epsilon, "epsilon_each": epsilon / len(columns),
        "sensitivity": f"L1 {sensitivity} per column (replace one "
                       + ("row)" if contributions == 1 else
                          f"unit of at most {contributions} rows)"),
        "scale": scale, "threshold": threshold, "fraction_threshold": fraction_threshold,
        "miss": TYPE_MISS,
        "rule": ("a form is present if its noisy count passes the threshold; nullable as "
                 "\"nullable\" says (this count and the column's own), float if fractions "
                 "(of any decimal places) are, or the noisy sum of the fraction forms passes "
                 "fraction_threshold (else "
                 f"integer), released at the most decimal places present (up to {MAX_DECIMALS}; "
                 "unrounded if more are); a column stored as text is a number if numbers are "
                 "present and values that are no number are not, or are at most "
                 f"{STRAY_SHARE:g} of the noisy non-missing values (counted as missing); else "
                 "text; a column stored as numbers is one, a timestamp stays one (nullable "
                 "if missing values are present); where no non-missing form is "
                 f"present, the largest noisy one stands for the values if n̂ is at least "
                 f"{LARGEST_SCALES} noise scales"),
        "noisy": {c: dict(zip(FORMS, (round(float(v)) for v in row)))
                  for c, row in zip(columns, noisy)},
        "decided": {c: {"dtype": d.dtype, "nullable": d.nullable,
                        **({} if d.decimals is None else {"decimals": d.decimals})}
                    for c, d in decisions.items()},
        "opendp": "make_laplace over vector_domain(atom_domain(i64)), l1_distance(i64)"}
    return decisions, record


def never_null(spec: dict[str, Any]) -> dict[str, Any]:
    """The drafted attribute without its missing bin: a missing value (one of fewer than the
    threshold's) counts in its ``other`` bin (text), the level its unknown values count in (text
    without ``other``) or its middle bin (numbers), so the release's column holds no null."""
    if spec.get("on_missing") not in spec.get("extra", ()):
        return spec
    extra = [label for label in spec["extra"] if label != spec["on_missing"]]
    kept = {k: v for k, v in spec.items() if k not in ("extra", "on_missing")}
    kept = {**kept, "extra": extra} if extra else kept
    if spec.get("on_unknown") in [*extra, *spec.get("categories", [])]:
        return {**kept, "on_missing": spec["on_unknown"]}
    attribute = Attribute.from_json(kept)
    return {**kept, "on_missing": attribute.labels[(attribute.bins - 1) // 2]}


# The grid on which combined_threshold adds noises: this many points per scale of the widest, out
# to NOISE_SPAN of its scales (its tail there is below e⁻⁴⁰)
GRID_PER_SCALE = 200
NOISE_SPAN = 40


def _masses(noise: str, scale: float, points: np.ndarray, step: float) -> np.ndarray:
    """The probability of each cell [x − step/2, x + step/2) of ``points`` under the noise."""
    edges = np.append(points - step / 2, points[-1] + step / 2)
    if noise == "gaussian":
        cdf = ndtr(edges / scale)
    else:
        cdf = np.where(edges < 0, 0.5 * np.exp(np.minimum(edges, 0) / scale),
                       1 - 0.5 * np.exp(-np.maximum(edges, 0) / scale))
    return np.diff(cdf)


def combined_threshold(noises: list[tuple[str, float]], miss: float) -> float:
    """What a sum of independent noises (each ``(kind, scale)``: ``"laplace"`` of scale b,
    ``"gaussian"`` of standard deviation σ) exceeds with probability at most ``miss``: one
    Laplace noise's b·ln(1/2β) exactly; a sum's from its distribution, the noises' cell masses
    convolved on a grid of :data:`GRID_PER_SCALE` points per scale of the widest, moved up by
    half a cell per noise (what the grid may round away)."""
    if len(noises) == 1 and noises[0][0] == "laplace":
        return noises[0][1] * math.log(1.0 / (2.0 * miss))
    widest = max(scale for _, scale in noises)
    step = widest / GRID_PER_SCALE
    points = step * np.arange(-NOISE_SPAN * GRID_PER_SCALE, NOISE_SPAN * GRID_PER_SCALE + 1)
    total = np.ones(1)
    for noise, scale in noises:
        total = np.clip(fftconvolve(total, _masses(noise, scale, points, step)), 0.0, None)
    above = np.cumsum(total[::-1])[::-1]  # P(sum ≥ each point)
    beyond = int(np.argmax(above <= miss))  # the first point with at most miss at or above it
    return float(step * (beyond - len(noises) * NOISE_SPAN * GRID_PER_SCALE)
                 + len(noises) * step / 2)


NULLABLE_RULE = (
    "nullable if the inverse-variance weighted mean of the column's noisy counts of missing "
    "values (the type step's, and its own histogram's where it counted them: a numeric "
    "search's steps, a timestamp's years, a text column's level 'missing') passes what the "
    f"weighted noises exceed with probability {TYPE_MISS:g}")


def decide_nulls(decisions: dict[str, Decision], mechanisms: dict[str, dict[str, Any]],
                 record: dict[str, Any]) -> dict[str, Decision]:
    """The ``decisions`` with each column's nullability from the type step's noisy count of its
    missing values and those its own ``mechanisms`` drew (:meth:`MissingCount.drawn_by`),
    by :func:`decide_nullable` (post-processing); the type step's ``record`` says so
    (``"decided"``, ``"nullable"``)."""
    decided, nulls = {}, {}
    for column, decision in decisions.items():
        own = MissingCount.drawn_by(mechanisms.get(column, {}))
        nullable, nulls[column] = decide_nullable([decision.missing, *own])
        decided[column] = replace(decision, nullable=nullable)
    if decided:
        record["decided"] = {c: {"dtype": d.dtype, "nullable": d.nullable,
                                 **({} if d.decimals is None else {"decimals": d.decimals})}
                             for c, d in decided.items()}
        record["nullable"] = {"columns": nulls, "rule": NULLABLE_RULE}
    return decided


def decide_nullable(counts: list[MissingCount], miss: float = TYPE_MISS
                    ) -> tuple[bool, dict[str, Any]]:
    """Whether a column is nullable from its noisy counts of missing values (the type step's
    and its own histogram's, each of the same rows; post-processing): their inverse-variance
    weighted mean m̂ against what the weighted noises exceed with probability ``miss``
    (:func:`combined_threshold`), so a never-null column gets a missing bin with probability
    ``miss`` as from the type step alone, and a column's own counts, at its larger share of ε,
    find nulls the type step's share alone misses. The decision and its record."""
    precision = [1.0 / c.variance for c in counts]
    weights = [p / sum(precision) for p in precision]
    estimate = float(sum(w * c.noisy for w, c in zip(weights, counts)))
    threshold = combined_threshold([(c.noise, w * c.scale) for w, c in zip(weights, counts)],
                                   miss)
    nullable = estimate > threshold
    return nullable, {"counts": {c.by: {**c.to_json(), "weight": round(w, 4)}
                                 for w, c in zip(weights, counts)},
                      "estimate": round(estimate, 1), "threshold": round(threshold, 1),
                      "miss": miss, "nullable": bool(nullable)}


FRACTION_FORM = FORMS.index("1 decimal")  # the forms from here on are fractions, by places


def with_points_places(decision: Decision, points: list[float]) -> Decision:
    """A number's decision with its released ``points``' forms (public, post-processing): a
    float where a point is a fraction (a heap the type step's share of ε missed), at the most
    decimal places of the decision and the points (unrounded where either is)."""
    forms = [int(np.argmax(value_forms(np.array([p]), np.array([False])))) for p in points]
    places = [form - FRACTION_FORM + 1 for form in forms if form >= FRACTION_FORM]
    if decision.kind == TEXT or not places:
        return decision
    more = max(places) > MAX_DECIMALS or (decision.kind == "float" and decision.decimals is None)
    return replace(decision, kind="float", decimals=None if more else max(
        places + ([decision.decimals] if decision.kind == "float" else [])))
