"""The draft's ε over its columns, by what each column's search needs (issue 65).

Every search of the draft under DP (:mod:`.draft_dp`) finds a feature only where the rows that
hold it pass a threshold that is a fixed number of noise scales, and a noise scale is its
sensitivity over its ε: the share of the rows a column's smallest found feature holds is
proportional to 1/(its ε · n̂), n̂ the rows. So each column kind has a *need*: the ε (at one
row, n̂ = 1) at which its search finds the feature a release is judged by, with
:data:`MARGIN_SCALES` noise scales to spare (found with probability 93 %):

* a text column: a level holding :data:`TEXT_LEVEL` of the rows (at weight 1), released by the
  round of :mod:`.draft_text` that thresholds the small levels: with one text column OpenDP's
  Laplace threshold, about ln(1/δ) scales; with several the second of the Gaussian rounds over
  all of them at once, whose need (the text step's, :func:`.draft_text.text_plan`) they share
  equally;
* a numeric column searched for its domain (:mod:`.draft_numeric`): a tail holding
  :data:`TAIL_LEVEL` of the rows in the octave beyond the range, found by the octave step's grow
  threshold (ln(1/(2·GROW_MISS)) scales) at its share of the column's ε (what the point masses
  leave, halved); a number on a public grid the same;
* a timestamp: a year holding :data:`YEAR_LEVEL` of the rows, by the year counts' threshold
  (ln(years/(2·OCTAVE_MISS)) scales) at the column's whole ε.

The needs are per row, so n̂ cancels out of their ratios: each column gets ε in proportion to its
need (:func:`split_epsilon`), which puts every column's smallest found feature at the same
multiple of its target (where the draft's ε exceeds the needs at n̂, every column finds features
smaller than its target alike). Except that beside columns of other kinds the text columns
together get what their need asks at the noisy rows n̂ (:func:`text_total`): a level is
released whole or not at all, so text gains nothing short of its need and nothing beyond it,
where a numeric search's tails shrink by degrees; at least their proportional share and
:data:`TEXT_FLOOR` of the ε, at most their columns' equal share. The rule reads public facts and
DP outputs alone: the columns' kinds (stored, declared public, or decided under DP by the type
step), their number, the text columns' δ, the privacy unit's bound K and n̂. The shares sum to
the ε split (basic composition). Where the text columns' Gaussian rounds and the numeric
searches measured together are both drafted, their ε are one zCDP budget converted once
(:func:`gaussian_together`): each part's ρ grows by the same factor, its ε unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dp_dask.data.draft_numeric import (
    GROW_MISS,
    OCTAVE_MISS,
    SENSITIVITY,
    threshold,
    year_cells,
)
from dp_dask.data.draft_points import POINT_DELTA, POINT_SHARE
from dp_dask.data.draft_text import TextPlan, text_plan
from dp_dask.privacy.selection import zcdp_epsilon, zcdp_rho

TEXT_LEVEL = 0.01  # a text level holding this share of the rows is to be released
TAIL_LEVEL = 0.005  # a numeric tail holding this share of the rows is to be kept, not clamped
YEAR_LEVEL = 0.01  # a year holding this share of the rows is to be found
MARGIN_SCALES = 2  # a feature holding its need passes by this many scales: 1 − e⁻²/2 ≈ 93 %
OCTAVE_SHARE = (1 - POINT_SHARE) / 2  # of a searched column's ε: its octave step's
# The text columns' least share of the ε split, together, while other kinds are drafted too: a
# level is released whole or not at all, so a column of many levels near its threshold loses
# them all at once (105 levels of 1,900 rows among 15 numeric columns at a draft ε of 0.1: all
# released at this floor, none at their need's share), where a numeric search's tails shrink by
# degrees
TEXT_FLOOR = 1 / 4


def text_need(texts: int, delta: float, bound: int = 1) -> float:
    """A text column's need (module docstring): the ε (at one row) at which the text step
    (:func:`.draft_text.text_plan`: one Laplace threshold, or the Gaussian rounds over all text
    columns at once) passes a level of :data:`TEXT_LEVEL` (at weight 1) in the round that
    releases the small levels by :data:`MARGIN_SCALES` scales; with several columns the step's
    need shared equally (one mechanism serves them all)."""
    plan = text_plan(1.0, delta, texts, bound)
    return plan.smallest_level(MARGIN_SCALES) / TEXT_LEVEL / max(texts, 1)


def number_need(bound: int = 1) -> float:
    """A searched numeric column's need: a tail of :data:`TAIL_LEVEL` passing the octave step's
    grow threshold (at :data:`OCTAVE_SHARE` of the column's ε) by :data:`MARGIN_SCALES`
    scales."""
    scale = SENSITIVITY * bound  # at ε = 1
    return (threshold(scale, 1, GROW_MISS) + MARGIN_SCALES * scale) / (TAIL_LEVEL * OCTAVE_SHARE)


def year_need(bound: int = 1) -> float:
    """A timestamp's need: a year of :data:`YEAR_LEVEL` passing the year counts' threshold (at
    the column's whole ε) by :data:`MARGIN_SCALES` scales."""
    scale = SENSITIVITY * bound
    years = len(year_cells()) - 1
    return (threshold(scale, years, OCTAVE_MISS) + MARGIN_SCALES * scale) / YEAR_LEVEL


def column_needs(columns: Sequence[str], texts: Sequence[str], times: Sequence[str] = (), *,
                 delta: float, bound: int = 1) -> dict[str, float]:
    """Each column's need by its kind: ``texts`` text, ``times`` timestamps, the rest numeric
    (searched, or on a public grid)."""
    needs = {"text": text_need(len(texts), delta, bound) if texts else 0.0,
             "timestamp": year_need(bound), "number": number_need(bound)}
    return {c: needs[kind] for c, kind in column_kinds(columns, texts, times).items()}


def column_kinds(columns: Sequence[str], texts: Sequence[str],
                 times: Sequence[str] = ()) -> dict[str, str]:
    """Each column's kind: text, timestamp or number."""
    return {c: "text" if c in texts else "timestamp" if c in times else "number"
            for c in columns}


def split_epsilon(epsilon: float, columns: Sequence[str], texts: Sequence[str],
                  times: Sequence[str] = (), *, delta: float, bound: int = 1,
                  rows: float | None = None) -> dict[str, float]:
    """Each column's ε (basic composition: they sum to ``epsilon``), in proportion to its need
    (:func:`column_needs`; ``delta``: the text columns' δ, ``bound``: the rows K one unit
    contributes at most), except that while columns of other kinds are drafted too the
    ``texts`` together get (:func:`text_total`) what their need asks at the noisy rows n̂
    ``rows``, at least that proportional share and :data:`TEXT_FLOOR` of ``epsilon``, at most
    their columns' equal share (those others share the rest in proportion to their needs)."""
    needs = column_needs(columns, texts, times, delta=delta, bound=bound)
    total = sum(needs.values())
    shares = {c: epsilon * need / total for c, need in needs.items()}
    others = [c for c in columns if c not in texts]
    if not texts or not others:
        return shares
    text = text_total(epsilon, needs, texts, len(columns), rows)
    rest = sum(needs[c] for c in others)
    return {c: text / len(texts) if c in texts else (epsilon - text) * needs[c] / rest
            for c in columns}


def text_total(epsilon: float, needs: dict[str, float], texts: Sequence[str], columns: int,
               rows: float | None) -> float:
    """The text columns' ε together beside other kinds (budget by expected gain: a level is
    released whole or not at all, so a text column gains nothing short of its need and
    nothing beyond it, where a number's search finds more by degrees): their need at the noisy
    rows n̂ ``rows`` (the ε their target passes at), within [their proportional share, at least
    :data:`TEXT_FLOOR` of ``epsilon``; their columns' equal share, if more]; the least, before
    n̂ is drawn (``rows`` None)."""
    text_need_total = sum(needs[c] for c in texts)
    least = max(epsilon * text_need_total / sum(needs.values()), TEXT_FLOOR * epsilon)
    if rows is None:
        return least
    most = max(least, epsilon * len(texts) / columns)
    return min(max(text_need_total / rows, least), most)


def split_record(columns: Sequence[str], texts: Sequence[str], times: Sequence[str] = (), *,
                 delta: float, bound: int = 1) -> dict[str, Any]:
    """The rule and each column's need and kind, for the draft's record (``split.by_need``)."""
    needs = column_needs(columns, texts, times, delta=delta, bound=bound)
    return {"needs": needs,
            "kinds": column_kinds(columns, texts, times),
            "targets": {"text": f"a level of {TEXT_LEVEL:g} of the rows",
                        "number": f"a tail of {TAIL_LEVEL:g} of the rows beyond the range",
                        "timestamp": f"a year of {YEAR_LEVEL:g} of the rows"},
            "rule": "each column's ε in proportion to its need: the ε at which its search "
                    "finds its target at one row with " + f"{MARGIN_SCALES} noise scales to "
                    "spare (n̂ cancels): every column's smallest found feature at the same "
                    "multiple of its target; but while columns of other kinds are drafted too, "
                    "the text columns together what their need asks at the noisy rows n̂, "
                    f"at least that proportional share and {TEXT_FLOOR:.3g} of it, at most "
                    "their columns' equal share (those others share the rest in proportion to "
                    "their needs)"}


def split_note(shares: dict[str, float], kinds: dict[str, str]) -> str:
    """The draft's note on its split: each kind's ε per column and its columns."""
    groups: dict[tuple[str, float], list[str]] = {}
    for column, share in shares.items():
        groups.setdefault((kinds[column], share), []).append(column)
    return ("the draft's ε over the columns, in proportion to what each kind's search needs "
            f"(a text level of {TEXT_LEVEL:g} of the rows, a numeric tail of {TAIL_LEVEL:g}, a "
            f"year of {YEAR_LEVEL:g}; the text columns together what their need asks at the "
            "noisy rows, within bounds: drafted_under_dp.split.by_need): " + "; ".join(
                f"{kind} ε {share:.3g} each: {', '.join(columns)}"
                for (kind, share), columns in groups.items()))


# Of the draft's δ where two or more columns may be searched: the conversion of their searches'
# one zCDP budget (draft_numeric.joint_searches); ln(1/δ) moves the text thresholds little
SEARCH_DELTA = 0.1


def split_delta(delta: float, searched: int, texts: bool) -> tuple[float, float, float]:
    """The draft's δ, from public facts alone (the columns that may be searched, ``searched``,
    and whether any may be text): :data:`SEARCH_DELTA` of it to the numeric searches measured
    together where two or more may be searched, then of the rest :data:`POINT_DELTA` to the
    point masses (equal over the columns that may be searched) and the rest to the text
    columns, all of it to either where the other is not drafted. Returns the searches', the
    text columns' and each searched column's point masses' δ."""
    search = SEARCH_DELTA * delta if searched >= 2 else 0.0
    rest = delta - search
    text = (1 - POINT_DELTA) * rest if searched and texts else rest
    return search, text, (rest - text if texts else rest) / max(searched, 1)


def gaussian_together(text: TextPlan | None, search_rhos: dict[str, float],
                      search_epsilon: float, search_delta: float
                      ) -> tuple[float, dict[str, Any] | None]:
    """The factor f on the ρ of the draft's two Gaussian parts where both are drafted, and its
    record: the text columns' two rounds (``text``, their plan at their own share, with two or
    more text columns) and the numeric searches measured together (``search_rhos``, each
    column's ρ, of their summed ``search_epsilon`` at ``search_delta``). Each converted apart
    spends its ε at its own δ; measured in one zCDP budget, the two ε summed and converted
    once at the two conversions' δ summed (the thresholds' δ stays theirs), ρ grows as ε²
    does: f = ρ(ε₁ + ε₂) / (ρ(ε₁) + ρ(ε₂)) > 1 (1.9 on Adult's nine text and six numeric
    columns at the one command's ε = 1: every σ of both parts divided by √f). Each part's ρ
    times f, so each keeps its share of the one budget; total ε and δ unchanged. Public facts
    only. f = 1 (None) where either part is not drafted or not Gaussian."""
    if text is None or text.first is None or not search_rhos:
        return 1.0, None
    text_epsilon = text.rounds_epsilon
    epsilon = text_epsilon + search_epsilon
    delta = text.conversion_delta + search_delta
    rho = zcdp_rho(epsilon, delta)
    apart = text.rho + sum(search_rhos.values())
    factor = rho / apart
    return factor, {
        "mechanism": "the text columns' Gaussian rounds and the numeric searches' Gaussian "
                     "histograms, one zCDP budget",
        "epsilon": epsilon, "conversion_delta": delta, "rho": rho,
        "check_epsilon": zcdp_epsilon(rho, delta), "factor": factor,
        "parts": {"text levels": {"epsilon": text_epsilon, "rho": text.rho * factor,
                                  "conversion_delta": text.conversion_delta},
                  "numeric searches": {"epsilon": search_epsilon,
                                       "rho": sum(search_rhos.values()) * factor,
                                       "conversion_delta": search_delta}},
        "composition": "every Gaussian measurement of both parts composed adaptively in "
                       "zCDP (the rounds' thresholds approximate zCDP, their δ apart), the "
                       "parts' ε summed and converted once at their conversions' δ summed "
                       "(OpenDP's optimal conversion); each part's ρ, converted apart, times "
                       "the factor"}
