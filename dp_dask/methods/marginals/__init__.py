"""dp_dask's release method: consistent noisy marginals, then rows that match them.

    measure   every 1-way histogram and 2-way table, one Gaussian measurement each: a quarter
              of the budget ρ to the histograms, the rest to the tables, ∝ cells^(1/3); with
              the schema's fine grids, their fine histograms first take ``fine_share`` of ρ
              (:mod:`.plan`, :mod:`.measurements`)
    combine   inverse-variance 1-way estimates; each table shrunk cell by cell towards the
              tables a first-pass tree implies, likely empty cells pulled to zero, and fitted
              to them (dp_dask.postprocess.consistency, dp_dask.postprocess.tree)
              (and each fine histogram projected, bin by bin, onto its consistent 1-way
              marginal: the values ``uniform`` decoding draws within each bin)
    model     a maximum-information spanning tree of the consistent tables (:mod:`.model`)
    estimate  once per release, in one to four tasks: candidate rows drawn down the tree (4 per
              measured row up to ``min_candidates``, the distinct rows of more draws), raked
              towards every consistent table, their weights then fitted to the noisy
              measurements themselves (private-pgm's objective; :mod:`.sampler`)
    sample    per output partition: the candidates resampled and balanced on their weighted
              triples, row updates towards their weighted tables kept while they gain, the
              consistent 1-way counts exactly (dp_dask.postprocess.raking, .reweight, .balance,
              .rowupdate)
              (tuned numbers: :class:`~.config.MarginalsConfig`, docs/tuning.md)

Like PrivSyn (Zhang et al. 2021) it synthesises by row updates rather than from a fitted
density; unlike it, every 2-way table is measured (on Adult, spending budget on a selected subset
measured worse: docs/results-adult.md) unless the schema is too wide for that by a public
threshold: then a DP spanning tree of them (:mod:`.select_pairs`, docs/method.md). Optional
adaptive rounds (:mod:`.adaptive`) measure the marginals a workload needs. Only the
measurements (:mod:`.measurements`, :mod:`.select_pairs`, :mod:`.adaptive`) touch exact counts;
the steps in order are :func:`.synthesizer.fit_pairs`'s.
"""

from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.methods.marginals.measurements import measure, measure_all
from dp_dask.methods.marginals.model import MarginalModel, fit_marginals
from dp_dask.methods.marginals.plan import (
    FINE_SHARE,
    BudgetPlan,
    budget_shares,
    check_neighbours,
    measured_queries,
)
from dp_dask.methods.marginals.sampler import (
    MarginalSampler,
    Start,
    WeightedRows,
    balance_groups,
    distinct_draws,
    one_way_targets,
    raked_start,
    tree_start,
)
from dp_dask.methods.marginals.synthesizer import MarginalSynthesizer

__all__ = [
    "FINE_SHARE", "BudgetPlan", "MarginalModel", "MarginalSampler", "MarginalSynthesizer",
    "MarginalsConfig", "Start", "WeightedRows", "balance_groups", "budget_shares",
    "check_neighbours", "distinct_draws", "fit_marginals", "measure", "measure_all",
    "measured_queries", "one_way_targets", "raked_start", "tree_start",
]
