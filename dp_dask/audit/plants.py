"""Planted bugs: the audit must fail on each (tests, and ``dp-dask audit --plant``).

Each is a context manager that patches dp_dask's code at runtime, for the audit only, and the
scenario it is audited on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pandas as pd


def _patch(module: str, name: str, value: Any) -> contextlib.AbstractContextManager[Any]:
    return mock.patch(f"{module}.{name}", value)


@contextlib.contextmanager
def sigma_halved() -> Iterator[None]:
    """The marginals' Gaussian measurements with half the σ their charge was computed for."""
    from dp_dask.methods.marginals import measurements

    calibrated = measurements.gaussian_sigma
    with _patch("dp_dask.methods.marginals.measurements", "gaussian_sigma",
                lambda *args, **kwargs: calibrated(*args, **kwargs) / 2):
        yield


@contextlib.contextmanager
def sensitivity_undercounted() -> Iterator[None]:
    """The marginals' tables calibrated to half their true L2 sensitivity."""
    from dp_dask.methods.marginals import measurements

    true = measurements.table_sensitivity
    with _patch("dp_dask.methods.marginals.measurements", "table_sensitivity",
                lambda *args, **kwargs: true(*args, **kwargs) / 2):
        yield


@contextlib.contextmanager
def mle_order_restored() -> Iterator[None]:
    """DPCopula-MLE's (and -Hybrid's) positional steps on the input's own row order (finding 1):
    the uniformly random row order undone."""
    from dp_dask.methods import dpcopula_hybrid, dpcopula_mle

    with contextlib.ExitStack() as stack:
        for module in (dpcopula_mle, dpcopula_hybrid):
            stack.enter_context(_patch(module.__name__, "random_row_order",
                                       lambda ddf, seed: ddf))
        yield


@contextlib.contextmanager
def data_dependent_bin() -> Iterator[None]:
    """The schema draft's numeric bins taken from the private values themselves (the non-DP
    public-sample path, fed the private data): its edges follow the data's range."""
    from dp_dask.data import draft as drafting

    def from_the_data(draft: drafting.Draft, source: pd.DataFrame, kinds: dict[str, str],
                      **_: Any) -> None:
        specs = {}
        for column in list(draft.todo):
            specs[column], _why = drafting._from_public_values(column, kinds[column],
                                                              source[column], 1)
            draft.todo.pop(column)
        draft.schema["attributes"] = [specs.get(a["name"], a) for a in draft.schema["attributes"]]

    with _patch("dp_dask.data.draft_dp", "draft_under_dp", from_the_data):
        yield


# plant → (its context manager, the scenario it is audited on)
PLANTS: dict[str, tuple[Callable[[], contextlib.AbstractContextManager[None]], str]] = {
    "sigma-halved": (sigma_halved, "marginals"),
    "sensitivity-undercounted": (sensitivity_undercounted, "marginals"),
    "mle-order-restored": (mle_order_restored, "dpcopula-mle"),
    "data-dependent-bin": (data_dependent_bin, "schema-draft"),
}
