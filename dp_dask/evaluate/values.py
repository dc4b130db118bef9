"""Value metrics of a typed release against the raw data: per column, how close the synthetic
values' distribution is to the real one, and how alike the columns' rank correlations are.

A column is compared when its attribute is numeric or a datetime ``year`` and its release column
holds values (numbers or times, not labels: a ``decode=label`` column, a text column or a CSV's
cells have none). The real values are the raw column parsed by the schema's own rules (the
encoder's :func:`~dp_dask.data.encode.domain_values`); a value the schema counts in a missing or
unknown bin (null, ``missing_values``, outside the bins) has no value and is left out, on both
sides. Times are decimal years (2000.5 is mid-2000), so W1 and the quantiles are in years.

Out of core, one pass over each table (:func:`sketch_graph`): per column the exact count, mean
and variance (Chan's merge), the exact histogram of its values while it has at most
``histogram_values`` distinct ones, and a seeded uniform sample of at most ``sample_rows`` rows
(bottom-k of a uniform key per row, so the same rows for every column). KS, W1 and the quantiles
are computed on the histogram (exact, on every value) when there is one, else on the sample,
which is every row of a table of at most ``sample_rows`` rows; Spearman's ρ always on the sample.
With a 1 M-row sample, the sampling error of KS is about 1.36·√(2/10⁶) ≈ 0.002 (95 %). A task
holds at most ``split_every`` × ``sample_rows`` sampled rows, whatever the table's size.

PRIVACY: the data owner's evaluation, never part of a release. The driver holds raw values (a
sample, value histograms); the outputs are summary statistics, but quantiles and histograms
show raw values: everything written is marked "not differentially private — for the data owner
only", like the (α, β) tables.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import scipy.stats
from dask.delayed import Delayed

from dp_dask.cluster import compute
from dp_dask.data.attribute import Attribute
from dp_dask.data.counts import tree_sum
from dp_dask.data.encode import domain_values
from dp_dask.data.io import TableSource, read_table, write_json
from dp_dask.data.schema import Schema
from dp_dask.evaluate.tables import markdown_table, owner_only_markdown, write_owner_csv
from dp_dask.privacy.labels import OWNER_ONLY
from dp_dask.release import checked_table

SAMPLE_ROWS = 1_000_000
HISTOGRAM_VALUES = 10_000
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
REAL, SYNTHETIC = 0, 1  # spawn keys of the two tables' sampling seeds


def holds_values(attribute: Attribute, dtype: object) -> bool:
    """Whether a release column of ``dtype`` holds the attribute's values (not labels)."""
    if not (attribute.kind == "numeric" or attribute.unit == "year"):
        return False
    if pd.api.types.is_bool_dtype(dtype) or isinstance(dtype, pd.CategoricalDtype):
        return False
    return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_datetime64_any_dtype(dtype)


@dataclass(frozen=True)
class Sketch:
    """One table's value columns reduced over its partitions: what the metrics are drawn from."""

    keys: np.ndarray  # (k,) the sample's uniform keys, the k smallest of all rows'
    sample: np.ndarray  # (k, c) float64 values of the sampled rows, NaN where none
    histograms: tuple[tuple[np.ndarray, np.ndarray] | None, ...]  # distinct values, counts
    moments: np.ndarray  # (c, 3): count, mean, sum of squared deviations
    extremes: np.ndarray  # (c, 2): the least and the greatest value (inf, -inf: none)
    rows: int


def _moments(values: np.ndarray) -> np.ndarray:
    present = ~np.isnan(values)
    count = present.sum(axis=0).astype(np.float64)
    mean = np.divide(np.nansum(values, axis=0), count, out=np.zeros_like(count),
                     where=count > 0)
    squares = np.nansum((values - mean) ** 2, axis=0)
    return np.stack([count, mean, squares], axis=1)


def _extremes(values: np.ndarray) -> np.ndarray:
    present = ~np.isnan(values)
    return np.stack([np.min(values, axis=0, initial=np.inf, where=present),
                     np.max(values, axis=0, initial=-np.inf, where=present)], axis=1)


def _merge_moments(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Chan et al.'s pairwise update: count, mean and squared deviations of two parts."""
    count = a[:, 0] + b[:, 0]
    share = np.divide(b[:, 0], count, out=np.zeros_like(count), where=count > 0)
    delta = b[:, 1] - a[:, 1]
    return np.stack([count, a[:, 1] + delta * share,
                     a[:, 2] + b[:, 2] + delta**2 * a[:, 0] * share], axis=1)


def _histogram(values: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    distinct, counts = np.unique(values[~np.isnan(values)], return_counts=True)
    return (distinct, counts) if len(distinct) <= limit else None


def _bottom(keys: np.ndarray, sample: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    if len(keys) <= limit:
        return keys, sample
    kept = np.argpartition(keys, limit - 1)[:limit]
    return keys[kept], sample[kept]


def sketch_partition(frame: pd.DataFrame, attributes: tuple[Attribute, ...],
                     seed: np.random.SeedSequence, sample_rows: int,
                     histogram_values: int, keep_outside: bool = False) -> Sketch:
    """Chunk step: one partition's values (:func:`domain_values`, with ``keep_outside``),
    summarised."""
    values = np.column_stack([domain_values(frame[a.read_column(frame.columns)], a,
                                            keep_outside=keep_outside)
                              for a in attributes]
                             ).reshape(len(frame), len(attributes))
    keys, sample = _bottom(np.random.default_rng(seed).random(len(frame)), values, sample_rows)
    return Sketch(keys, sample, tuple(_histogram(column, histogram_values) for column in values.T),
                  _moments(values), _extremes(values), len(frame))


def _merge_histograms(parts: list[tuple[np.ndarray, np.ndarray] | None],
                      limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    if any(part is None for part in parts):
        return None
    distinct, inverse = np.unique(np.concatenate([v for v, _ in parts]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([c for _, c in parts]))
    return (distinct, counts.astype(np.int64)) if len(distinct) <= limit else None


def merge_sketches(parts: list[Sketch], sample_rows: int, histogram_values: int) -> Sketch:
    """Combine step: the sketch of the union of the parts' rows."""
    keys, sample = _bottom(np.concatenate([p.keys for p in parts]),
                           np.concatenate([p.sample for p in parts]), sample_rows)
    histograms = tuple(_merge_histograms([p.histograms[j] for p in parts], histogram_values)
                       for j in range(len(parts[0].histograms)))
    moments = functools.reduce(_merge_moments, [p.moments for p in parts])
    extremes = np.stack([np.min([p.extremes[:, 0] for p in parts], axis=0),
                         np.max([p.extremes[:, 1] for p in parts], axis=0)], axis=1)
    return Sketch(keys, sample, histograms, moments, extremes, sum(p.rows for p in parts))


def sketch_graph(ddf: dd.DataFrame, attributes: tuple[Attribute, ...], seed: int, side: int, *,
                 sample_rows: int = SAMPLE_ROWS, histogram_values: int = HISTOGRAM_VALUES,
                 split_every: int = 8, keep_outside: bool = False) -> Delayed:
    """Lazy :class:`Sketch` of a table's value columns (:func:`sketch_parts` of its
    partitions)."""
    columns = list(dict.fromkeys(a.read_column(ddf.columns) for a in attributes))
    # a recombined timestamp: one column, several features
    return sketch_parts(ddf[columns].to_delayed(), attributes, seed, side,
                        sample_rows=sample_rows, histogram_values=histogram_values,
                        split_every=split_every, keep_outside=keep_outside)


def sketch_parts(parts: list[Delayed], attributes: tuple[Attribute, ...], seed: int, side: int,
                 *, sample_rows: int = SAMPLE_ROWS, histogram_values: int = HISTOGRAM_VALUES,
                 split_every: int = 8, keep_outside: bool = False) -> Delayed:
    """Lazy :class:`Sketch` of the value columns of a table's partitions ``parts`` (frames
    holding at least those columns); partition p samples with its own child (``side``, p) of
    ``seed``, so the sample depends on the seed and the partitioning only. ``keep_outside``:
    values beyond the schema's bins are kept (:func:`domain_values`)."""
    chunks = [dask.delayed(sketch_partition)(
        part, attributes, np.random.SeedSequence(seed, spawn_key=(side, p)), sample_rows,
        histogram_values, keep_outside) for p, part in enumerate(parts)]
    return tree_sum(chunks, split_every=split_every,
                    combine=functools.partial(merge_sketches, sample_rows=sample_rows,
                                              histogram_values=histogram_values))


@dataclass(frozen=True)
class Distribution:
    """One column's values with their weights (histogram counts, or 1 per sampled row)."""

    values: np.ndarray
    weights: np.ndarray
    exact: bool  # every value of the column, not a sample of them

    @classmethod
    def of(cls, sketch: Sketch, column: int) -> Distribution:
        histogram = sketch.histograms[column]
        if histogram is not None:
            return cls(histogram[0], histogram[1].astype(np.float64), True)
        values = sketch.sample[:, column]
        values = np.sort(values[~np.isnan(values)])
        return cls(values, np.ones(len(values)), len(sketch.keys) == sketch.rows)


def ks_statistic(u: np.ndarray, v: np.ndarray, u_weights: np.ndarray | None = None,
                 v_weights: np.ndarray | None = None) -> float:
    """Two-sample Kolmogorov–Smirnov statistic, sup |F_u − F_v|, of weighted samples (scipy's
    ``ks_2samp`` takes no weights; unweighted, this is its statistic)."""
    points = np.union1d(u, v)

    def cdf(values: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        weights = np.ones(len(values)) if weights is None else np.asarray(weights)[order]
        below = np.concatenate([[0.0], np.cumsum(weights) / weights.sum()])
        return below[np.searchsorted(values[order], points, side="right")]

    return float(np.max(np.abs(cdf(u, u_weights) - cdf(v, v_weights))))


def weighted_quantiles(values: np.ndarray, weights: np.ndarray,
                       quantiles: tuple[float, ...] = QUANTILES) -> np.ndarray:
    """Quantiles of values repeated by their integer weights, as ``np.quantile`` (linear)
    gives them for the repeated array, without building it."""
    order = np.argsort(values, kind="stable")
    values, ends = values[order], np.cumsum(np.asarray(weights)[order])
    position = (ends[-1] - 1) * np.asarray(quantiles)
    below = np.floor(position)
    low = values[np.searchsorted(ends, below, side="right")]
    high = values[np.searchsorted(ends, np.minimum(below + 1, ends[-1] - 1), side="right")]
    return low + (position - below) * (high - low)


def common_bins(distributions: list[Distribution], tails: float) -> np.ndarray:
    """Bin edges shared by ``distributions`` (one at least holding values), over the central
    1 − 2·``tails`` of each (0: their whole range) so that a far tail does not flatten the
    rest: one bin per integer where every value is an integer and the span at most 100, else
    50 equal bins."""
    present = [d for d in distributions if len(d.values)]
    ends = np.array([weighted_quantiles(d.values, d.weights, (tails, 1 - tails))
                     for d in present])
    low, high = ends[:, 0].min(), ends[:, 1].max()
    if all(np.array_equal(d.values, np.round(d.values)) for d in present) and high - low <= 100:
        return np.arange(np.floor(low) - 0.5, np.ceil(high) + 1.5)
    return np.linspace(low, high if high > low else low + 1, 51)


def value_histogram(real: Distribution, synthetic: Distribution, tails: float) -> pd.DataFrame:
    """The share of each side's values in each of their :func:`common_bins` (``low`` to
    ``high``): one row per bin; a value beyond the bins is in none."""
    edges = common_bins([real, synthetic], tails)
    shares = {side: np.histogram(d.values, edges, weights=d.weights)[0] / max(d.weights.sum(), 1)
              for side, d in (("real", real), ("synthetic", synthetic))}
    return pd.DataFrame({"low": edges[:-1], "high": edges[1:]} | shares)


def _column_metrics(real: Distribution, synthetic: Distribution,
                    moments: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    (n_real, mean_real, squares_real), (n_synthetic, mean_synthetic, squares_synthetic) = moments
    metrics = {"real values": int(n_real), "synthetic values": int(n_synthetic)}
    if not (len(real.values) and len(synthetic.values)):
        return metrics | {"KS": np.nan, "W1": np.nan}
    metrics |= {
        "KS": ks_statistic(real.values, synthetic.values, real.weights, synthetic.weights),
        "W1": float(scipy.stats.wasserstein_distance(real.values, synthetic.values,
                                                     real.weights, synthetic.weights)),
        "mean real": mean_real, "mean synthetic": mean_synthetic,
        "std real": float(np.sqrt(squares_real / n_real)),
        "std synthetic": float(np.sqrt(squares_synthetic / n_synthetic))}
    for side, distribution in (("real", real), ("synthetic", synthetic)):
        for q, value in zip(QUANTILES, weighted_quantiles(distribution.values,
                                                          distribution.weights)):
            metrics[f"q{q:.0%} {side}"] = float(value)
    return metrics


def spearman(sketch: Sketch, names: list[str]) -> pd.DataFrame:
    """Spearman's ρ of every pair of value columns on the sample (pairwise complete rows)."""
    return pd.DataFrame(sketch.sample, columns=names).corr(method="spearman")


@dataclass(frozen=True)
class ValueComparison:
    """Per value column metrics and distributions, and the Spearman matrices (≥ 2 columns)."""

    metrics: pd.DataFrame  # one row per column: see :func:`compare_values`
    real: dict[str, Distribution]
    synthetic: dict[str, Distribution]
    spearman_real: pd.DataFrame
    spearman_synthetic: pd.DataFrame
    sample: str  # how the sample was drawn
    rows: tuple[int, int]  # rows of the real and of the synthetic table
    real_range: dict[str, tuple[float, float]]  # each column's least and greatest real value

    @property
    def spearman_max_difference(self) -> float:
        """max |ρ_real − ρ_synthetic| over pairs of distinct columns (NaN for one column)."""
        difference = (self.spearman_real - self.spearman_synthetic).abs().to_numpy()
        off = ~np.eye(len(difference), dtype=bool)
        return float(np.nanmax(difference[off])) if off.any() else float("nan")


def value_attributes(schema: Schema, released: dd.DataFrame) -> tuple[Attribute, ...]:
    """The attributes whose column of the decoded table ``released`` holds values."""
    return tuple(a for a in schema.attributes
                 if holds_values(a, released.dtypes[a.read_column(released.columns)]))


def compare_values(data: TableSource, synthetic: TableSource, schema: Schema, *,
                   seed: int = 0, sample_rows: int = SAMPLE_ROWS,
                   histogram_values: int = HISTOGRAM_VALUES,
                   keep_outside: bool = False) -> ValueComparison | None:
    """Value metrics of a decoded synthetic table against the raw data; None when no column
    holds values (a label release). One pass over each table, both computed together.

    ``metrics`` columns: ``column``, ``kind`` (numeric, year), ``real values`` and ``synthetic
    values`` (values counted: missing and out-of-domain ones are left out), ``computed on``
    (all values, or the sample), ``KS``, ``W1``, ``mean``/``std`` (population) real and
    synthetic, and the quantiles ``q1% real`` ... ``q99% synthetic``. ``keep_outside``: values
    beyond the schema's bins are counted too, as they are (:mod:`dp_dask.evaluate.columns`).
    """
    if isinstance(synthetic, str | Path):
        synthetic = checked_table(synthetic)
    released = read_table(synthetic, schema)
    attributes = value_attributes(schema, released)
    if not attributes:
        return None
    options = {"sample_rows": sample_rows, "histogram_values": histogram_values,
               "keep_outside": keep_outside}
    real, fake = compute(sketch_graph(read_table(data, schema), attributes, seed, REAL, **options),
                         sketch_graph(released, attributes, seed, SYNTHETIC, **options))
    return value_comparison(attributes, real, fake, seed=seed, sample_rows=sample_rows)


def value_comparison(attributes: tuple[Attribute, ...], real: Sketch, fake: Sketch, *,
                     seed: int, sample_rows: int) -> ValueComparison:
    """The :class:`ValueComparison` of the two tables' sketches (:func:`sketch_graph` of
    ``attributes`` with ``seed`` and ``sample_rows``)."""
    names = [a.name for a in attributes]
    distributions = [{name: Distribution.of(sketch, j) for j, name in enumerate(names)}
                     for sketch in (real, fake)]
    rows = []
    for j, attribute in enumerate(attributes):
        pair = distributions[0][attribute.name], distributions[1][attribute.name]
        on = "all values" if all(d.exact for d in pair) else "sample"
        rows.append({"column": attribute.name,
                     "kind": "numeric" if attribute.kind == "numeric" else "year",
                     "computed on": on}
                    | _column_metrics(*pair, (real.moments[j], fake.moments[j])))
    sample = (f"seeded uniform sample of at most {sample_rows:,} rows of each table (seed "
              f"{seed}): {len(real.keys):,} of {real.rows:,} real, {len(fake.keys):,} of "
              f"{fake.rows:,} synthetic")
    real_range = {name: (float(low), float(high))
                  for name, (low, high) in zip(names, real.extremes)}
    return ValueComparison(pd.DataFrame(rows), *distributions, spearman(real, names),
                           spearman(fake, names), sample, (real.rows, fake.rows), real_range)


def value_metrics(data: TableSource, synthetic: TableSource, schema: Schema, *,
                  seed: int = 0, sample_rows: int = SAMPLE_ROWS) -> pd.DataFrame:
    """The metrics frame of :func:`compare_values` (empty when no column holds values)."""
    comparison = compare_values(data, synthetic, schema, seed=seed, sample_rows=sample_rows)
    return pd.DataFrame() if comparison is None else comparison.metrics


NOTES = ("Per numeric and datetime (year) column whose release holds values: KS (sup of the "
         "CDFs' difference, 0 = identical) and W1 (Wasserstein-1, the column's unit; years for "
         "times) between the real and synthetic values, mean, std and quantiles. Real values "
         "are the raw column parsed by the schema; missing and out-of-domain values (those the "
         "schema counts in a missing or unknown bin) are left out. 'all values': exact, from "
         "every value; 'sample': on the {sample}.")


def summary_tables(comparison: ValueComparison) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The metrics as two display tables: distances and moments; quantiles (real, synthetic)."""
    metrics = comparison.metrics
    main = metrics[[c for c in metrics.columns if not c.startswith("q")]]
    quantiles = [{"column": row["column"], "table": side}
                 | {f"{q:.0%}": row.get(f"q{q:.0%} {side}", np.nan) for q in QUANTILES}
                 for _, row in metrics.iterrows() for side in ("real", "synthetic")]
    return main, pd.DataFrame(quantiles)


def summary_markdown(comparison: ValueComparison) -> str:
    """The value metrics as Markdown: distances, quantiles and the Spearman matrices."""
    main, quantiles = summary_tables(comparison)
    text = [markdown_table(main, "{:.6g}"), "", "Quantiles:", "",
            markdown_table(quantiles, "{:.6g}")]
    if len(comparison.spearman_real) >= 2:
        text += ["", f"Spearman's ρ on the sample, max |real − synthetic| = "
                 f"{comparison.spearman_max_difference:.4f}.", ""]
        for side, frame in (("real", comparison.spearman_real),
                            ("synthetic", comparison.spearman_synthetic)):
            text += [f"ρ ({side}):", "", markdown_table(frame.reset_index(names=""), "{:.3f}"),
                     ""]
    return "\n".join(text).rstrip() + "\n"


def write_values(comparison: ValueComparison, out: Path, title: str) -> dict[str, Path]:
    """``values.{md,csv,json}`` under ``out`` (the caller checked it is outside a release),
    each marked not DP as the (α, β) tables are."""
    notes = NOTES.format(sample=comparison.sample)
    paths = {"values_md": out / "values.md", "values_csv": out / "values.csv",
             "values_json": out / "values.json"}
    paths["values_md"].write_text(owner_only_markdown(
        f"# {title}\n\n{notes}\n\n{summary_markdown(comparison)}"))
    write_owner_csv(comparison.metrics, paths["values_csv"])
    difference = comparison.spearman_max_difference
    write_json(paths["values_json"], {
        "privacy": OWNER_ONLY, "differentially_private": False, "title": title, "notes": notes,
        "records": _plain(comparison.metrics).to_dict(orient="records"),
        "spearman": {"real": _plain(comparison.spearman_real).to_dict(),
                     "synthetic": _plain(comparison.spearman_synthetic).to_dict(),
                     "max_abs_difference": None if np.isnan(difference) else difference}})
    return paths


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """NaN as None: JSON has no NaN."""
    return frame.astype(object).where(frame.notna(), None)
