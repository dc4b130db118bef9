"""ε sweeps over the copula and its reference releases, plots, a classifier test, a report.

PRIVACY: this is the data owner's evaluation and never part of a release. It reads the raw data,
draws its noise from the seeded numpy sampler (reproducible, hence not private), fits one
reference model to the exact counts, and keeps all of it in memory. What it writes are errors,
accuracies and plots of them, never counts, noisy counts or models; each is marked "not
differentially private — for the data owner only", and none goes inside a release directory
unless forced.
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass
from pathlib import Path

import dask
import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.copula.model import CopulaModel, fit_model, marginals_from_counts
from dp_dask.copula.sample import sample_frame
from dp_dask.data.counts import rows_counted
from dp_dask.data.decode import calibrate_offsets
from dp_dask.data.io import TableSource
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import (
    Answers,
    ThreeWayWorkload,
    answer_graphs,
    error_records,
    labels_frame,
    pair_correlations,
    three_way_workload,
    workload_sizes,
)
from dp_dask.evaluate.tables import (
    check_outside_release,
    markdown_table,
    owner_only_markdown,
    write_owner_csv,
    write_tables,
)
from dp_dask.privacy import noisy_count_matrix, plan_noise
from dp_dask.privacy.labels import OWNER_ONLY

EPSILONS = (0.25, 0.5, 1.0, 2.0, 5.0)
PLOT_BETA = 0.95  # the β of the paper's tables
METHODS = {
    "dpc-gauss": "copula fitted to the Gaussian mechanism's noisy counts (zCDP accounting)",
    "dpc-laplace": "copula fitted to the Laplace mechanism's noisy counts (advanced "
                   "composition, as in the paper)",
    "independent": "independent marginals (ρ = identity) from the Gaussian noisy 1-way counts",
    "gauss-histograms": "Q1/Q2 answered from the Gaussian noisy histograms, negatives clamped "
                        "(no synthesis; cannot answer Q3)",
    "laplace-histograms": "Q1/Q2 answered from the Laplace noisy histograms, negatives clamped "
                          "(no synthesis; cannot answer Q3)",
    "copula-exact": "copula fitted to the exact counts: the model's error alone (not private, "
                    "independent of ε)",
}
_MECHANISM_OF = {"gauss": "gaussian", "laplace": "laplace"}


@dataclass(frozen=True)
class SweepResult:
    """Per-seed (α, β) records of every method and ε, and what the report needs besides."""

    records: pd.DataFrame  # columns: method, epsilon, seed, workload, queries, beta, avg, max
    workload: ThreeWayWorkload
    n_rows: int
    kept_models: dict[str, CopulaModel]  # at the table ε and the first seed, for the classifier


def noisy_counts(exact: np.ndarray, schema: Schema, mechanism: str, epsilon: float,
                 delta: float, seed: int) -> np.ndarray:
    """Clamped noisy d×d counts, as a release computes them but with seeded numpy noise."""
    return noisy_count_matrix(exact, schema, plan_noise(mechanism, epsilon, delta, schema.m),
                              sampler="numpy", seed=seed)


def independent_model(noisy: np.ndarray, schema: Schema, n_rows: int, *,
                      calibration_draws: int = 200_000) -> CopulaModel:
    """The copula with ρ = identity: attributes drawn independently from their noisy marginals."""
    marginals = marginals_from_counts(noisy, schema, n_rows)
    identity = np.eye(schema.d)
    # The argmax decoding still needs offsets that reproduce the marginals under independence.
    offsets = calibrate_offsets(identity, marginals, schema, draws=calibration_draws)
    return CopulaModel(schema, n_rows, noisy, marginals, identity, offsets,
                       {"model": {"within_attribute": "independent"}})


def _noise_seed(seed: int, epsilon: float, mechanism: str) -> int:
    """Distinct, reproducible noise per (seed, ε, mechanism)."""
    key = [seed, round(epsilon * 10**6), list(_MECHANISM_OF.values()).index(mechanism)]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def run_sweep(data: TableSource, schema: Schema, *, epsilons: tuple[float, ...] = EPSILONS,
              seeds: tuple[int, ...] = (0, 1, 2), delta: float = 2.0**-30,
              q3_sample: int | None = 100_000, table_epsilon: float = 1.0,
              calibration_draws: int = 200_000) -> SweepResult:
    """Every method at every ε and seed, evaluated on the same Q1/Q2/Q3 workloads.

    Fits run as tasks on the cluster (they are pure numpy); then all synthetic samples are drawn
    and counted in one Dask computation.
    """
    if not epsilons or any(not (math.isfinite(e) and e > 0) for e in epsilons):
        raise ValueError(f"epsilons must be finite and > 0, got {list(epsilons)}")
    if not seeds:
        raise ValueError("at least one seed is needed")
    workload = three_way_workload(schema, q3_sample, seed=0)
    exact, exact_q3 = compute(*answer_graphs(data, schema, workload))
    n_rows = rows_counted(exact, schema)
    if n_rows == 0:
        raise ValueError("the input has no rows")
    true = Answers.from_counts(exact, schema, exact_q3)
    correlations = pair_correlations(exact, schema)

    fit = dask.delayed(fit_model, pure=True)
    # (method, ε, seed) → lazy model, or the noisy counts a histogram release answers from.
    # The exact-count copula does not depend on ε: one fit, a fresh sample per seed.
    exact_model = fit(exact.astype(np.float64), schema, n_rows,
                      calibration_draws=calibration_draws)
    models, histograms = {}, {}
    for seed in seeds:
        for epsilon in epsilons:
            for short, mechanism in _MECHANISM_OF.items():
                noisy = noisy_counts(exact, schema, mechanism, epsilon, delta,
                                     _noise_seed(seed, epsilon, mechanism))
                histograms[(f"{short}-histograms", epsilon, seed)] = noisy
                models[(f"dpc-{short}", epsilon, seed)] = fit(
                    noisy, schema, n_rows, calibration_draws=calibration_draws,
                    noise_std=plan_noise(mechanism, epsilon, delta, schema.m).cell_std)
            models[("independent", epsilon, seed)] = dask.delayed(independent_model)(
                histograms[("gauss-histograms", epsilon, seed)], schema, n_rows,
                calibration_draws=calibration_draws)
    exact_model, *fitted_models = compute(exact_model, *models.values())
    fitted = dict(zip(models, fitted_models))
    fitted |= {("copula-exact", math.nan, seed): exact_model for seed in seeds}

    labels = schema.as_labels()  # the releases compared bin by bin: their labels
    graphs = [answer_graphs(sample_frame(model, n_rows, seed=seed, decode="label"), labels,
                            workload)
              for (_, _, seed), model in fitted.items()]
    answered = compute(*[graph for pair in graphs for graph in pair])
    records = []
    for index, key in enumerate(fitted):
        counts, q3 = answered[2 * index : 2 * index + 2]
        records += _tagged(error_records(key[0], true, Answers.from_counts(counts, labels, q3),
                                         correlations), key)
    for key, noisy in histograms.items():
        released = Answers.from_counts(noisy, schema, n_rows=n_rows)
        records += _tagged(error_records(key[0], true, released, correlations), key)
    kept = {method: model for (method, epsilon, seed), model in fitted.items()
            if seed == seeds[0] and (math.isnan(epsilon) or epsilon == table_epsilon)}
    return SweepResult(pd.DataFrame.from_records(records), workload, n_rows, kept)


def _tagged(records: list[dict[str, object]],
            key: tuple[str, float, int]) -> list[dict[str, object]]:
    return [{**record, "epsilon": key[1], "seed": key[2]} for record in records]


def summarise(records: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each (method, ε, workload, β) statistic."""
    keys = ["method", "epsilon", "workload", "queries", "beta"]
    grouped = records.groupby(keys, dropna=False, sort=False)[["average", "maximum"]]
    summary = grouped.agg(["mean", "std"])
    summary.columns = [f"{stat}_{moment}" for stat, moment in summary.columns]
    return summary.reset_index()


def at_epsilon(records: pd.DataFrame, epsilon: float) -> pd.DataFrame:
    """Seed-averaged long records at one ε (ε-free methods included), for the (α, β) table."""
    chosen = records[np.isclose(records["epsilon"], epsilon) | records["epsilon"].isna()]
    keys = ["method", "workload", "queries", "beta"]
    return chosen.groupby(keys, sort=False)[["average", "maximum"]].mean().reset_index()


def classifier_accuracies(train_sets: dict[str, pd.DataFrame], test: pd.DataFrame,
                          target: str) -> pd.DataFrame:
    """Logistic regression on one-hot schema labels: accuracy on the real held-out rows.

    Adds the majority-class baseline of the first training set (the real data).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    features = [c for c in test.columns if c != target]
    truth = test[target].astype(str)
    rows = []
    for name, train in train_sets.items():
        labels = train[target].astype(str)
        if labels.nunique() < 2:  # a release may lack a class entirely; predict the one it has
            predicted = np.full(len(test), labels.iloc[0])
        else:
            classifier = make_pipeline(OneHotEncoder(handle_unknown="ignore"),
                                       LogisticRegression(max_iter=2000))
            classifier.fit(train[features].astype(str), labels)
            predicted = classifier.predict(test[features].astype(str))
        rows.append({"training data": name, "rows": len(train),
                     "accuracy": float((predicted == truth).mean())})
    majority = next(iter(train_sets.values()))[target].astype(str).mode().iloc[0]
    rows.append({"training data": f"majority class ({majority})", "rows": 0,
                 "accuracy": float((truth == majority).mean())})
    return pd.DataFrame(rows)


def plot_sweep(summary: pd.DataFrame, out: Path, beta: float = PLOT_BETA) -> list[Path]:
    """One PNG per workload: average and maximum error at β vs ε, one line per method."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    paths = []
    chosen = summary[np.isclose(summary["beta"], beta)]
    for workload in ("Q1", "Q2", "Q3"):
        rows = chosen[chosen["workload"] == workload]
        if rows.empty:
            continue
        figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
        for axis, stat in zip(axes, ("average", "maximum")):
            for method, group in rows.groupby("method", sort=False):
                if group["epsilon"].isna().all():  # ε-free reference: a horizontal line
                    axis.axhline(group[f"{stat}_mean"].iloc[0], linestyle="--", color="grey",
                                 label=method)
                    continue
                group = group.sort_values("epsilon")
                axis.errorbar(group["epsilon"], group[f"{stat}_mean"],
                              yerr=group[f"{stat}_std"].fillna(0), marker="o", capsize=3,
                              label=method)
            axis.set_xscale("log")
            axis.set_yscale("log")
            epsilons = sorted(rows["epsilon"].dropna().unique())
            axis.set_xticks(epsilons, labels=[f"{e:g}" for e in epsilons])
            axis.xaxis.set_minor_locator(NullLocator())  # only the swept ε as ticks
            axis.set_xlabel("ε")
            axis.set_title(f"{workload}: {stat} error over the best {beta:.0%}")
        axes[0].set_ylabel("absolute error (counts, n rows)")
        axes[1].legend(fontsize=8)
        figure.tight_layout(rect=(0, 0.04, 1, 1))
        figure.text(0.5, 0.01, OWNER_ONLY, ha="center", va="bottom", fontsize=8, color="grey")
        path = out / f"error-vs-epsilon-{workload.lower()}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


def _sweep_table(summary: pd.DataFrame, workload: str, beta: float = PLOT_BETA) -> pd.DataFrame:
    """Average error at β, 'mean ± std' over seeds, methods × ε."""
    rows = summary[(summary["workload"] == workload) & np.isclose(summary["beta"], beta)]
    cells = rows.assign(
        epsilon=rows["epsilon"].map(lambda e: "any" if math.isnan(e) else f"ε={e:g}"),
        value=[f"{m:.1f} ± {0.0 if math.isnan(s) else s:.1f}"
               for m, s in zip(rows["average_mean"], rows["average_std"])])
    table = cells.pivot(index="method", columns="epsilon", values="value").fillna("")
    return table.reindex(rows["method"].unique()).reset_index()


def write_report(data: TableSource, schema: Schema, out: Path, *,
                 epsilons: tuple[float, ...] = EPSILONS, seeds: int = 3,
                 delta: float = 2.0**-30, q3_sample: int | None = 100_000,
                 table_epsilon: float = 1.0, calibration_draws: int = 200_000,
                 test_data: TableSource | None = None, target: str | None = None,
                 force: bool = False) -> Path:
    """Run the sweep and write ``report.md`` with tables (md/csv/json), plots and accuracies.

    Every file is marked not DP; ``out`` must not lie inside a release directory unless ``force``.
    """
    check_outside_release(out, force)
    if table_epsilon not in epsilons:
        raise ValueError(f"the table ε {table_epsilon} is not among the swept {list(epsilons)}")
    if (test_data is None) != (target is None):
        raise ValueError("the classifier test needs both test data and a target attribute")
    if target is not None and target not in schema.names:
        raise ValueError(f"target {target!r} is not an attribute of schema {schema.name!r}")
    if target is not None and importlib.util.find_spec("sklearn") is None:
        # Fail before the sweep rather than after it.
        raise ValueError("the classifier test needs scikit-learn: pip install dp-dask[evaluate]")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    result = run_sweep(data, schema, epsilons=tuple(epsilons), seeds=tuple(range(seeds)),
                       delta=delta, q3_sample=q3_sample, table_epsilon=table_epsilon,
                       calibration_draws=calibration_draws)
    write_owner_csv(result.records, out / "sweep.csv")
    summary = summarise(result.records)
    write_owner_csv(summary, out / "sweep-summary.csv")
    sizes = workload_sizes(schema)
    title = f"(α, β) errors at ε = {table_epsilon:g}"
    notes = (f"Absolute error per counting query (n = {result.n_rows:,} rows), mean over "
             f"{seeds} seed(s); β keeps the best ceil(β·N) queries. Q3: "
             f"{result.workload.describe()}.")
    tables = write_tables(at_epsilon(result.records, table_epsilon), out, "alpha-beta", title,
                          notes, force=force)
    try:
        plots = plot_sweep(summary, out)
    except ImportError:
        plots = []
    sections = [
        f"# Utility report: {schema.name}",
        "The data owner's evaluation: it compares releases with the raw data, so neither it "
        "nor its inputs are part of a release. Noise comes from the seeded numpy sampler "
        "(reproducible, not private).",
        f"- rows n = {result.n_rows:,}; attributes m = {schema.m}; dummy columns d = {schema.d}\n"
        f"- workloads: |Q1| = {sizes['Q1']:,}, |Q2| = {sizes['Q2']:,}, |Q3| = {sizes['Q3']:,} "
        f"(evaluated: {result.workload.describe()})\n"
        f"- δ = {delta:.3g}; ε ∈ {{{', '.join(f'{e:g}' for e in epsilons)}}}; seeds "
        f"0..{seeds - 1} (noise and sampling); calibration draws {calibration_draws:,}",
        "## Methods\n\n" + "\n".join(f"- **{k}**: {v}" for k, v in METHODS.items()),
        "## " + title + "\n\n" + notes + "\n\n" + tables["md"].read_text().split("\n\n", 3)[3],
    ]
    for workload in ("Q1", "Q2", "Q3"):
        table = _sweep_table(summary, workload)
        if not table.empty:
            sections.append(f"## {workload}: average error at β = {PLOT_BETA:.0%} vs ε "
                            f"(mean ± std over seeds)\n\n" + markdown_table(table))
    if plots:
        sections.append("## Plots\n\n" + "\n\n".join(f"![{p.stem}]({p.name})" for p in plots))
    else:
        sections.append("## Plots\n\nSkipped: matplotlib is not installed "
                        "(`pip install dp-dask[plots]`).")
    if test_data is not None and target is not None:
        accuracies = _classifier_section(data, schema, result, test_data, target)
        write_owner_csv(accuracies, out / "classifier.csv")
        sections.append(
            f"## Classifier: predict {target!r}, test on held-out real rows\n\n"
            f"Logistic regression on one-hot schema labels; synthetic sets are seed 0 at "
            f"ε = {table_epsilon:g}, as many rows as the data.\n\n"
            + markdown_table(accuracies, "{:.4f}"))
    sections.append(f"Report computed in {time.perf_counter() - started:.0f} s.")
    path = out / "report.md"
    path.write_text(owner_only_markdown("\n\n".join(sections) + "\n"))
    return path


def _classifier_section(data: TableSource, schema: Schema, result: SweepResult,
                        test_data: TableSource, target: str) -> pd.DataFrame:
    lazy = {"real": labels_frame(data, schema), "test": labels_frame(test_data, schema)}
    lazy |= {method: sample_frame(model, result.n_rows, seed=0, decode="label")
             for method, model in result.kept_models.items()}
    frames = dict(zip(lazy, compute(*lazy.values())))
    test = frames.pop("test")
    return classifier_accuracies(frames, test, target)
