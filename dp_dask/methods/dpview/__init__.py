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
"""

from dp_dask.methods.dpview.config import DPViewConfig
from dp_dask.methods.dpview.consistency import (
    as_blocks,
    inconsistency,
    make_consistent,
    non_negative,
    post_process,
    propagate,
    upper_links,
)
from dp_dask.methods.dpview.layout import (
    chain_links,
    cross_view,
    domain,
    guideline_view_size,
    sorted_base_views,
    upper_views,
    view_layout,
)
from dp_dask.methods.dpview.measure import budget_shares, laplace_scales, measure_views
from dp_dask.methods.dpview.model import DPViewModel, integer_table
from dp_dask.methods.dpview.sampler import DPViewSampler, link_views, paired_cells
from dp_dask.methods.dpview.synthesizer import DPViewPlusSynthesizer, DPViewSynthesizer
from dp_dask.postprocess.rowupdate import round_rows  # re-exported: the tests import it here

__all__ = [
    "DPViewConfig", "DPViewModel", "DPViewPlusSynthesizer", "DPViewSampler", "DPViewSynthesizer",
    "as_blocks", "budget_shares", "chain_links", "cross_view", "domain", "guideline_view_size",
    "inconsistency", "integer_table", "laplace_scales", "link_views", "make_consistent",
    "measure_views", "non_negative", "paired_cells", "post_process", "propagate", "round_rows",
    "sorted_base_views", "upper_links", "upper_views", "view_layout",
]
