"""Per column, the raw table against its release: what ``dp-dask evaluate`` shows beside the
binned marginals, which a clamped tail or a level merged into ``other`` leave looking perfect.

One row per input column (:func:`compare_columns`, :func:`column_report`):

* a numeric or datetime (``year``) column whose release holds values: the Kolmogorov–Smirnov
  statistic between every real value, those beyond the schema's bins too
  (:func:`~dp_dask.data.encode.domain_values` with ``keep_outside``), and the released ones;
  their quantiles side by side, their histogram on bins common to both, and the share of the
  synthetic values outside the real [min, max];
* a categorical or boolean column: the total variation distance between the shares of the real
  values' texts (as the encoder reads them, :func:`~dp_dask.data.text.category_text`; a boolean
  as "True"/"False" by the schema's true and false values), not the schema's bins, and the
  release's; and ``levels_lost``, the texts holding at least ``LOST_SHARE`` of the real rows
  that no released row holds (merged into ``other``, or left out of the categories);
* the share of nulls in (a real null or a text the schema lists in ``missing_values``; for a
  numeric column also a text that is no number) and out, and the invented share, out − in
  where positive;
* the Arrow types of the input column and of the released column (``string`` against
  ``large_string``, a dictionary ``ordered`` or not): a Parquet file's own schema (a release's,
  the version's ``synthetic.parquet``), a CSV's text, a frame's dtypes.

A datetime column is compared through its ``year`` feature, in decimal years; a column whose
release holds bin labels (``decode=label``) is not compared here (its bins are, in the
report's per-attribute shares).

Out of core, one pass over each table: the numeric columns through
:mod:`~dp_dask.evaluate.values`' sketch (exact histograms, else a seeded sample), the text
columns' count of each distinct text, exact up to ``text_values`` distinct texts a column,
beyond that a Misra–Gries summary (mergeable; each count low by at most the rows it no longer
counts / (``text_values`` + 1)), whose TVD is then an upper bound.

PRIVACY: the data owner's evaluation, never part of a release: quantiles, histograms and lost
levels show raw values, and everything written of them is marked "not differentially private —
for the data owner only", as the other evaluation outputs are.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from dask.delayed import Delayed

from dp_dask.cluster import compute
from dp_dask.data.counts import tree_sum
from dp_dask.data.encode import domain_codes
from dp_dask.data.io import TableSource, filesystem, join, read_table, remote
from dp_dask.data.schema import Attribute, Schema
from dp_dask.data.text import category_text
from dp_dask.evaluate.tables import markdown_table
from dp_dask.evaluate.values import (
    HISTOGRAM_VALUES,
    REAL,
    SAMPLE_ROWS,
    SYNTHETIC,
    ValueComparison,
    sketch_parts,
    summary_tables,
    value_attributes,
    value_comparison,
    value_histogram,
)
from dp_dask.release import checked_table, release_version

LOST_SHARE = 0.01  # a level holding this share of the real rows is named when the release lacks it
TEXT_VALUES = 100_000  # distinct texts a column's counts hold exactly
RAW_TAILS = 0.001  # the raw histograms span the central 99.8 % of either side: a clamped tail shows
CSV_TEXT = "string (CSV text)"
TEXT_KINDS = ("categorical", "boolean")
REPORT_COLUMNS = ("kind", "type_in", "type_out", "metric", "ks_or_tvd", "outside_range",
                  "null_in", "null_out", "invented_nulls", "levels_lost", "computed_on")


@dataclass(frozen=True)
class TextCounts:
    """One text column of a table, reduced over its partitions."""

    texts: np.ndarray  # the distinct texts of its non-null values (object)
    counts: np.ndarray  # the rows holding each (a Misra–Gries count where ``uncounted``)
    nulls: int
    rows: int
    uncounted: int  # non-null rows the summary no longer counts: 0 while it is exact

    @property
    def present(self) -> int:
        return self.rows - self.nulls

    def shares(self) -> pd.Series:
        """Each text's share of the non-null rows."""
        return pd.Series(self.counts / max(self.present, 1), index=self.texts, dtype=float)


def _summary(counts: pd.Series, nulls: int, rows: int, uncounted: int,
             limit: int) -> TextCounts:
    """``counts`` (text → rows) as at most ``limit`` counters: past that, the Misra–Gries
    step of Agarwal et al.'s mergeable summaries, every count less the (limit + 1)-th largest
    and the counts left at 0 dropped."""
    if len(counts) > limit:
        cut = np.partition(counts.to_numpy(), len(counts) - limit - 1)[len(counts) - limit - 1]
        kept = counts[counts > cut] - cut
        uncounted += int(counts.sum() - kept.sum())
        counts = kept
    return TextCounts(counts.index.to_numpy(dtype=object), counts.to_numpy(dtype=np.int64),
                      nulls, rows, uncounted)


def _row_texts(values: pd.Series) -> np.ndarray:
    """Each value's text (:func:`category_text`), None where it is null."""
    texts, inverse = category_text(values)
    texts = np.asarray(texts, dtype=object)
    return texts if inverse is None else np.append(texts, None)[inverse]


def real_texts(values: pd.Series, attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """A raw column's texts and its nulls (real nulls, the schema's ``missing_values``); a
    boolean's values read by the schema's true and false values as "True" / "False"."""
    codes, missing = domain_codes(values, attribute)
    texts = _row_texts(values)
    if attribute.kind == "boolean":
        texts = np.where(codes == 1, "True", np.where(codes == 0, "False", texts)).astype(object)
    return texts, missing


def released_texts(values: pd.Series, attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """A released column's texts and its nulls: a null, or, as
    :func:`~dp_dask.data.values.release_codes` reads a CSV's cells, an empty text that is no
    label of the attribute."""
    texts = _row_texts(values)
    missing = values.isna().to_numpy(dtype=bool)
    if "" not in attribute.labels:
        missing = missing | (texts == "")
    return texts, missing


def text_partition(frame: pd.DataFrame, attributes: tuple[Attribute, ...], real: bool,
                   limit: int) -> tuple[TextCounts, ...]:
    """Chunk step: one partition's text columns, counted (``real``: a raw table's, else a
    release's)."""
    summaries = []
    for attribute in attributes:
        texts, missing = (real_texts if real else released_texts)(
            frame[attribute.read_column(frame.columns)], attribute)
        counts = pd.Series(texts[~missing], dtype=object).value_counts(sort=False)
        summaries.append(_summary(counts, int(missing.sum()), len(frame), 0, limit))
    return tuple(summaries)


def merge_texts(parts: list[tuple[TextCounts, ...]], limit: int) -> tuple[TextCounts, ...]:
    """Combine step: the counts of the union of the parts' rows."""
    merged = []
    for column in zip(*parts):
        counts = pd.concat([pd.Series(c.counts, index=pd.Index(c.texts, dtype=object))
                            for c in column]).groupby(level=0, sort=False).sum()
        merged.append(_summary(counts, sum(c.nulls for c in column),
                               sum(c.rows for c in column),
                               sum(c.uncounted for c in column), limit))
    return tuple(merged)


def text_parts(parts: list[Delayed], attributes: tuple[Attribute, ...], real: bool, *,
               limit: int = TEXT_VALUES, split_every: int = 8) -> Delayed:
    """Lazy :class:`TextCounts` of each text column of a table's partitions ``parts``."""
    chunks = [dask.delayed(text_partition)(part, attributes, real, limit) for part in parts]
    return tree_sum(chunks, split_every=split_every,
                    combine=functools.partial(merge_texts, limit=limit))


def _frame_types(frame: pd.DataFrame) -> dict[str, str]:
    types = {}
    for name in frame.columns:
        try:
            arrow = pa.Schema.from_pandas(frame[[name]], preserve_index=False).field(name).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            arrow = None  # a mix of types Arrow has no one type for
        types[name] = (f"pandas {frame[name].dtype}" if arrow is None or pa.types.is_null(arrow)
                       else str(arrow))
    return types


def arrow_types(source: TableSource,
                storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """Each column's Arrow type as the table stores it: a Parquet file's schema (a directory's
    first part; a release's, that of its version's ``synthetic.parquet``), ``CSV_TEXT`` for a
    CSV (read as text), a pandas frame's from its first rows, a Dask frame's from its dtypes;
    ``pandas <dtype>`` where Arrow has no type for them (an object column of a Dask frame)."""
    if isinstance(source, pd.DataFrame):
        return _frame_types(source.head(1000))
    if isinstance(source, dd.DataFrame):
        return _frame_types(source._meta)
    found = release_version(source, storage_options)
    if found is not None:
        source = join(found[0], found[1] or "synthetic.parquet")
    if str(source).lower().endswith((".csv", ".csv.gz")):
        header = pd.read_csv(source, nrows=0,
                             storage_options=storage_options if remote(source) else None)
        return dict.fromkeys(header.columns, CSV_TEXT)
    fs, path = filesystem(source, storage_options)
    files = [path]
    if fs.isdir(path):  # its parts, not dask's _metadata nor a release's markers
        files = sorted(f for f in fs.find(path) if f.endswith(".parquet")
                       and not f.rsplit("/", 1)[-1].startswith(("_", ".")))
    if not files:
        return {}
    with fs.open(files[0], "rb") as handle:
        schema = pq.read_schema(handle)
    return {field.name: str(field.type) for field in schema}


@dataclass(frozen=True)
class _Column:
    """An input column and how it is compared: ``how`` "values", "texts" or "labels" (not)."""

    name: str
    released: str  # its column in the release
    attribute: Attribute  # the attribute it is compared through
    how: str


def _plan(schema: Schema, released: dd.DataFrame) -> list[_Column]:
    with_values = set(value_attributes(schema, released))
    groups: dict[str, list[Attribute]] = {}
    for attribute in schema.attributes:  # a datetime column's calendar features together
        groups.setdefault(attribute.column, []).append(attribute)
    plan = []
    for name, group in groups.items():
        valued = [a for a in group if a in with_values]
        attribute = (valued or group)[0]
        how = ("values" if valued else "texts" if attribute.kind in TEXT_KINDS else "labels")
        plan.append(_Column(name, attribute.read_column(released.columns), attribute, how))
    return plan


@dataclass(frozen=True)
class ColumnComparison:
    """The per-column comparison of :func:`compare_columns`."""

    table: pd.DataFrame  # one row per input column, indexed by its name: REPORT_COLUMNS
    values: ValueComparison | None  # the numeric columns' raw values (None: no such column)
    lost: pd.DataFrame  # column, level, real share: each lost level
    attributes: dict[str, str]  # input column → the attribute its values are keyed by

    def quantiles(self) -> pd.DataFrame:
        """The numeric columns' quantiles, real and synthetic side by side."""
        if self.values is None:
            return pd.DataFrame()
        return summary_tables(self.values)[1]

    def histogram(self, column: str) -> pd.DataFrame:
        """A numeric column's real and synthetic shares on their common bins
        (:func:`~dp_dask.evaluate.values.value_histogram`, the central 1 − 2·``RAW_TAILS``)."""
        name = self.attributes[column]
        if self.values is None or name not in self.values.real:
            raise KeyError(f"column {column!r} has no values compared")
        return value_histogram(self.values.real[name], self.values.synthetic[name], RAW_TAILS)


def _value_row(values: ValueComparison, name: str) -> dict[str, Any]:
    metrics = values.metrics.set_index("column").loc[name]
    synthetic = values.synthetic[name]
    low, high = values.real_range[name]
    outside = ((synthetic.weights[(synthetic.values < low) | (synthetic.values > high)].sum()
                / synthetic.weights.sum()) if len(synthetic.values) and low <= high
               else np.nan)
    null_in, null_out = ((rows - metrics[f"{side} values"]) / max(rows, 1)
                         for side, rows in zip(("real", "synthetic"), values.rows))
    return {"metric": "KS", "ks_or_tvd": metrics["KS"], "outside_range": float(outside),
            "null_in": null_in, "null_out": null_out,
            "invented_nulls": max(0.0, null_out - null_in), "levels_lost": (),
            "computed_on": metrics["computed on"]}


def _text_row(real: TextCounts, synthetic: TextCounts) -> tuple[dict[str, Any], pd.DataFrame]:
    shares = pd.concat([real.shares(), synthetic.shares()], axis=1).fillna(0.0).to_numpy()
    # the summaries' uncounted rows as if all different: an upper bound
    loose = [c.uncounted / max(c.present, 1) for c in (real, synthetic)]
    tvd = (0.5 * (np.abs(shares[:, 0] - shares[:, 1]).sum() + sum(loose))
           if real.present and synthetic.present else np.nan)
    common = real.counts >= LOST_SHARE * real.rows
    lost = pd.DataFrame({"level": real.texts[common], "real share": real.counts[common]
                         / real.rows})
    lost = lost[~lost["level"].isin(set(synthetic.texts))].sort_values(
        "real share", ascending=False, kind="stable")
    null_in, null_out = real.nulls / max(real.rows, 1), synthetic.nulls / max(synthetic.rows, 1)
    exact = not (real.uncounted or synthetic.uncounted)
    return {"metric": "TVD", "ks_or_tvd": tvd, "outside_range": np.nan, "null_in": null_in,
            "null_out": null_out, "invented_nulls": max(0.0, null_out - null_in),
            "levels_lost": tuple(lost["level"]),
            "computed_on": "all values" if exact else "Misra-Gries summary (TVD: upper bound)"
            }, lost


def compare_columns(data: TableSource, synthetic: TableSource, schema: Schema, *,
                    seed: int = 0, sample_rows: int = SAMPLE_ROWS,
                    histogram_values: int = HISTOGRAM_VALUES, text_values: int = TEXT_VALUES,
                    storage_options: dict[str, Any] | None = None) -> ColumnComparison:
    """Each input column of the raw ``data`` against its column in the decoded ``synthetic``
    table (module docstring); one pass over each table, both computed together.

    ``table`` columns (index: the input column): ``kind``; ``type_in``, ``type_out`` (Arrow);
    ``metric`` (KS, TVD, or "" where not compared) and its value ``ks_or_tvd``;
    ``outside_range``, the share of the synthetic values outside the real [min, max]
    (numeric); ``null_in``, ``null_out``, ``invented_nulls`` (shares of the rows);
    ``levels_lost``, the lost levels' texts, most common first; ``computed_on``.
    ``seed``, ``sample_rows``, ``histogram_values``: the value sketch's
    (:func:`~dp_dask.evaluate.values.compare_values`).
    """
    types_in, types_out = (arrow_types(source, storage_options) for source in (data, synthetic))
    if isinstance(synthetic, str | Path):
        synthetic = checked_table(synthetic, storage_options)
    tables = (read_table(data, schema, storage_options=storage_options),
              read_table(synthetic, schema, storage_options=storage_options))
    plan = _plan(schema, tables[1])
    valued = tuple(c.attribute for c in plan if c.how == "values")
    texts = tuple(c.attribute for c in plan if c.how == "texts")
    graphs = []
    for side, table in zip((REAL, SYNTHETIC), tables):
        columns = list(dict.fromkeys(a.read_column(table.columns) for a in valued + texts))
        parts = table[columns].to_delayed()  # read once for both summaries
        if valued:
            graphs.append(sketch_parts(parts, valued, seed, side, sample_rows=sample_rows,
                                       histogram_values=histogram_values, keep_outside=True))
        if texts:
            graphs.append(text_parts(parts, texts, side == REAL, limit=text_values))
    results = iter(compute(*graphs)) if graphs else iter(())
    sketches, counts = [], []
    for _ in (REAL, SYNTHETIC):
        if valued:
            sketches.append(next(results))
        if texts:
            counts.append(next(results))
    values = (value_comparison(valued, *sketches, seed=seed, sample_rows=sample_rows)
              if valued else None)
    rows, lost = [], []
    for column in plan:
        row = {"column": column.name, "kind": column.attribute.kind,
               "type_in": types_in.get(column.name, ""),
               "type_out": types_out.get(column.released, "")}
        if column.how == "values":
            row |= _value_row(values, column.attribute.name)
        elif column.how == "texts":
            k = texts.index(column.attribute)
            found, levels = _text_row(counts[0][k], counts[1][k])
            row |= found
            lost.append(levels.assign(column=column.name))
        else:
            row |= {"metric": "", "levels_lost": (),
                    "computed_on": "not compared: released as bin labels"}
        rows.append(row)
    table = pd.DataFrame(rows).set_index("column").reindex(columns=list(REPORT_COLUMNS))
    lost_frame = (pd.concat(lost, ignore_index=True)[["column", "level", "real share"]] if lost
                  else pd.DataFrame(columns=["column", "level", "real share"]))
    return ColumnComparison(table, values, lost_frame,
                            {c.name: c.attribute.name for c in plan if c.how == "values"})


def column_report(data: TableSource, synthetic: TableSource, schema: Schema, *,
                  seed: int = 0, storage_options: dict[str, Any] | None = None) -> pd.DataFrame:
    """The ``table`` of :func:`compare_columns`: one row per input column."""
    return compare_columns(data, synthetic, schema, seed=seed,
                           storage_options=storage_options).table


def display_table(comparison: ColumnComparison) -> pd.DataFrame:
    """The table for reading: shares in per cent, lost levels joined."""
    table = comparison.table.reset_index()
    for name in ("outside_range", "null_in", "null_out", "invented_nulls"):
        table[name] = table[name].map(lambda share: "" if pd.isna(share) else f"{share:.2%}")
    table["ks_or_tvd"] = table["ks_or_tvd"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    table["levels_lost"] = table["levels_lost"].map("; ".join)
    return table


def columns_markdown(comparison: ColumnComparison) -> str:
    """The per-column table, the lost levels and the quantiles, as Markdown."""
    text = [markdown_table(display_table(comparison))]
    if len(comparison.lost):
        text += ["", f"Levels with at least {LOST_SHARE:.0%} of the real rows that no released "
                 "row holds:", "", markdown_table(comparison.lost, "{:.4f}")]
    if comparison.values is not None:
        text += ["", "Quantiles of every value (beyond the bins too):", "",
                 markdown_table(comparison.quantiles(), "{:.6g}")]
    return "\n".join(text) + "\n"
