"""DPView's tuned numbers (:class:`DPViewConfig`), its constants and the view type."""

from __future__ import annotations

from dataclasses import dataclass

from dp_dask.tuning import check_fields

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
