"""DPView (Lin, Yu & Huang): noisy views laid out from domain sizes alone, made consistent, linked.

    layout    views from the public domain sizes only (:func:`view_layout`): base views are a
              random partition of the m attributes into ⌈m/d⌉ groups, sorted by ascending
              domain size (Algorithm 1, :func:`sorted_base_views`); cross view cᵢ takes the
              ⌊d/2⌋ largest-domain attributes of bᵢ and the ⌈d/2⌉ smallest of bᵢ₊₁
              (Algorithm 2; for odd d the extra attribute is bᵢ₊₁'s); of ``tries`` seeded
              layouts, the one of least total domain D = Σ ∏ sizes whose cross views are no
              larger than its largest base view
    view size d "auto" by default: Section IV-C7's guideline (:func:`guideline_view_size`), the
              largest d whose views are all θ-useful (n/sᵢ ≥ θ·bᵢ, θ = 4), from the public
              domain sizes, n (public, or a noisy count) and ε; d = 5 (the paper's for Adult)
              or any d ≥ 2 on request
    measure   every view's contingency table + Laplace (:func:`measure_views`), view i with
              ε·Pᵢ, Pᵢ = sᵢ^(1/3) / Σⱼ sⱼ^(1/3) (sᵢ its domain size: minimises the total noise
              variance Σ sᵢ·2bᵢ²); basic composition gives (ε, 0)-DP
    post      totals set to n, then rounds of weighted consistency on the attributes linked
              views share and non-negativity (:func:`post_process`); integers by largest
              remainder, propagated along the chain b₁ → c₁ → b₂ → … (:func:`propagate`)
    link      per output partition: the tables scaled to its rows by the same propagation, then
              records built view by view along the chain, each view's new attributes dealt out
              within the blocks of the attributes it shares with the records so far
              (:func:`link_views`, numpy only)

Neighbouring datasets (``neighbours``): "replace" (dp_dask's notion, default: one row replaced,
n public) gives a view's table L1 sensitivity 2 (one cell −1, one +1): Laplace bᵢ = 2/(ε·Pᵢ) per
cell. "add_remove" (the paper's: one row added or removed, n private) gives sensitivity 1, so
bᵢ = 1/(ε·Pᵢ); n is then estimated from the noisy view totals (inverse variance:
:func:`~dp_dask.postprocess.consistency.noisy_total`), and the ledger counts the release at
its replace-one ε, 2ε (docs/privacy.md). Only :func:`measure_views` (and, for the guideline
without a public n, one row count) reads exact counts.

Readings of the paper (its text was not at hand when this was written; each is the most
defensible reading of what the review reported, and says why):

* Algorithm 1's sort: the base views, once drawn, are ordered by ascending domain size (ties by
  their attributes), each view's attributes ascending. So each cross view joins the largest
  attributes of the smaller view to the smallest of the next larger one, which keeps it near
  the size of its neighbours: on Adult's 9 categorical attributes (seed 0, d = 5) the kept D
  falls from 39,678 (unsorted) to 21,528.
* Algorithm 2's odd d: cᵢ takes ⌊d/2⌋ attributes of bᵢ and ⌈d/2⌉ of bᵢ₊₁, the extra one from
  bᵢ₊₁'s smallest (the cheaper side). Ties between equal domain sizes go to the lower index.
* Section IV-C7's guideline: the signal-to-noise per cell n/(sᵢ·bᵢ) is what the public inputs
  say about a view's noise; PrivBayes's θ-usefulness (θ = 4), the paper's baseline, is its
  accepted threshold. So d is the largest whose layout keeps every measured view θ-useful,
  else 2. n: the ``rows`` given (public), else counted (replace one row: n is public), else a
  noisy count with ``DPViewConfig.rows_share`` = 1 % of ε (add/remove). At ε = 1 on Adult's 9
  categorical attributes (replace one row) it picks d = 3, where a prototype measured the least
  2-way error (d = 2, 3, 4, 5: 20.7, 16.3, 21.7, 33–34); on all 15 attributes (48,842 rows,
  add/remove) d = 2 at ε ≤ 0.5, 3 at ε = 1 and 2 (docs/results-adult.md, DPView in the
  paper's setting).

Choices of this implementation:

* ``tries`` x = 200 layouts (seeded, ``layout_seed``). More tries cost no privacy and little
  time (milliseconds), and find smaller layouts; at ε = 1 (3 seeds, unsorted base views) x = 200
  lowered Q2's mean error over the best 95 % from 36.8 to 27.8 against x = 20
  (docs/results-adult.md). When no layout passes the cross-view rule, the least-D layout of all
  is kept and the metadata says so.
* Base views are ``numpy.array_split`` of a permutation: sizes differ by at most one.
* Consistency: each link's shared attributes S, in order, one round at a time; non-negativity is
  the paper's iteration (zero the negatives, take their mass q evenly from the o positive
  cells, repeat), whose fixed point is the Euclidean projection onto {x ≥ 0, Σx = n} that
  :func:`dp_dask.copula.model.project_to_total` computes directly. Rounds stop when linked
  views' shared marginals differ by at most ``DPViewConfig.consistency_tol`` counts per cell,
  or after ``max_rounds``; :func:`propagate` then makes the integer tables agree exactly.
* Linking: propagation makes every block of shared values hold as many records as the view's
  table has in it, so any matching within a block reproduces the view exactly; the paper's
  greedy "most frequent first, random among ties" then reduces to a uniform random matching.

DPView+ (``dpview+``) adds an upper cross view uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ per cross view
(:func:`upper_views`): the pairs of values that the chain never holds together. As in the
paper, the upper views take part in consistency (each linked to bᵢ on uᵢ ∩ bᵢ and to bᵢ₊₁ on
uᵢ ∩ bᵢ₊₁, :func:`upper_links`) and are left out of normalisation (the projection onto
{x ≥ 0, Σx = n} in the rounds); after the rounds each is made non-negative integers summing to n
(projection, largest remainder) for the linking. Their use as "match filters", chosen here:

* Measured with the chain views in the same single pass, sharing ε by the same sᵢ^(1/3) rule
  over all views. The layout search is DPView's (on base and cross views only), so DPView and
  DPView+ of the same seed and d share their chain (the guideline may pick a smaller d for
  DPView+, whose upper views take part of ε).
* Used when bᵢ₊₁ is linked, within each block s of S = cᵢ ∩ bᵢ₊₁: the records carry values l of
  L = bᵢ \\ cᵢ, the block's cells values r of R = bᵢ₊₁ \\ cᵢ. A plan over (s, l, r) is fitted
  by iterative proportional fitting to three margins: the records' (s, l) counts, the cells'
  (s, r) counts and uᵢ over (l, r) (:func:`pairing_plan`, ``DPViewConfig.plan_rounds`` = 10
  rounds or until its (s, r) margins are within ``plan_tol``: docs/tuning.md). It is the
  maximum-entropy table with those margins (no 3-way term), so with exact tables it reproduces
  uᵢ; with noisy ones it is the closest that the blocks allow. Only the (s, l) that hold
  records get a row (at most the partition's rows), and the sums over s or l are sparse
  products, so a round costs (rows of the plan)·|R|. Then
  (:func:`paired_cells`) each (s, l) asks for cells by the plan's row made integer by largest
  remainder; asks a cell can meet are met in random order and the rest take the block's cells
  left over at random — so every block still gets exactly its cells and
  the chain views are reproduced exactly, as in DPView.
* Bounded memory: a plan has at most |S|·|uᵢ| float64 cells per output partition (and at most
  the partition's rows times |R|); a uᵢ whose |S|·|uᵢ| exceeds ``max_plan_cells`` (4 M, 32 MB)
  is dropped before any data is read (not measured: its budget goes to the other views), as is
  a uᵢ with nothing to pair (bᵢ or bᵢ₊₁ inside cᵢ); the metadata lists each drop and why.
  The upper tables count towards the MAX_TABLE_CELLS refusal like the other views.
* Per output partition: uᵢ scaled to the partition's rows by largest remainder, like the chain;
  seeded by the partition's seed only, so the rows do not depend on the number of workers.

Size: DPView's layout, measurement, consistency, linking and DPView+'s pairing, with the
readings of the paper above; to be split in issue 55 (methods as a package).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed
from scipy.sparse import csr_matrix

from dp_dask.checks import MAX_TABLE_CELLS, WARN_TABLE_CELLS, CostError, DpDaskWarning
from dp_dask.cluster import compute
from dp_dask.copula.model import project_to_total
from dp_dask.data.counts import view_count_graph
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot, round_to_total
from dp_dask.methods.marginals import check_neighbours
from dp_dask.model_io import ModelError, model_schema, read_model_arrays, write_model_files
from dp_dask.postprocess.consistency import noisy_total, ratio_or_zero
from dp_dask.postprocess.rowupdate import round_rows
from dp_dask.privacy.accounting import BASIC_COMPOSITION
from dp_dask.privacy.labels import NEIGHBOURING
from dp_dask.privacy.noise import laplace_noise
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed
from dp_dask.tuning import as_config, changed, check_fields

MODEL_FORMAT = 1
METHOD = "dpview"
METHOD_PLUS = "dpview+"
PAPER_VIEW_SIZE = 5  # the paper's fixed d for Adult
AUTO = "auto"  # view_size chosen by the guideline (:func:`guideline_view_size`)
DEFAULT_VIEW_SIZE = AUTO
DEFAULT_TRIES = 200  # measured against 20 on Adult: docs/results-adult.md, DPView
# A view table's L1 sensitivity under each notion of neighbours (privacy.labels.NEIGHBOURING):
# replacing a row moves one cell −1 and one +1; adding or removing one moves one cell by 1.
VIEW_L1_SENSITIVITY = {"replace": 2, "add_remove": 1}
SHARE_EXPONENT = 1.0 / 3.0


@dataclass(frozen=True)
class DPViewConfig:
    """DPView's tuned numbers, the shipped values as defaults (docs/tuning.md, by field name):
    ``config`` of :class:`DPViewSynthesizer`. Never changes what is charged: each is a choice
    of public inputs (the guideline), of the budget's split or of post-processing."""

    usefulness: float = 4.0  # θ of the guideline: PrivBayes's θ-usefulness (Zhang et al. 2014)
    rows_share: float = 0.01  # of ε, for a noisy n when the guideline needs n and n is private
    consistency_tol: float = 0.01  # counts per shared cell; propagation removes the rest
    max_rounds: int = 100  # consistency rounds at most
    max_plan_cells: int = 4_000_000  # a DPView+ pairing plan (float64) per link and partition
    plan_rounds: int = 10  # iterative proportional fitting of a pairing plan
    plan_tol: float = 0.01  # counts: the plan's largest miss of its block margins
    plan_floor: float = 1e-6  # counts added to every cell of uᵢ, so that every margin can be met

    def __post_init__(self) -> None:
        check_fields(self, positive=("rows_share",))
        if self.rows_share >= 1:
            raise ValueError(f"DPViewConfig.rows_share must be below 1, not {self.rows_share!r}")


View = tuple[int, ...]


# --- layout: public inputs only -----------------------------------------------------------------

def domain(view: View, sizes: np.ndarray) -> int:
    """A view's domain size: the product of its attributes' sizes."""
    return math.prod(int(sizes[a]) for a in view)


def cross_view(left: View, right: View, sizes: np.ndarray, view_size: int) -> View:
    """The ⌊d/2⌋ largest-domain attributes of ``left`` and the ⌈d/2⌉ smallest of ``right``."""
    half = view_size // 2
    largest = sorted(left, key=lambda a: (-int(sizes[a]), a))[:half]
    smallest = sorted(right, key=lambda a: (int(sizes[a]), a))[: view_size - half]
    return tuple(sorted(largest + smallest))


def sorted_base_views(groups: list[np.ndarray], sizes: np.ndarray) -> tuple[View, ...]:
    """Algorithm 1's order: base views by ascending domain size (ties: attribute indices), each
    view's attributes ascending. The chain then links views of like size, so a cross view (the
    largest attributes of the smaller bᵢ, the smallest of the larger bᵢ₊₁) stays near their size.
    """
    views = [tuple(sorted(int(a) for a in group)) for group in groups]
    return tuple(sorted(views, key=lambda v: (domain(v, sizes), v)))


@dataclass(frozen=True)
class ViewLayout:
    """Base views b₁…b_k and cross views c₁…c_{k−1}; ``views`` is the chain b₁, c₁, b₂, …"""

    base: tuple[View, ...]
    cross: tuple[View, ...]
    accepted: bool  # whether its cross views are no larger than its largest base view

    @property
    def views(self) -> tuple[View, ...]:
        chain = [self.base[0]]
        for c, b in zip(self.cross, self.base[1:]):
            chain += [c, b]
        return tuple(chain)

    def to_json(self, schema: Schema) -> dict[str, Any]:
        sizes = schema.sizes
        return {"views": [[schema.names[a] for a in v] for v in self.views],
                "kinds": ["base" if i % 2 == 0 else "cross" for i in range(len(self.views))],
                "domain_sizes": [domain(v, sizes) for v in self.views],
                "total_domain": sum(domain(v, sizes) for v in self.views),
                "cross_rule_met": self.accepted}


def view_layout(sizes: np.ndarray, view_size: int = DEFAULT_VIEW_SIZE,
                tries: int = DEFAULT_TRIES, seed: int = 0) -> ViewLayout:
    """The least-D layout of ``tries`` seeded ones, preferring those meeting the cross-view rule.

    A function of the public domain sizes and the seed only.
    """
    if isinstance(view_size, bool) or int(view_size) != view_size or view_size < 2:
        raise ValueError(f"view_size must be an integer >= 2 (a cross view needs an attribute of "
                         f"each neighbour), got {view_size!r}")
    if isinstance(tries, bool) or int(tries) != tries or tries < 1:
        raise ValueError(f"tries must be an integer >= 1, got {tries!r}")
    sizes = np.asarray(sizes)
    rng = np.random.default_rng(seed)
    groups = math.ceil(len(sizes) / view_size)
    best: tuple[tuple[bool, int], ViewLayout] | None = None
    for _ in range(int(tries)):
        base = sorted_base_views(np.array_split(rng.permutation(len(sizes)), groups), sizes)
        cross = tuple(cross_view(b, c, sizes, int(view_size)) for b, c in zip(base, base[1:]))
        accepted = not cross or (max(domain(v, sizes) for v in cross)
                                 <= max(domain(v, sizes) for v in base))
        key = (not accepted, sum(domain(v, sizes) for v in base + cross))
        if best is None or key < best[0]:
            best = key, ViewLayout(base, cross, accepted)
    return best[1]


def usefulness(views: tuple[View, ...], sizes: np.ndarray, n_rows: float, epsilon: float,
               sensitivity: int) -> float:
    """The least θ-usefulness of the views: a view's expected count per cell n/sᵢ over its
    Laplace scale bᵢ = Δ/(ε·Pᵢ) (PrivBayes's θ, per view). Public inputs and n only."""
    domains = np.array([domain(v, sizes) for v in views], dtype=np.float64)
    scales = sensitivity / (epsilon * budget_shares(domains))
    return float((n_rows / domains / scales).min())


def guideline_view_size(sizes: np.ndarray, n_rows: float, epsilon: float, sensitivity: int, *,
                        tries: int = DEFAULT_TRIES, seed: int = 0, plus: bool = False,
                        config: DPViewConfig = DPViewConfig()) -> int:
    """Section IV-C7's guideline, as read here: the largest d whose layout keeps every view
    θ-useful (:func:`usefulness` ≥ θ = ``config.usefulness``, 4 as PrivBayes), else d = 2.

    Why this reading: the guideline trades the noise per cell, which grows with a view's domain,
    against the dependence a larger view keeps; with no count of the data but n, the per-cell
    signal-to-noise ratio n/(sᵢ·bᵢ) is what public inputs say about the first, and PrivBayes'
    θ-usefulness (the paper's baseline) is that ratio's accepted threshold. Each d's layout is
    :func:`view_layout`'s (with the upper views for DPView+, which share ε), so the rule sees
    the views that would be measured. A function of public sizes, n, ε, Δ, tries and seed.
    """
    best = 2
    for d in range(2, len(sizes) + 1):
        layout = view_layout(sizes, d, tries, seed)
        views = layout.views
        if plus:
            views += tuple(v for v in upper_views(layout, sizes, config)[0] if v is not None)
        if usefulness(views, sizes, n_rows, epsilon, sensitivity) >= config.usefulness:
            best = d
    return best


def chain_links(views: tuple[View, ...]) -> list[tuple[int, int, View]]:
    """(previous view, view, shared attributes) along the chain: view t shares with all views
    before it only attributes of view t − 1 (what linking and propagation rely on)."""
    links = []
    seen: set[int] = set(views[0])
    for t in range(1, len(views)):
        shared = tuple(a for a in views[t] if a in seen)
        if not set(shared) <= set(views[t - 1]):
            raise ValueError(f"view {t} {views[t]} shares attributes with views before "
                             f"{views[t - 1]}: not a chain")
        links.append((t - 1, t, shared))
        seen |= set(views[t])
    return links


def upper_view(left: View, cross: View, right: View) -> View:
    """uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ, sorted."""
    return tuple(sorted((set(left) | set(right)) - set(cross)))


def upper_views(layout: ViewLayout, sizes: np.ndarray, config: DPViewConfig = DPViewConfig()
                ) -> tuple[tuple[View | None, ...], list[dict[str, Any]]]:
    """DPView+'s upper cross views uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ, one per cross view, None where dropped;
    and why each dropped one was. Public inputs only.

    uᵢ pairs, within each block of the attributes S = cᵢ ∩ bᵢ₊₁, the records' values of
    bᵢ \\ cᵢ with bᵢ₊₁'s values of bᵢ₊₁ \\ cᵢ. Dropped (not measured: no budget) when one side is
    empty (nothing to pair) or its pairing plan, |S|·|uᵢ| cells, exceeds
    ``config.max_plan_cells``.
    """
    kept: list[View | None] = []
    dropped = []
    for i, (left, cross, right) in enumerate(zip(layout.base, layout.cross, layout.base[1:])):
        view = upper_view(left, cross, right)
        shared = tuple(a for a in right if a in cross)
        plan = domain(shared, sizes) * domain(view, sizes)
        reason = ("nothing to pair: one base view lies inside the cross view"
                  if not set(view) & set(left) or not set(view) & set(right) else
                  f"pairing plan of {plan:,} cells > {config.max_plan_cells:,}"
                  if plan > config.max_plan_cells else None)
        kept.append(None if reason else view)
        if reason:
            dropped.append({"link": i, "view": list(view), "reason": reason})
    return tuple(kept), dropped


def check_view_cells(views: tuple[View, ...], schema: Schema) -> int:
    """The views' total cells; refuse past MAX_TABLE_CELLS, warn past WARN_TABLE_CELLS (every
    counting task holds all view tables; the post-processing is dense on them)."""
    cells = [domain(v, schema.sizes) for v in views]
    total = sum(cells)
    largest = views[int(np.argmax(cells))]
    what = (f"schema {schema.name!r}: DPView's views hold {total:,} cells (the largest, "
            f"{[schema.names[a] for a in largest]}, {max(cells):,})")
    advice = "use a smaller view_size, merge rare categories or use coarser bins"
    if total > MAX_TABLE_CELLS:
        raise CostError(f"{what}; the limit is {MAX_TABLE_CELLS:,}: {advice}")
    if total > WARN_TABLE_CELLS:
        warnings.warn(f"{what}; expect a slow fit ({advice})", DpDaskWarning, stacklevel=2)
    return total


# --- measure: the only step that reads exact counts ---------------------------------------------

def budget_shares(domains: np.ndarray) -> np.ndarray:
    """Pᵢ = sᵢ^(1/3) / Σⱼ sⱼ^(1/3): minimises Σ sᵢ·2bᵢ² with bᵢ ∝ 1/Pᵢ and ΣPᵢ = 1 (Lagrange)."""
    weights = np.asarray(domains, dtype=np.float64) ** SHARE_EXPONENT
    return weights / weights.sum()


def laplace_scales(epsilon: float, shares: np.ndarray, sensitivity: int = 2) -> np.ndarray:
    """bᵢ = Δ/(ε·Pᵢ): view i's measurement is (ε·Pᵢ)-DP."""
    return sensitivity / (epsilon * np.asarray(shares))


def split_views(vector: np.ndarray, views: tuple[View, ...], sizes: np.ndarray
                ) -> list[np.ndarray]:
    """The concatenated view vector of dp_dask.data.counts.view_counts_from_codes as view tables."""
    shapes = [tuple(int(sizes[a]) for a in v) for v in views]
    bounds = np.cumsum([math.prod(s) for s in shapes])[:-1]
    return [part.reshape(shape) for part, shape in zip(np.split(vector, bounds), shapes)]


def measure_views(exact: list[np.ndarray], scales: np.ndarray, *, sensitivity: int = 2,
                  sampler: str = "opendp", rng: np.random.Generator | None = None
                  ) -> list[np.ndarray]:
    """Each exact view table + Laplace of its scale: one measurement per view."""
    return [laplace_noise(table.ravel(), float(scale), sensitivity=sensitivity,
                          sampler=sampler, rng=rng).reshape(table.shape)
            for table, scale in zip(exact, scales)]


# --- post-processing (numpy) --------------------------------------------------------------------

def _block_axes(view: View, shared: View) -> list[int]:
    return ([view.index(a) for a in shared]
            + [i for i, a in enumerate(view) if a not in shared])


def as_blocks(table: np.ndarray, view: View, shared: View) -> np.ndarray:
    """The table as a (shared cells, other cells) matrix: ``shared``'s axes first, in its order."""
    moved = np.transpose(table, _block_axes(view, shared))
    return moved.reshape(math.prod(moved.shape[: len(shared)]), -1)


def from_blocks(blocks: np.ndarray, view: View, shared: View, shape: tuple[int, ...]
                ) -> np.ndarray:
    """Inverse of :func:`as_blocks`."""
    axes = _block_axes(view, shared)
    return blocks.reshape([shape[i] for i in axes]).transpose(np.argsort(axes))


def upper_links(views: tuple[View, ...], upper: tuple[View | None, ...]
                ) -> list[tuple[int, int, View]]:
    """(base view, upper view, shared attributes) for DPView+'s consistency: the kept upper views
    follow the chain in ``views``; uᵢ shares bᵢ \\ cᵢ with bᵢ and bᵢ₊₁ \\ cᵢ with bᵢ₊₁."""
    links = []
    position = len(views) - sum(v is not None for v in upper)
    for i, view in enumerate(upper):
        if view is None:
            continue
        for base in (2 * i, 2 * i + 2):
            links.append((base, position, tuple(a for a in view if a in views[base])))
        position += 1
    return links


def make_consistent(tables: list[np.ndarray], views: tuple[View, ...], shares: np.ndarray,
                    links: list[tuple[int, int, View]] | None = None) -> list[np.ndarray]:
    """One round: linked views' marginals on their shared attributes S replaced by their
    inverse-variance average, the correction spread evenly over each block's ξ cells.

    View i's marginal on S sums ξᵢ cells of Laplace variance 2bᵢ² ∝ 1/Pᵢ², so its weight is
    wᵢ ∝ Pᵢ²/ξᵢ. Totals are kept when both tables have the same total. ``links`` default to the
    chain's (:func:`chain_links`); DPView+ adds :func:`upper_links`.
    """
    tables = [t.astype(np.float64, copy=True) for t in tables]
    for i, j, shared in chain_links(views) if links is None else links:
        blocks = [as_blocks(tables[v], views[v], shared) for v in (i, j)]
        margins = [b.sum(axis=1) for b in blocks]
        weights = [shares[v] ** 2 / b.shape[1] for v, b in zip((i, j), blocks)]
        target = (weights[0] * margins[0] + weights[1] * margins[1]) / sum(weights)
        for v, b, margin in zip((i, j), blocks, margins):
            b = b + ((target - margin) / b.shape[1])[:, None]
            tables[v] = from_blocks(b, views[v], shared, tables[v].shape)
    return tables


def non_negative(table: np.ndarray, total: float) -> np.ndarray:
    """Cells ≥ 0 summing to ``total``: the limit of the paper's iteration (module docstring)."""
    return project_to_total(table, total)


def inconsistency(tables: list[np.ndarray], views: tuple[View, ...],
                  links: list[tuple[int, int, View]] | None = None) -> float:
    """The largest difference between linked views' marginals on what they share."""
    return max((float(np.abs(as_blocks(tables[i], views[i], s).sum(axis=1)
                             - as_blocks(tables[j], views[j], s).sum(axis=1)).max())
                for i, j, s in (chain_links(views) if links is None else links)), default=0.0)


def post_process(noisy: list[np.ndarray], views: tuple[View, ...], shares: np.ndarray,
                 n_rows: int, upper: tuple[View | None, ...] = (),
                 config: DPViewConfig = DPViewConfig()) -> tuple[list[np.ndarray], int, float]:
    """Tables summing to n, consistent (within ``config.consistency_tol``, at most
    ``config.max_rounds`` rounds) and the chain's ≥ 0; with the rounds run and the remaining
    inconsistency.

    ``views`` is the chain followed by DPView+'s kept upper views (``upper``: one per cross
    view, None where dropped). The upper views take part in every consistency round (linked to
    both their base views, :func:`upper_links`) but not in the normalisation (the projection
    onto {x ≥ 0, Σx = n}), which only the chain's tables get, as in the paper.
    """
    chain = len(views) - sum(v is not None for v in upper)
    links = chain_links(views[:chain]) + upper_links(views, upper)
    tables = [t + (n_rows - t.sum()) / t.size for t in noisy]
    gap = math.inf
    rounds = 0
    while rounds < config.max_rounds and gap > config.consistency_tol:
        tables = make_consistent(tables, views, shares, links)
        tables = [non_negative(t, n_rows) for t in tables[:chain]] + tables[chain:]
        gap = inconsistency(tables, views, links)
        rounds += 1
    return tables, rounds, gap


def propagate(tables: list[np.ndarray], views: tuple[View, ...], total: int
              ) -> list[np.ndarray]:
    """Integer tables summing to ``total``, exactly consistent along the chain: b₁ rounded to the
    total, then each view's blocks rounded to the previous view's integer marginal on the
    attributes they share. Idempotent on consistent integer tables of that total."""
    out = [round_to_total(tables[0].ravel(), total).reshape(tables[0].shape)]
    for previous, t, shared in chain_links(views):
        targets = as_blocks(out[previous], views[previous], shared).sum(axis=1)
        blocks = round_rows(as_blocks(tables[t], views[t], shared), targets)
        out.append(from_blocks(blocks, views[t], shared, tables[t].shape))
    return out


# --- link: synthesis ----------------------------------------------------------------------------

def _indicator(groups: np.ndarray, size: int) -> csr_matrix:
    """(size, len(groups)) 0/1 matrix: row g sums the rows of a plan whose group is g."""
    return csr_matrix((np.ones(len(groups)), (groups, np.arange(len(groups)))),
                      shape=(size, len(groups)))


def pairing_plan(block: np.ndarray, left: np.ndarray, counts: np.ndarray, right: np.ndarray,
                 upper: np.ndarray, config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """A plan (pairs, R) over the (block, left value) pairs that hold records — ``block``,
    ``left`` and ``counts`` (their records) per pair — whose rows sum to ``counts``, whose
    block sums are ``right`` (blocks, R), the counts of the blocks' new cells, and whose sums
    over blocks are as close to ``upper`` (L, R) as those allow.

    Iterative proportional fitting of the three margins, ending on the rows. Only pairs that
    hold records are kept (at most the partition's rows), and sums over pairs are sparse
    products (scipy), so the plan costs (pairs)·R cells, not |S|·|uᵢ|. ``config.plan_rounds``
    rounds at most, or until the block sums miss by ``config.plan_tol``. Cells of ``upper`` get
    ``config.plan_floor`` so that a (block, value) that uᵢ says nothing about can still be
    paired (uᵢ and the records disagree only through noise and rounding).
    """
    target = upper.astype(np.float64) + config.plan_floor
    by_block, by_left = _indicator(block, len(right)), _indicator(left, len(upper))
    plan = np.ones((len(block), right.shape[1]))
    for _ in range(config.plan_rounds):
        plan *= ratio_or_zero(target, by_left @ plan)[left]
        plan *= ratio_or_zero(right, by_block @ plan)[block]
        plan *= ratio_or_zero(counts, plan.sum(axis=1))[:, None]
        if np.abs(by_block @ plan - right).max() <= config.plan_tol:
            break
    return plan


def _rank_in_groups(sorted_keys: np.ndarray) -> np.ndarray:
    """Each element's position within its run of equal keys (``sorted_keys`` sorted)."""
    return np.arange(len(sorted_keys)) - np.searchsorted(sorted_keys, sorted_keys, side="left")


def paired_cells(keys: np.ndarray, left: np.ndarray, blocks: np.ndarray, upper: np.ndarray,
                 rng: np.random.Generator, config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """DPView+'s matching: each record's column of ``blocks`` (blocks, R), the new cell it gets.

    Every block b gives its ``blocks[b]`` cells to its records (``keys == b``) as in
    :func:`link_views`, so the view is reproduced exactly; which record gets which cell follows
    ``upper`` (L, R), the table of the records' left values (``left``) against the new cells,
    through :func:`pairing_plan`. The plan's rows are made integer by largest remainder (each
    (block, left value) asks for as many cells as it has records); asks that a cell can meet
    are met, in random order, and the records left over take the block's cells left over at
    random. Numpy only, O(rows log rows + pairs·R) per round of the plan.
    """
    rows, width = len(keys), blocks.shape[1]
    occupied = np.flatnonzero(blocks.sum(axis=1))
    block = np.searchsorted(occupied, keys)  # the occupied blocks, renumbered 0..k-1
    supply = blocks[occupied]
    pairs, pair = np.unique(block * len(upper) + left, return_inverse=True)
    counts = np.bincount(pair, minlength=len(pairs))
    plan = pairing_plan(pairs // len(upper), pairs % len(upper), counts, supply, upper, config)
    asks = round_rows(plan, counts)
    by_pair = np.lexsort((rng.random(rows), pair))
    wanted = np.empty(rows, dtype=np.int64)
    wanted[by_pair] = np.repeat(np.tile(np.arange(width), len(asks)), asks.ravel())
    group = block * width + wanted  # (block, asked cell)
    by_group = np.lexsort((rng.random(rows), group))
    met = _rank_in_groups(group[by_group]) < supply.ravel()[group[by_group]]
    cells = np.empty(rows, dtype=np.int64)
    cells[by_group[met]] = wanted[by_group[met]]
    spare = supply.ravel() - np.minimum(np.bincount(group, minlength=supply.size),
                                        supply.ravel())
    unmet = by_group[~met]
    unmet = unmet[np.lexsort((rng.random(len(unmet)), block[unmet]))]
    cells[unmet] = np.repeat(np.arange(supply.size), spare) % width  # block by block
    return cells


def link_views(tables: list[np.ndarray], views: tuple[View, ...], sizes: np.ndarray,
               rng: np.random.Generator,
               filters: dict[int, tuple[View, np.ndarray]] | None = None,
               config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """Codes (rows, m) whose every view's table equals ``tables`` (chain-consistent integers).

    View by view along the chain: the records are sorted by their values of the attributes the
    view shares with them (random order within a block), and the view's cells, repeated by their
    counts in the same block order, deal out its new attributes. ``filters`` (DPView+) maps a
    view's chain position to an upper view and its integer table: there the cells of each block
    go to its records by :func:`paired_cells` instead. Numpy only: O(rows log rows) per view, no
    Python object per row.
    """
    rows = int(tables[0].sum())
    codes = np.zeros((rows, len(sizes)), dtype=np.int64)
    present: set[int] = set()
    for t, (view, table) in enumerate(zip(views, tables)):
        shared = tuple(a for a in view if a in present)
        new = tuple(a for a in view if a not in present)
        blocks = as_blocks(table, view, shared)
        keys = (np.ravel_multi_index(tuple(codes[:, a] for a in shared),
                                     tuple(int(sizes[a]) for a in shared))
                if shared else np.zeros(rows, dtype=np.intp))
        if not np.array_equal(np.bincount(keys, minlength=len(blocks)), blocks.sum(axis=1)):
            raise ValueError(f"view {view} does not agree with the views before it on {shared}")
        if not new:  # a base view inside the cross view before it: nothing left to deal
            continue
        if filters and t in filters:
            upper, upper_table = filters[t]
            old = tuple(a for a in upper if a in present)
            if tuple(a for a in upper if a not in present) != new or not old:
                raise ValueError(f"upper view {upper} does not pair {new} with attributes "
                                 f"already linked")
            left = np.ravel_multi_index(tuple(codes[:, a] for a in old),
                                        tuple(int(sizes[a]) for a in old))
            cells = paired_cells(keys, left, blocks, as_blocks(upper_table, upper, old), rng,
                                 config)
            rows_of = np.arange(rows)
        else:
            rows_of = np.lexsort((rng.random(rows), keys))
            cells = np.repeat(np.tile(np.arange(blocks.shape[1]), len(blocks)), blocks.ravel())
        for a, values in zip(new, np.unravel_index(cells, tuple(int(sizes[a]) for a in new))):
            codes[rows_of, a] = values
        present |= set(new)
    return codes[rng.permutation(rows)]


# --- the method ---------------------------------------------------------------------------------

def integer_table(table: np.ndarray, total: int) -> np.ndarray:
    """A table as non-negative integers summing to ``total`` (projection, largest remainder)."""
    return round_to_total(project_to_total(table, total).ravel(), total).reshape(table.shape)


def dpview(exact: list[np.ndarray], views: tuple[View, ...], n_rows: int | None,
           epsilon: float, *, upper: tuple[View | None, ...] = (), sensitivity: int = 2,
           sampler: str = "opendp", rng: np.random.Generator | None = None,
           config: DPViewConfig = DPViewConfig()) -> tuple[list[np.ndarray], dict[str, Any]]:
    """DPView on the exact tables of the chain ``views``, then of the kept ``upper`` views
    (DPView+): measure all, post-process them together (:func:`post_process`), integerise.
    ``n_rows`` None (add/remove neighbours): n estimated from the noisy tables.

    Returns the integer tables (chain order, then upper views), n and what the metadata
    records.
    """
    shares = budget_shares([t.size for t in exact])
    scales = laplace_scales(epsilon, shares, sensitivity)
    noisy = measure_views(exact, scales, sensitivity=sensitivity, sampler=sampler,
                          rng=rng)  # exact counts end here
    if n_rows is None:
        n_rows = noisy_total(noisy, scales)  # Laplace: variance 2b² per cell
    chain = len(noisy) - sum(v is not None for v in upper)
    every = views + tuple(v for v in upper if v is not None)
    tables, rounds, gap = post_process(noisy, every, shares, n_rows, upper, config)
    details = {"budget_shares": shares.tolist(), "laplace_scales": scales.tolist(),
               "consistency_rounds": rounds, "inconsistency_before_rounding": gap,
               "n_rows": n_rows}
    return (propagate(tables[:chain], views, n_rows)
            + [integer_table(t, n_rows) for t in tables[chain:]]), details


@dataclass(frozen=True)
class DPViewModel:
    """The chain of views and their post-processed integer tables (summing to n); for DPView+
    also an upper view per cross view (None where dropped) and its integer table."""

    schema: Schema
    n_rows: int
    views: tuple[View, ...]
    tables: tuple[np.ndarray, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    method: str = METHOD
    upper: tuple[View | None, ...] = ()
    upper_tables: tuple[np.ndarray | None, ...] = ()
    config: DPViewConfig = DPViewConfig()  # its pairing plans' numbers are the sampler's

    def sampler(self) -> DPViewSampler:
        return DPViewSampler(self.schema, self.views, self.tables, self.upper, self.upper_tables,
                             self.config)

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """``<path>/model.npz`` (view tables) and ``<path>/model.json`` (views, schema)."""
        document = {"format": MODEL_FORMAT, "method": self.method, "n_rows": self.n_rows,
                    "views": [list(v) for v in self.views],
                    "upper": [None if v is None else list(v) for v in self.upper],
                    "schema": self.schema.to_json(), "metadata": self.metadata}
        arrays = {f"view_{i}": t for i, t in enumerate(self.tables)}
        arrays |= {f"upper_{i}": t for i, t in enumerate(self.upper_tables) if t is not None}
        return write_model_files(path, document, arrays, storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> DPViewModel:
        """A saved model, checked: format, schema hash, a chain of views covering the schema,
        table shapes, finite non-negative integer counts summing to n (else ModelError)."""
        schema = model_schema(path, document, MODEL_FORMAT)
        try:
            views = tuple(tuple(int(a) for a in v) for v in document["views"])
            n_rows = int(document["n_rows"])
            if (not views or any(not v or len(set(v)) < len(v) or min(v) < 0
                                 or max(v) >= schema.m for v in views)
                    or set().union(*views) != set(range(schema.m))):
                raise ValueError("views must cover the schema's attributes")
            chain_links(views)
            upper = tuple(None if v is None else tuple(int(a) for a in v)
                          for v in document.get("upper", []))
            if upper and len(upper) != len(views) // 2:
                raise ValueError("one upper view (or null) per cross view")
            if any(v is not None and v != upper_view(*views[2 * i: 2 * i + 3])
                   for i, v in enumerate(upper)):
                raise ValueError("an upper view must be (b_i | b_i+1) - c_i")
            config = as_config(DPViewConfig, document["metadata"]["parameters"].get("config"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"model {path}/model.json: invalid views ({exc})") from None
        shapes = {f"view_{i}": v for i, v in enumerate(views)}
        shapes |= {f"upper_{i}": v for i, v in enumerate(upper) if v is not None}
        arrays = read_model_arrays(path, {key: tuple(int(schema.sizes[a]) for a in v)
                                          for key, v in shapes.items()}, storage_options)
        for key, table in arrays.items():
            if (not np.issubdtype(table.dtype, np.integer) or table.min() < 0
                    or int(table.sum()) != n_rows):
                raise ModelError(f"model {path}/model.npz: {key} is not non-negative "
                                 f"integer counts summing to n = {n_rows}: fit again")
        return cls(schema, n_rows, views, tuple(arrays[f"view_{i}"] for i in range(len(views))),
                   document["metadata"], method=document["method"], upper=upper,
                   upper_tables=tuple(None if v is None else arrays[f"upper_{i}"]
                                      for i, v in enumerate(upper)), config=config)


@dataclass(frozen=True)
class DPViewSampler:
    """Draws one output partition: the tables scaled to its rows, then linked."""

    schema: Schema
    views: tuple[View, ...]
    tables: tuple[np.ndarray, ...]
    upper: tuple[View | None, ...] = ()
    upper_tables: tuple[np.ndarray | None, ...] = ()
    config: DPViewConfig = DPViewConfig()

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition."""
        rng = np.random.default_rng(seed)
        scaled = propagate(list(self.tables), self.views, rows)
        # upper view i filters the linking of base view i + 1, at chain position 2i + 2
        filters = {2 * i + 2: (view, round_to_total(table.ravel(), rows).reshape(table.shape))
                   for i, (view, table) in enumerate(zip(self.upper, self.upper_tables))
                   if view is not None}
        codes = link_views(scaled, self.views, self.schema.sizes, rng, filters, self.config)
        return one_hot(codes, self.schema), codes.astype(np.int16)


class DPViewSynthesizer(Synthesizer):
    """DPView (``--method dpview``): pure ε-DP, δ = 0 (``delta`` is ignored).

    Extra parameters: ``view_size`` d, "auto" (default: Section IV-C7's guideline,
    :func:`guideline_view_size`) or an integer ≥ 2 (5 is the paper's fixed choice for Adult);
    ``rows``, a public row count for the guideline (default None: under replace-one neighbours
    n is public and counted exactly; under add/remove a noisy count spends ``rows_share`` of ε);
    ``tries`` x (layouts drawn, default 200), ``layout_seed`` (default 0); ``neighbours``,
    "replace" (one row replaced, n public, Δ = 2 per view: default) or "add_remove" (one row
    added or removed, n private, Δ = 1 per view: the paper's notion; the ledger counts it at its
    replace-one ε, 2ε, docs/privacy.md); ``config``, a :class:`DPViewConfig` or a dict of some
    of its fields (default: the shipped values; a release records the fields that differ). The
    layout depends on these, n and the public schema.
    """

    name: ClassVar[str] = METHOD
    plus: ClassVar[bool] = False  # DPView+: upper cross views as match filters
    config_class = DPViewConfig

    def __init__(self, schema: Schema | str | Path, *, view_size: int | str = DEFAULT_VIEW_SIZE,
                 rows: int | None = None, tries: int = DEFAULT_TRIES, layout_seed: int = 0,
                 neighbours: str = "replace",
                 config: DPViewConfig | dict[str, Any] | None = None, **common: Any) -> None:
        super().__init__(schema, **common)
        self.config = as_config(DPViewConfig, config)
        self.delta = 0.0
        self.view_size = view_size
        self.tries = tries
        if (not isinstance(layout_seed, int | np.integer) or isinstance(layout_seed, bool)
                or layout_seed < 0):
            raise ValueError(f"layout_seed must be an integer >= 0, got {layout_seed!r}")
        self.layout_seed = layout_seed
        self.neighbours = check_neighbours(neighbours)
        if rows is not None and (isinstance(rows, bool) or int(rows) != rows or rows < 1):
            raise ValueError(f"rows must be a positive integer (a public n), got {rows!r}")
        self.rows = rows
        self.rows_noise_: dict[str, Any] | None = None  # the noisy n's record, when one is drawn
        self.chosen_view_size: int | None = None
        self.layout: ViewLayout | None = None
        if view_size != AUTO:  # public inputs only, so drawn here: bad values fail at once
            self._set_layout(view_size)
        else:
            view_layout(self.schema.sizes, PAPER_VIEW_SIZE, tries, layout_seed)  # checks tries
            if rows is not None:
                self._set_layout(self._guideline(rows, self.epsilon))

    @property
    def sensitivity(self) -> int:
        return VIEW_L1_SENSITIVITY[self.neighbours]

    @property
    def rows_public(self) -> bool:
        return self.neighbours == "replace"

    @property
    def views_epsilon(self) -> float:
        """ε of the views: all of it, less ``config.rows_share`` when a noisy n was (or will
        be) drawn."""
        noisy_rows = self.view_size == AUTO and self.rows is None and not self.rows_public
        return self.epsilon * (1 - self.config.rows_share) if noisy_rows else self.epsilon

    def _guideline(self, n_rows: float, epsilon: float) -> int:
        return guideline_view_size(self.schema.sizes, n_rows, epsilon, self.sensitivity,
                                   tries=self.tries, seed=self.layout_seed, plus=self.plus,
                                   config=self.config)

    def _set_layout(self, view_size: int) -> None:
        self.layout = view_layout(self.schema.sizes, view_size, self.tries, self.layout_seed)
        self.chosen_view_size = int(view_size)

    def _resolve_layout(self, ddf: dd.DataFrame) -> None:
        """The guideline's layout once n is known: n counted exactly (one pass) and, when n is
        private, noised on the driver with ε·``config.rows_share`` (Laplace, Δ = 1) before any
        use."""
        if self.view_size != AUTO or self.rows is not None:
            return
        (counts,) = compute(view_count_graph(ddf, self.schema, ((0,),)),
                            show_progress=self.show_progress)
        n_rows = float(counts.sum())
        if not self.rows_public:
            epsilon = self.epsilon * self.config.rows_share
            rng = (None if self.noise_seed is None
                   else np.random.default_rng([int(self.noise_seed), 1]))
            n_rows = float(laplace_noise(np.array([int(n_rows)]), 1.0 / epsilon, sensitivity=1,
                                         sampler=self.noise_sampler, rng=rng)[0])
            self.rows_noise_ = {"epsilon": epsilon, "laplace_scale": 1.0 / epsilon,
                                "noisy_rows": n_rows}
        self._set_layout(self._guideline(max(n_rows, 1.0), self.views_epsilon))

    @property
    def upper(self) -> tuple[tuple[View | None, ...], list[dict[str, Any]]]:
        """DPView+'s upper views (None where dropped) and the drops; none for DPView."""
        return (upper_views(self.layout, self.schema.sizes, self.config) if self.plus
                else ((), []))

    @property
    def measured_views(self) -> tuple[View, ...]:
        """Every view measured, in one pass: the chain, then the kept upper views."""
        return self.layout.views + tuple(v for v in self.upper[0] if v is not None)

    def _privacy_plan(self) -> dict[str, Any]:
        plan = {"epsilon": self.epsilon, "delta": 0.0, "mechanism": "laplace",
                "accountant": BASIC_COMPOSITION, "rho": None}
        if self.layout is None:  # the guideline picks d once n is known
            return plan | {"budget_split": f"views of the size Section IV-C7's guideline picks "
                           f"from the public domain sizes, n and epsilon{self._rows_split()}"}
        check_view_cells(self.measured_views, self.schema)  # before the views are counted
        shares = budget_shares([domain(v, self.schema.sizes) for v in self.measured_views])
        return plan | {"budget_split": self._budget_split(shares)}

    def _ledger_plan(self) -> dict[str, Any]:
        """The plan as replace-one-row DP: under add/remove every view's Laplace noise meets a
        replacement moving its table by 2 in L1, twice the sensitivity, hence 2ε (and the noisy
        n, Δ = 1 under add/remove, 0 under replacement, is covered by it)."""
        plan = self._privacy_plan()
        return plan if self.rows_public else {**plan, "epsilon": 2 * plan["epsilon"]}

    def _rows_split(self) -> str:
        if self.view_size == AUTO and self.rows is None and not self.rows_public:
            return (f"; first {self.config.rows_share:g} of epsilon on a noisy n (Laplace, L1 "
                    "sensitivity 1) for the guideline, the rest on the views")
        return ""

    def _budget_split(self, shares: np.ndarray) -> str:
        parts = ", ".join(f"{p:.4g}" for p in shares)
        upper = sum(v is not None for v in self.upper[0])
        what = f" (the chain, then {upper} upper cross views)" if self.plus else ""
        return (f"{len(shares)} views{what} (Laplace, L1 sensitivity {self.sensitivity} each), "
                f"view i gets epsilon_v*P_i with P_i = s_i^(1/3)/sum_j s_j^(1/3) (s = domain "
                f"size): P = [{parts}], epsilon_v = {self.views_epsilon:g}{self._rows_split()};"
                f" basic composition gives ({self.epsilon:g}, 0)-DP")

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        self._resolve_layout(ddf)
        check_view_cells(self.measured_views, self.schema)
        return view_count_graph(ddf, self.schema, self.measured_views)

    def _rows_counted(self, exact: np.ndarray) -> int:
        return int(split_views(exact, self.measured_views, self.schema.sizes)[0].sum())

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> DPViewModel:
        plan = self._privacy_plan()
        layout = self.layout
        upper, dropped = self.upper
        rng = None if self.noise_seed is None else np.random.default_rng(self.noise_seed)
        with timed(self.timings_, "noise_views"):
            tables, details = dpview(split_views(exact, self.measured_views, self.schema.sizes),
                                     layout.views, n_rows if self.rows_public else None,
                                     self.views_epsilon, upper=upper,
                                     sensitivity=self.sensitivity, sampler=self.noise_sampler,
                                     rng=rng, config=self.config)
        as_replace_one = {}
        if not self.rows_public:  # the exact n stops here: only its noisy estimate goes on
            n_rows = metadata["n_rows"] = details["n_rows"]
            as_replace_one = {"replace_one_row": {"epsilon": self._ledger_plan()["epsilon"],
                                                  "rho": None}}
        rows_noise = {"noisy_rows_for_guideline": self.rows_noise_} if self.rows_noise_ else {}
        tuned = {"config": changed(self.config)} if changed(self.config) else {}
        kept = iter(tables[len(layout.views):])
        upper_tables = tuple(None if v is None else next(kept) for v in upper)
        plus = {"upper_views": [None if v is None else [self.schema.names[a] for a in v]
                                for v in upper],
                "upper_dropped": dropped} if self.plus else {}
        metadata |= {
            "method": f"{self.name}: noisy views from domain sizes, consistency, linking"
                      f"{' filtered by upper cross views' if self.plus else ''} "
                      "(Lin, Yu & Huang)",
            "parameters": {"view_size": self.view_size, "chosen_view_size":
                           self.chosen_view_size, "rows": self.rows, "tries": self.tries,
                           "layout_seed": self.layout_seed, "neighbours": self.neighbours,
                           **tuned},
            "privacy": self._privacy_record(
                delta=0.0, mechanism="laplace", accountant=plan["accountant"], rho=None,
                neighbouring=NEIGHBOURING[self.neighbours], **as_replace_one, **rows_noise,
                budget_shares=details["budget_shares"],
                laplace_scales=details["laplace_scales"], budget_split=plan["budget_split"],
                post_processing="totals set to n; weighted consistency on shared attributes "
                f"{'(upper views included) ' if self.plus else ''}and projection of the "
                "chain's tables onto {x >= 0, sum x = n}, alternated; largest-remainder "
                "integers propagated along the chain of views"),
            "model": {"method": self.name, "layout": layout.to_json(self.schema), **plus,
                      "consistency_rounds": details["consistency_rounds"],
                      "inconsistency_before_rounding": details["inconsistency_before_rounding"]},
        }
        return DPViewModel(self.schema, n_rows, layout.views,
                           tuple(tables[: len(layout.views)]), metadata, method=self.name,
                           upper=upper, upper_tables=upper_tables, config=self.config)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> DPViewModel:
        return DPViewModel.from_files(path, document, storage_options)


class DPViewPlusSynthesizer(DPViewSynthesizer):
    """DPView+ (``--method dpview+``): DPView whose linking of each base view bᵢ₊₁ follows the
    noisy upper cross view uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ, measured in the same pass and budget split
    (module docstring). Same parameters as DPView."""

    name: ClassVar[str] = METHOD_PLUS
    plus: ClassVar[bool] = True
