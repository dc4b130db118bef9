"""The data owner's HTML report of a release against the raw data: what ``dp-dask evaluate`` writes.

One self-contained file (figures embedded as base64 PNG, so it can be mailed or opened from a
bucket): the privacy parameters the release's ``metadata.json`` records (its ε beside the ε
spent drafting its schema), each raw column against the released one (:mod:`.columns`: KS or
TVD on the raw values, histograms and quantiles, out-of-range and invented-null shares, lost
levels, Arrow types), per-attribute real-vs-synthetic bars, a pair of attribute-association
heatmaps (real, synthetic), the (α, β) tables, marginal distances, and the value metrics of a
typed release (:mod:`dp_dask.evaluate.values`: per numeric column a histogram of its in-domain
values, real and synthetic, KS, W1, moments and quantiles, and Spearman heatmaps).

PRIVACY: the figures and tables are exact functions of the raw data (shares, associations,
quantiles and the texts of lost levels, never counts). The page says "not differentially
private — for the data owner only" at its top and on every figure, and is never written inside
a release directory unless forced.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import html
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats.contingency import association

from dp_dask.data.counts import attribute_pairs
from dp_dask.data.io import TableSource, join, read_bytes, write_json
from dp_dask.data.schema import Schema
from dp_dask.evaluate.columns import (
    LOST_SHARE,
    RAW_TAILS,
    ColumnComparison,
    compare_columns,
    display_table,
)
from dp_dask.evaluate.constraints import constraint_violations
from dp_dask.evaluate.queries import (
    DEFAULT_Q3_SAMPLE,
    Comparison,
    compare_release,
    marginal_distances,
)
from dp_dask.evaluate.tables import (
    check_outside_release,
    wide_table,
    write_owner_csv,
    write_tables,
)
from dp_dask.evaluate.tasks import tasks_tables
from dp_dask.evaluate.values import (
    ValueComparison,
    compare_values,
    summary_tables,
    value_histogram,
    write_values,
)
from dp_dask.privacy.labels import OWNER_ONLY
from dp_dask.release import ReleaseError, pinned_table, release_version

REPORT_NAME = "report.html"
RAW_ALT = "raw values, real vs synthetic"  # the columns section's histograms
VALUE_TAILS = 0.005  # the value histograms show the central 99 % of either side
TASKS_NAME = "tasks.json"
COLUMNS_NAME = "columns.csv"
_PRIVACY_FIELDS = ("differentially_private", "label", "epsilon", "delta", "mechanism",
                   "accountant", "rho", "k", "budget_split", "noise_sampler", "neighbouring",
                   "privacy_unit", "post_processing", "reason")


def attribute_shares(comparison: Comparison, schema: Schema) -> dict[str, pd.DataFrame]:
    """Per attribute: the share of rows in each label, real and synthetic (each sums to 1)."""
    shares = {}
    real, synthetic = np.diagonal(comparison.real_counts), np.diagonal(comparison.synthetic_counts)
    for attribute, offset, size in zip(schema.attributes, schema.offsets, schema.sizes):
        cells = slice(offset, offset + size)
        shares[attribute.name] = pd.DataFrame(
            {"real": real[cells] / max(real[cells].sum(), 1),
             "synthetic": synthetic[cells] / max(synthetic[cells].sum(), 1)},
            index=pd.Index(list(attribute.labels), name=attribute.name))
    return shares


def associations(counts: np.ndarray, schema: Schema) -> pd.DataFrame:
    """Cramér's V of every attribute pair from the 2-way tables (1 on the diagonal).

    Labels no row holds are dropped first (they would make the χ² expected counts zero); a pair
    left with a single row or column of labels has no association to measure (0).
    """
    values = np.eye(schema.m)
    for i, j, rows, cols in attribute_pairs(schema):
        table = counts[rows, cols]
        table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
        if min(table.shape) >= 2:
            values[i, j] = values[j, i] = association(table, method="cramer")
    return pd.DataFrame(values, index=schema.names, columns=schema.names)


def release_metadata(synthetic: TableSource) -> dict[str, Any] | None:
    """The ``metadata.json`` of the release ``synthetic`` belongs to, if it is one."""
    if not isinstance(synthetic, str | Path):
        return None
    try:  # the files are in the version the release's link or pointer names
        found = release_version(synthetic)
        return None if found is None else json.loads(read_bytes(join(found[0], "metadata.json")))
    except (FileNotFoundError, ReleaseError):
        return None


def _png(figure: Any, alt: str) -> str:
    """A figure as an ``<img>`` with a base64 data URI, footed with the owner-only label."""
    # below the figure's area (and its tick labels): bbox_inches="tight" grows the image to it
    figure.text(0.5, -0.02, OWNER_ONLY, ha="center", va="top", fontsize=7, color="#a00")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _finish(axes: Any, title: str, ylabel: str) -> None:
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend(fontsize=8)


# Figures through matplotlib's object API, not pyplot: no global backend switched (a notebook
# that calls this keeps its inline plots) and nothing left open.
def _bar_figures(shares: dict[str, pd.DataFrame]) -> list[str]:
    from matplotlib.figure import Figure

    images = []
    for name, frame in shares.items():
        figure = Figure(figsize=(max(4.0, 0.45 * len(frame) + 2), 3.2), layout="constrained")
        axes = figure.subplots()
        positions = np.arange(len(frame))
        axes.bar(positions - 0.2, frame["real"], 0.4, label="real", color="#4c72b0")
        axes.bar(positions + 0.2, frame["synthetic"], 0.4, label="synthetic", color="#dd8452")
        axes.set_xticks(positions, [str(label) for label in frame.index], rotation=45,
                        ha="right", fontsize=8)
        _finish(axes, name, "share of rows")
        images.append(_png(figure, f"{name}: real vs synthetic shares"))
    return images


def _heatmap_figure(real: pd.DataFrame, synthetic: pd.DataFrame, measure: str = "Cramér's V",
                    vmin: float = 0.0, cmap: str = "viridis") -> str:
    from matplotlib.figure import Figure

    size = max(4.0, 0.4 * len(real) + 2)
    figure = Figure(figsize=(2 * size + 1, size), layout="constrained")
    axes = figure.subplots(1, 2)
    for ax, (title, frame) in zip(axes, [("real", real), ("synthetic", synthetic)]):
        image = ax.imshow(frame.to_numpy(), vmin=vmin, vmax=1, cmap=cmap)
        ax.set_xticks(range(len(frame)), frame.columns, rotation=90, fontsize=7)
        ax.set_yticks(range(len(frame)), frame.index, fontsize=7)
        ax.set_title(f"{title}: {measure}")
    figure.colorbar(image, ax=axes, shrink=0.8)
    return _png(figure, f"{measure} heatmaps, real and synthetic")


def _value_histograms(values: ValueComparison, tails: float = VALUE_TAILS,
                      alt: str = "real vs synthetic values") -> list[str]:
    """Per value column, the density of real and synthetic values on their common bins
    (:func:`~dp_dask.evaluate.values.value_histogram`, the central 1 − 2·``tails`` of either)."""
    from matplotlib.figure import Figure

    images = []
    for name, real in values.real.items():
        synthetic = values.synthetic[name]
        if not (len(real.values) or len(synthetic.values)):
            continue
        bins = value_histogram(real, synthetic, tails)
        edges = np.append(bins["low"].to_numpy(), bins["high"].iloc[-1])
        width = (bins["high"] - bins["low"]).to_numpy()
        figure = Figure(figsize=(5.0, 3.2), layout="constrained")
        axes = figure.subplots()
        for label, d, style in (("real", real, {"fill": True, "alpha": 0.5, "color": "#4c72b0"}),
                                ("synthetic", synthetic, {"linewidth": 1.5,
                                                          "color": "#dd8452"})):
            if len(d.values):
                axes.stairs(bins[label].to_numpy() / width, edges, label=label, **style)
        _finish(axes, name, "density")
        images.append(_png(figure, f"{name}: {alt}"))
    return images


def _table(frame: pd.DataFrame, float_format: str = "{:.4g}") -> str:
    # pandas escapes the cells (the workload "Q2 |r|>=0.5" among them)
    return frame.to_html(index=False, float_format=float_format.format, border=0,
                         classes="table")


def _privacy_section(metadata: dict[str, Any] | None) -> str:
    if metadata is None:
        return ("<p>No release metadata: the synthetic table is not part of a dp_dask release, "
                "so its privacy parameters are unknown.</p>")
    privacy = metadata.get("privacy", {})
    rows = [(key, privacy[key]) for key in _PRIVACY_FIELDS if key in privacy]
    rows += [(key, metadata[key]) for key in ("method", "n_rows", "created") if key in metadata]
    rows += [(f"ledger {key}", value) for key, value in metadata.get("ledger", {}).items()]
    frame = pd.DataFrame(rows, columns=["field", "value"]).astype(str)
    verdict = ("differentially private release" if privacy.get("differentially_private")
               else "NOT a differentially private release")
    return (f"<p><strong>{html.escape(verdict)}</strong> (from metadata.json)</p>"
            + _table(epsilon_table(privacy)) + _table(frame))


def epsilon_table(privacy: dict[str, Any]) -> pd.DataFrame:
    """The ε and δ of the release beside those spent drafting its schema from the same data
    (the privacy record's ``schema_drafted_under_dp``), and their sum."""
    rows = [("this release", privacy.get("epsilon"), privacy.get("delta"))]
    drafted = privacy.get("schema_drafted_under_dp")
    if drafted:
        together = drafted.get("with_this_release", {})
        rows += [("drafting its schema (under DP)", drafted.get("epsilon"), drafted.get("delta")),
                 (f"together, {together.get('composition', 'basic composition')}",
                  together.get("epsilon"), together.get("delta"))]
    else:
        rows.append(("drafting its schema", "none recorded: not drafted from the data under DP",
                     ""))
    return pd.DataFrame(rows, columns=["ε spent by", "ε", "δ"]).astype(str)


_STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 1em auto; padding: 0 1em; }
.owner { background: #fee; border: 2px solid #a00; padding: 0.6em; font-weight: bold; }
table.table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
table.table td, table.table th { border: 1px solid #ccc; padding: 0.2em 0.5em; }
.figures img { max-width: 100%; margin: 0.3em; vertical-align: top; }
"""


def _values_section(values: ValueComparison, plots: bool) -> str:
    main, quantiles = summary_tables(values)
    text = ('<h2 id="values">Values</h2><p>Per numeric and datetime (year) column whose '
            "release holds values: "
            "the Kolmogorov–Smirnov statistic and the Wasserstein-1 distance (in the column's "
            "unit; years for times) between real and synthetic values, their moments and "
            "quantiles. Missing and out-of-domain values are left out. 'sample': on the "
            f"{html.escape(values.sample)}.</p>" + _table(main, "{:.6g}")
            + _table(quantiles, "{:.6g}"))
    if plots:
        text += f'<div class="figures">{"".join(_value_histograms(values))}</div>'
    if len(values.spearman_real) < 2:
        return text + "<p>Spearman's ρ needs two value columns.</p>"
    text += ("<p>Spearman's rank correlation of every pair of value columns, real and synthetic "
             f"(on the sample); max |real − synthetic| = "
             f"{values.spearman_max_difference:.4f}.</p>")
    if plots:
        text += ('<div class="figures">'
                 + _heatmap_figure(values.spearman_real, values.spearman_synthetic,
                                   "Spearman's ρ", -1.0, "coolwarm") + "</div>")
    return text


def _columns_section(columns: ColumnComparison, plots: bool) -> str:
    """Per input column, its raw values against the release's (:mod:`.columns`)."""
    text = ('<h2 id="columns">Columns</h2><p>Each input column against its released column, '
            "on the raw values rather than the schema's bins: KS of every value of a numeric "
            "column (those beyond the bins too), TVD of the shares of a text column's values, "
            "the share of synthetic values outside the real [min, max], the shares of nulls in "
            "and out (invented: out − in), the levels holding at least "
            f"{LOST_SHARE:.0%} of the real rows that no released row holds (lost: merged into "
            "another bin such as <code>other</code>), and the Arrow types in and out.</p>"
            + _table(display_table(columns)))
    if len(columns.lost):
        text += ("<p>Lost levels, by their share of the real rows:</p>"
                 + _table(columns.lost, "{:.4f}"))
    if columns.values is None:
        return text
    text += ("<p>Quantiles of every value, real and synthetic (a datetime column by its year, "
             "in decimal years):</p>" + _table(columns.quantiles(), "{:.6g}"))
    if plots:
        text += ('<div class="figures">'
                 + "".join(_value_histograms(columns.values, RAW_TAILS, RAW_ALT)) + "</div>")
    return text


def _tasks_section(tasks: dict[str, Any]) -> str:
    """The downstream task and the quality scores (:mod:`dp_dask.evaluate.tasks`)."""
    tables = tasks_tables(tasks)
    text = ('<h2 id="quality">Quality scores</h2><p>SDMetrics-style: column shapes (1 − KS of '
            "values, 1 − TV of label shares), column pairs (correlation or contingency "
            "similarity), and their mean (1 = identical).</p>" + _table(tables["quality"]))
    if "downstream" in tasks:
        task = tasks["downstream"]
        text += (f'<h2 id="downstream">Downstream task: {html.escape(task["target"])}</h2>'
                 f"<p>Trained on the real training rows ({task['train_rows']['real']}) and on "
                 f"the release ({task['train_rows']['synthetic']} rows), both tested on "
                 f"{task['test_rows']} real held-out rows ({html.escape(task['test_split'])})."
                 "</p>" + _table(tables["downstream"]))
    return text


def render_html(comparison: Comparison, schema: Schema, *, synthetic_name: str,
                metadata: dict[str, Any] | None, tasks: dict[str, Any] | None = None) -> str:
    """The report as one HTML document (figures only when matplotlib is installed);
    ``tasks``: the downstream task and quality scores, when evaluated."""
    sections = [f"<h2>Privacy parameters of the release</h2>{_privacy_section(metadata)}"]
    plots = importlib.util.find_spec("matplotlib") is not None
    if comparison.columns is not None:
        sections.append(_columns_section(comparison.columns, plots))
    distances = pd.DataFrame([marginal_distances(comparison.real_counts,
                                                 comparison.synthetic_counts, schema)])
    sections.append("<h2>Marginal distances</h2><p>Total variation distance between the real "
                    "and synthetic 1- and 2-way marginals (0 = identical).</p>"
                    + _table(distances))
    table = wide_table(comparison.records, ["workload", "queries"])
    sections.append(f"<h2>(α, β) errors</h2><p>For each β, the average and the maximum error of "
                    f"the best β share of counting queries (Q3: "
                    f"{html.escape(comparison.workload.describe())}).</p>"
                    + _table(table, "{:.1f}"))
    shares = attribute_shares(comparison, schema)
    real_v = associations(comparison.real_counts, schema)
    synthetic_v = associations(comparison.synthetic_counts, schema)
    if not plots:
        heatmap = bars = ("<p>Figures skipped: matplotlib is not installed "
                          "(<code>pip install 'dp-dask[plots]'</code>).</p>")
    else:
        heatmap = f'<div class="figures">{_heatmap_figure(real_v, synthetic_v)}</div>'
        bars = f'<div class="figures">{"".join(_bar_figures(shares))}</div>'
    sections.append("<h2>Correlations</h2><p>Association of every attribute pair (Cramér's V "
                    "of its 2-way table), real and synthetic.</p>" + heatmap)
    shares_long = pd.concat(shares, names=["attribute"]).reset_index()
    shares_long.columns = ["attribute", "label", "real", "synthetic"]
    sections.append("<h2>Per attribute</h2><p>Share of rows in each label, real and synthetic."
                    "</p>" + bars + _table(shares_long, "{:.4f}"))
    if comparison.values is not None:
        sections.append(_values_section(comparison.values, plots))
    if comparison.constraints is not None:
        sections.append("<h2>Declared constraints</h2><p>Rows of the release breaking each of "
                        "the schema's constraints (0 expected; read from the release alone)."
                        "</p>" + _table(comparison.constraints))
    if tasks is not None:
        sections.append(_tasks_section(tasks))
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>dp_dask evaluation: {html.escape(synthetic_name)}</title>"
            f"<style>{_STYLE}</style></head><body>"
            f'<p class="owner">{html.escape(OWNER_ONLY.capitalize())}: computed from the raw '
            f"data. Do not publish it with the release.</p>"
            f"<h1>Evaluation of {html.escape(synthetic_name)}</h1>"
            f"<p>Written {created}.</p>{''.join(sections)}</body></html>\n")


def write_evaluation(data: TableSource, synthetic: TableSource, schema: Schema,
                     out: str | Path, *, q3_sample: int | None = DEFAULT_Q3_SAMPLE,
                     seed: int = 0, force: bool = False,
                     tasks: dict[str, Any] | None = None) -> tuple[Comparison, dict[str, Path]]:
    """Evaluate ``synthetic`` against ``data`` and write ``alpha-beta.{csv,json,md}``,
    ``values.{csv,json,md}`` (when a column holds values: :mod:`dp_dask.evaluate.values`, also
    in the returned comparison's ``values``), ``columns.csv`` (each raw column against the
    release's: :mod:`dp_dask.evaluate.columns`, also the comparison's ``columns``),
    ``constraints.json`` (when the schema declares some: :mod:`dp_dask.evaluate.constraints`),
    ``tasks.json`` (``tasks``: the downstream task and quality scores of
    :func:`~dp_dask.evaluate.tasks.evaluate_tasks`, when given) and ``report.html`` under
    ``out`` (refused inside a release directory unless ``force``).
    ``seed``: of the Q3 sample and the value sample."""
    out = Path(out)
    check_outside_release(out, force)  # before reading anything
    name = str(synthetic) if isinstance(synthetic, str | Path) else "an in-memory table"
    synthetic = pinned_table(synthetic)  # every read below sees one version of a release
    comparison = dataclasses.replace(
        compare_release(data, synthetic, schema, q3_sample=q3_sample, seed=seed),
        values=compare_values(data, synthetic, schema, seed=seed),
        columns=compare_columns(data, synthetic, schema, seed=seed))
    paths = write_tables(comparison.records, out, "alpha-beta", "(α, β) errors of a release",
                         f"Synthetic: {name}. Q3: {comparison.workload.describe()}.",
                         force=force)
    table = comparison.columns.table
    paths["columns"] = write_owner_csv(
        table.assign(levels_lost=table["levels_lost"].map("; ".join)).reset_index(),
        out / COLUMNS_NAME)
    if comparison.values is not None:
        paths |= write_values(comparison.values, out, f"Values of a release ({name})")
    if schema.constraints:
        comparison = dataclasses.replace(comparison,
                                         constraints=constraint_violations(synthetic, schema))
        paths["constraints"] = out / "constraints.json"
        write_json(paths["constraints"], {
            "source": "the release alone (no raw data)",
            "records": comparison.constraints.to_dict(orient="records")})
    if tasks is not None:
        paths["tasks"] = out / TASKS_NAME
        paths["tasks"].write_text(json.dumps(tasks, indent=2) + "\n")
    paths["html"] = out / REPORT_NAME
    paths["html"].write_text(render_html(comparison, schema, synthetic_name=name,
                                         metadata=release_metadata(synthetic), tasks=tasks))
    return comparison, paths
