"""The marginals method's tuned numbers, one frozen dataclass (issue 55 item 2).

Every field's default is the value chosen on public data (UCI Adult, generated tables,
nycflights13); docs/tuning.md gives, under the field's name, the measurements that chose it. Set
them from Python (``Synthesizer.create("marginals", schema, config={"max_estimates": 2})`` or a
:class:`MarginalsConfig`), the CLI (``--method-options '{"config": {...}}'``) or a job's YAML
(``method_options: {config: {...}}``). The post-processing passes take their own configs from
it (``consistency``, ``raking``, ``row_updates``, ``balance``, ``reweight``: postprocess.config,
each set as a dict of some of its fields). A release records the fields that differ from their
defaults (``config`` in its metadata and model); one with the defaults records none, so its
files stay as they were. Never tune them on the data being released: that would leak it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dp_dask.postprocess.config import (
    BalanceConfig,
    ConsistencyConfig,
    RakingConfig,
    ReweightConfig,
    RowUpdateConfig,
)
from dp_dask.tuning import as_config, check_fields

CLIQUES = ("auto", "pairs", "joint")
# The post-processing passes' configs, by MarginalsConfig field.
PASSES = {"consistency": ConsistencyConfig, "raking": RakingConfig,
          "row_updates": RowUpdateConfig, "balance": BalanceConfig, "reweight": ReweightConfig}


@dataclass(frozen=True)
class MarginalsConfig:
    """The marginals method's tuned numbers (docs/tuning.md, by field name)."""

    # the budget (plan.budget_shares, plan.BudgetPlan)
    cells_exponent: float = 1.0 / 3.0  # ρ_t ∝ cells^cells_exponent within histograms and tables
    one_way_share: float = 0.25  # the 1-way histograms' share of the coarse ρ
    tree_one_way_share: float = 0.4  # theirs in a tree plan (topped up after the choice)
    # a unit-shaped release's (unit_fit, MarginalSynthesizer._fit_unit_shaped): of the
    # measurements' ρ
    unit_share: float = 0.2  # the unit model's (the rest: the row model's)
    lag_share: float = 0.1  # the lag-1 table's, where unit_lag asks for one
    # which tables (select_pairs)
    tree_above: float = 0.5  # the all-pairs noise level above which a tree is measured
    selection_share: float = 0.2  # the tree selection's share of the coarse ρ
    refine_share: float = 1.0 / 3.0 - 0.2  # the refinement's
    refine_rounds: int = 2  # tables chosen against the tree
    # the adaptive rounds (adaptive)
    select_share: float = 0.1  # of each round's (and refinement round's) ρ, the selection's
    rounds_per_attribute: float = 1.0  # the default rounds per attribute (at least one)
    max_cells: int = 10_000  # a candidate marginal's cells at most
    max_triples: int = 500  # the default workload's triples at most (else every pair)
    max_triple_cells: int = 2_000_000  # and their cells in all
    estimate_rows: int = 100_000  # the rounds' estimate's candidate rows at most
    refit_iterations: int = 20  # mirror-descent steps of each round's refit
    # the sampler (sampler.MarginalSampler)
    empty_within_sigmas: float = 2.0  # no row moved into a cell this many σ near zero
    move_partitions: int = 4  # value moves only in releases of at most this many partitions
    max_estimates: int = 4  # independent estimates a release's partitions share, at most
    candidates_per_row: int = 4  # an estimate's candidates per measured row
    min_candidates: int = 2**17  # up to this many (or the partitions' rows, if more)
    max_draws_per_row: int = 16  # the tree's draws per candidate, at most
    unsettled_draws_per_row: int = 4  # the same without value moves
    unbalanced_candidates_per_row: int = 2  # candidates per row of an unbalanced resample
    # the dense joint (joint.py; its counts, cliques.py)
    # "auto": pairs or the dense joint by the public rule (choice.py); "pairs"; "joint": the
    # dense joint wherever it fits
    cliques: str = "auto"
    pairs_three_way_bias: float = 0.003  # the rule's prior: pairs' 3-way error, of n̂/cells
    max_clique_cells: int = 2**20  # the joint's cells at most: its dense tables' memory cap
    joint_iterations: int = 3000  # mirror-descent steps fitting the dense joint (joint.py)
    joint_work: int = 2**33  # cells summed over all its steps, at most (fewer steps beyond)
    # the post-processing passes (postprocess.config), each a config of its own: a dict of
    # some of its fields, e.g. {"row_updates": {"max_sweeps": 10}}
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    raking: RakingConfig = field(default_factory=RakingConfig)
    row_updates: RowUpdateConfig = field(default_factory=RowUpdateConfig)
    balance: BalanceConfig = field(default_factory=BalanceConfig)
    reweight: ReweightConfig = field(default_factory=ReweightConfig)
    # the public rule's weight of Q1 against Q2's and Q3's 1 (choice.py): the joint where its
    # weighted mean error relative to pairs' is below 1
    one_way_weight: float = 2.0

    def __post_init__(self) -> None:
        for name, kind in PASSES.items():  # a dict (from YAML, JSON or a model) as its config
            object.__setattr__(self, name, as_config(kind, getattr(self, name)))
        check_fields(self)
        if self.unit_share + self.lag_share >= 1:
            raise ValueError("MarginalsConfig.unit_share + lag_share must be below 1 (the row "
                             f"model's share is the rest), not {self.unit_share!r} + "
                             f"{self.lag_share!r}")
        if self.cliques not in CLIQUES:
            raise ValueError(f"MarginalsConfig.cliques must be one of {CLIQUES}, "
                             f"not {self.cliques!r}")


DEFAULTS = MarginalsConfig()
