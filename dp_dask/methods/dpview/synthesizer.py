"""DPView's and DPView+'s synthesizers: the layout, the privacy plan and the release record."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.cluster import compute
from dp_dask.data.counts import view_count_graph
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.methods.dpview.config import (
    AUTO,
    DEFAULT_TRIES,
    DEFAULT_VIEW_SIZE,
    METHOD,
    METHOD_PLUS,
    VIEW_L1_SENSITIVITY,
    DPViewConfig,
    View,
)
from dp_dask.methods.dpview.layout import (
    ViewLayout,
    check_tries,
    check_view_cells,
    check_view_size,
    guideline_view_size,
    upper_views,
    view_layout,
)
from dp_dask.methods.dpview.measure import split_views
from dp_dask.methods.dpview.model import DPViewModel, dpview
from dp_dask.methods.marginals import check_neighbours
from dp_dask.privacy.accounting import BASIC_COMPOSITION
from dp_dask.privacy.labels import NEIGHBOURING
from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.split import BudgetPart, BudgetSplit
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed
from dp_dask.tuning import as_config, changed


class DPViewSynthesizer(Synthesizer):
    """DPView (``--method dpview``): pure ε-DP, δ = 0 (``delta`` is
    stored as given, never spent).

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
        if view_size != AUTO:  # the schema's parts are checked at the fit
            check_view_size(view_size)
        self.view_size = view_size
        check_tries(tries)
        self.tries = tries
        if (not isinstance(layout_seed, int | np.integer) or isinstance(layout_seed, bool)
                or layout_seed < 0):
            raise ValueError(f"layout_seed must be an integer >= 0, got {layout_seed!r}")
        self.layout_seed = layout_seed
        self.neighbours = check_neighbours(neighbours)
        if rows is not None and (isinstance(rows, bool) or int(rows) != rows or rows < 1):
            raise ValueError(f"rows must be a positive integer (a public n), got {rows!r}")
        self.rows = rows
        # learned by each fit (_prepare, then _resolve_layout once n is known)
        self.rows_noise_: dict[str, Any] | None = None  # the noisy n's record, when one is drawn
        self.chosen_view_size_: int | None = None
        self.layout_: ViewLayout | None = None

    def _prepare(self) -> None:
        """The layout where public inputs alone fix it (a view size, or n for the guideline),
        drawn before any data is read, so that bad values fail first; else none until n is
        known (:meth:`_resolve_layout`)."""
        self.rows_noise_, self.chosen_view_size_, self.layout_ = None, None, None
        if self.view_size != AUTO:
            self._set_layout(self.view_size)
        elif self.rows is not None:
            self._set_layout(self._guideline(self.rows, self.epsilon))

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
        self.layout_ = view_layout(self.schema.sizes, view_size, self.tries, self.layout_seed)
        self.chosen_view_size_ = int(view_size)

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
        return (upper_views(self.layout_, self.schema.sizes, self.config) if self.plus
                else ((), []))

    @property
    def measured_views(self) -> tuple[View, ...]:
        """Every view measured, in one pass: the chain, then the kept upper views."""
        return self.layout_.views + tuple(v for v in self.upper[0] if v is not None)

    def _privacy_plan(self) -> dict[str, Any]:
        if self.layout_ is not None:  # else the guideline picks the layout once n is known
            check_view_cells(self.measured_views, self.schema)  # before the views are counted
        return {"epsilon": self.epsilon, "delta": 0.0, "mechanism": "laplace",
                "accountant": BASIC_COMPOSITION, "rho": None}

    def _ledger_plan(self) -> dict[str, Any]:
        """The plan as replace-one-row DP: under add/remove every view's Laplace noise meets a
        replacement moving its table by 2 in L1, twice the sensitivity, hence 2ε (and the noisy
        n, Δ = 1 under add/remove, 0 under replacement, is covered by it)."""
        plan = self._privacy_plan()
        return plan if self.rows_public else {**plan, "epsilon": 2 * plan["epsilon"]}

    def _budget_split(self, shares: np.ndarray) -> BudgetSplit:
        """The split: the noisy n's share where the guideline needed it, then the views,
        view i at epsilon_v·P_i."""
        noisy_n = self.view_size == AUTO and self.rows is None and not self.rows_public
        rows = (BudgetPart("noisy n for the guideline", share=self.config.rows_share,
                           epsilon=self.epsilon * self.config.rows_share, mechanism="Laplace",
                           norm="L1", sensitivity=1.0),) if noisy_n else ()
        upper = sum(v is not None for v in self.upper[0])
        views = BudgetPart(
            "views", count=len(shares), symbol="epsilon_v", epsilon=self.views_epsilon,
            mechanism="Laplace", norm="L1", sensitivity=float(self.sensitivity),
            rule="view i gets epsilon_v*P_i with P_i = s_i^(1/3)/sum_j s_j^(1/3) (s = domain "
                 "size)", shares=tuple(float(p) for p in shares),
            parts=(BudgetPart("views of the chain", count=len(self.layout_.views)),
                   BudgetPart("upper cross views", count=upper)) if self.plus else ())
        return BudgetSplit((*rows, views), BASIC_COMPOSITION, self.epsilon, 0.0)

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        self._resolve_layout(ddf)
        check_view_cells(self.measured_views, self.schema)
        return view_count_graph(ddf, self.schema, self.measured_views)

    def _rows_counted(self, exact: np.ndarray) -> int:
        return int(split_views(exact, self.measured_views, self.schema.sizes)[0].sum())

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> DPViewModel:
        plan = self._privacy_plan()
        layout = self.layout_
        upper, dropped = self.upper
        rng = None if self.noise_seed is None else np.random.default_rng(self.noise_seed)
        with timed(self.timings_, "noise_views"):
            tables, details = dpview(split_views(exact, self.measured_views, self.schema.sizes),
                                     layout.views, n_rows if self.rows_public else None,
                                     self.views_epsilon, upper=upper,
                                     sensitivity=self.sensitivity, sampler=self.noise_sampler,
                                     rng=rng, config=self.config)
        if not self.rows_public:  # the exact n stops here: only its noisy estimate goes on
            n_rows = metadata["n_rows"] = details["n_rows"]
        rows_noise = {"noisy_rows_for_guideline": self.rows_noise_} if self.rows_noise_ else {}
        tuned = {"config": fields} if (fields := changed(self.config)) else {}
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
                           self.chosen_view_size_, "rows": self.rows, "tries": self.tries,
                           "layout_seed": self.layout_seed, "neighbours": self.neighbours,
                           **tuned},
            "privacy": self._privacy_record(
                delta=0.0, mechanism="laplace", accountant=plan["accountant"], rho=None,
                neighbouring=NEIGHBOURING[self.neighbours],
                as_replace_one=not self.rows_public, **rows_noise,
                budget_shares=details["budget_shares"],
                laplace_scales=details["laplace_scales"],
                split=self._budget_split(np.asarray(details["budget_shares"])),
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
    (package docstring). Same parameters as DPView."""

    name: ClassVar[str] = METHOD_PLUS
    plus: ClassVar[bool] = True
