"""DPView's fit on the exact view tables (measure, post-process, integerise) and its model,
saved and loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dp_dask.copula.model import project_to_total
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.tables import round_to_total
from dp_dask.methods.dpview.config import METHOD, MODEL_FORMAT, DPViewConfig, View
from dp_dask.methods.dpview.consistency import post_process, propagate
from dp_dask.methods.dpview.layout import chain_links, upper_view
from dp_dask.methods.dpview.measure import budget_shares, laplace_scales, measure_views
from dp_dask.methods.dpview.sampler import DPViewSampler
from dp_dask.model_io import ModelError, model_schema, read_model_arrays, write_model_files
from dp_dask.postprocess.consistency import noisy_total
from dp_dask.tuning import as_config


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
