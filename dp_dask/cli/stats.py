"""``dp-dask stats``: per-column noisy histograms, plain DP (laplace) or Tabular-DDP."""

from __future__ import annotations

import argparse
from pathlib import Path

from dp_dask.checks import epsilon_value, positive_float, positive_int
from dp_dask.cli.common import check_data, check_ledger, check_out
from dp_dask.cli.options import (
    cluster_options,
    ledger_options,
    noise_options,
    privacy_unit,
    unit_options,
)
from dp_dask.cli.summary import job_summary, started_now, write_summary
from dp_dask.config import StatsSpec
from dp_dask.privacy.ledger import Ledger


def arguments() -> argparse.ArgumentParser:
    """The options of ``stats``, which a job config with ``job: stats`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--data", required=True, help="Parquet file/directory or CSV")
    parser.add_argument("--schema", required=True, help="schema JSON or built-in name")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for histograms.{json,csv} and metadata.json")
    parser.add_argument("--summary", default=None, metavar="PATH",
                        help="write a run summary JSON here (default: none; 'dp-dask run': "
                        "<out>.run.json)")
    parser.add_argument("--epsilon", type=epsilon_value, default=1.0, help="ε (default 1)")
    parser.add_argument("--mechanism", choices=["laplace", "tabular-ddp"], default="laplace",
                        help="laplace (ε-DP, default) or tabular-ddp (ε-dependent DP: holds "
                        "only if the network describes the population)")
    parser.add_argument("--k", type=positive_int, default=10,
                        help="tabular-ddp: columns per chunk (default 10)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--network", default=None, metavar="FILE",
                        help="tabular-ddp: public Bayesian network (JSON edges + CPTs)")
    source.add_argument("--public-sample", default=None, metavar="FILE",
                        help="tabular-ddp: public sample (CSV/Parquet) to learn the network from")
    source.add_argument("--network-from-noisy-tables", type=positive_float, default=None,
                        metavar="SHARE", help="tabular-ddp: spend this share of ε (0-1) on "
                        "DP noisy 2-way tables and learn the network from them")
    parser.add_argument("--smoothing", type=float, default=0.01, metavar="LAMBDA",
                        help="tabular-ddp: mix each edge's pair table with uniform at λ "
                        "(public; default 0.01)")
    noise_options(parser)
    unit_options(parser)
    ledger_options(parser)
    cluster_options(parser)
    return parser



def add_arguments(commands: argparse._SubParsersAction) -> None:
    stats = commands.add_parser(
        "stats", help="per-column noisy histograms: plain DP (laplace) or Tabular-DDP "
        "(dependent DP: weaker, opt-in)", parents=[arguments()])
    stats.set_defaults(run=run, preflight=preflight)


def preflight(spec: StatsSpec) -> None:
    check_out(spec)
    check_ledger(spec)
    check_data(spec)


def run(spec: StatsSpec) -> None:
    from dp_dask.stats import release_stats

    started = started_now()
    ledger = Ledger(spec.ledger)
    release = release_stats(
        spec.data, spec.schema, epsilon=spec.epsilon, mechanism=spec.mechanism, k=spec.k,
        network=spec.network, public_sample=spec.public_sample,
        network_share=spec.network_from_noisy_tables, smoothing=spec.smoothing,
        noise_sampler=spec.noise_sampler, noise_seed=spec.noise_seed, ledger=ledger,
        dataset_name=spec.dataset_name, run_id=spec.run_id,
        budget_epsilon=spec.budget_epsilon, force=spec.force, show_progress=not spec.quiet,
        privacy_unit=privacy_unit(spec), accept_row_level_draft=spec.accept_row_level_draft)
    privacy = release.metadata["privacy"]
    print(f"{privacy['label']}: {privacy['statement']} (ε={privacy['epsilon']:g})")
    if spec.mechanism == "tabular-ddp":
        plain = privacy["dp_without_assumption"]["epsilon"]
        print(f"   fallback to plain DP: {privacy['fallback']}; as plain DP (no network "
              f"assumption) the same noise gives ε={plain:.6g}")
    print("stage timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in release.timings.items()))
    paths = release.write(spec.out)
    for kind, path in paths.items():
        print(f"{kind:>9}: {path}")
    entries = release.metadata.get("ledger")
    write_summary(spec, spec.out, job_summary(
        spec, spec.mechanism, release.timings, privacy,
        None if entries is None else {"path": str(ledger.path), **entries}, paths, *started))
