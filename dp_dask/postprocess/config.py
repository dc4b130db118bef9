"""The tuned numbers of the post-processing passes, one frozen config per pass with the shipped
values as defaults (the measurements behind them: docs/tuning.md, by field name)."""

from __future__ import annotations

from dataclasses import dataclass

from dp_dask.tuning import check_fields


@dataclass(frozen=True)
class ConsistencyConfig:
    """:func:`~dp_dask.postprocess.consistency.consistent_marginals`: the shrinkage of each
    noisy table and its fit to the combined histograms."""

    signal_sigmas: float = 4.0  # a departure beyond this many noise σ is kept whole
    dykstra_sweeps: int = 100  # alternating projections onto the margins and x ≥ 0
    ipf_sweeps: int = 50  # then proportional fitting, making the margins exact

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class RakingConfig:
    """:func:`~dp_dask.postprocess.raking.rake`: when raking the candidates' weights stops."""

    window: int = 5  # passes the gap's fall is measured over
    keep_raking: float = 0.05  # least fall of the gap over ``window`` passes to go on
    max_passes: int = 40  # passes at most

    def __post_init__(self) -> None:
        check_fields(self, positive=("window", "max_passes"))


@dataclass(frozen=True)
class RowUpdateConfig:
    """:func:`~dp_dask.postprocess.rowupdate.update_rows` and ``match_one_way``."""

    update_decay: float = 0.9  # the share of a table's excess moved per sweep decays by this
    max_sweeps: int = 40  # sweeps at most
    keep_sweeping: float = 0.02  # least cut of the total excess for another sweep
    rate_floor: float = 0.5  # the share moved never decays below this
    duplicate_share: float = 0.5  # of the moved rows, the share replaced by copies
    settled_share: float = 1e-3  # a table with at most this share of rows in excess is skipped
    swap_rounds: int = 10  # rounds of swapping out rows whose 1-way move is impossible
    copy_bound: float = 1.25  # the copy-rate bound one pass picks copy candidates by

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class BalanceConfig:
    """:func:`~dp_dask.postprocess.balance.balanced_resample` and ``settle_values``."""

    proposals_per_row: float = 3.0  # swap proposals per output row
    max_reads: int = 10**8  # code reads of the swaps per partition, at most
    moves_per_row: float = 10.0  # value-move proposals per row and round
    squared_rounds: int = 1  # value-move rounds on the squared deviation
    absolute_rounds: int = 2  # then rounds on the Poisson absolute error
    pair_slack: float = 10.0  # rows a 2-way cell may stray at no cost in the absolute rounds
    max_move_reads: int = 125 * 10**7  # code reads of the value moves per partition, at most

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ReweightConfig:
    """:func:`~dp_dask.postprocess.reweight.fit_weights` and ``iterations_for``."""

    fit_iterations: int = 50  # mirror-descent steps at the reference precision, and at least
    reference_precision: float = 0.0165  # Σ 1/σ² of ε = 1's measurements (δ = 1e-9)
    max_fit_iterations: int = 400  # steps at most
    sufficient_decrease: float = 0.5  # Armijo: the share of the promised decrease to keep a step
    step_growth: float = 1.5  # the next step tries this times the last
    converged: float = 1e-12  # a promised decrease below this share of the loss stops the fit

    def __post_init__(self) -> None:
        check_fields(self, positive=("reference_precision",))
