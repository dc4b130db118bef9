"""``dp-dask demo``: generate census-like data and release it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dp_dask.checks import positive_int
from dp_dask.cli.common import check_release_out, new_synthesizer, report
from dp_dask.cli.options import (
    check_method_options,
    cluster_options,
    privacy_options,
    sampling_options,
)
from dp_dask.cluster import compute
from dp_dask.copula.sample import choose_device
from dp_dask.data.counts import count_graph
from dp_dask.data.io import local_only, read_table
from dp_dask.evaluate.queries import marginal_distances, release_labels
from dp_dask.synthesizer import Synthesizer


def add_arguments(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="generate census-like data and release it")
    demo.add_argument("--demo-rows", type=positive_int, default=1_000_000, help="rows of demo data")
    privacy_options(demo)
    sampling_options(demo, out_default=Path("dp-dask-demo"), summary=False)
    cluster_options(demo)
    demo.set_defaults(run=run, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    check_method_options(args.method, args.method_options)
    # before the fit spends any budget
    choose_device(args.sampling_device, Synthesizer.methods[args.method].gpu_sampling,
                  f"method {args.method!r}")
    args.out = local_only(args.out, "--out")  # the demo writes its input data there too
    check_release_out(args)


def run(args: argparse.Namespace) -> None:
    from dp_dask.data.demo import write_census

    started = time.perf_counter()
    data = write_census(args.out / "census.parquet", n_rows=args.demo_rows, seed=args.seed,
                        overwrite=True)
    print(f"wrote {args.demo_rows:,} census-like rows to {data} "
          f"in {time.perf_counter() - started:.1f}s")
    args.no_ledger = True  # the demo data is generated here and public: nothing to account for
    synthesizer = new_synthesizer(args, "demo").fit(data)
    paths = {"model": synthesizer.save(args.out / "model")}
    paths |= synthesizer.write(args.out / "release", args.rows, seed=args.seed,
                               partition_rows=args.partition_rows, device=args.sampling_device,
                               decode=args.decode, with_binary=args.zarr)
    report(synthesizer, paths)
    # The demo data is itself synthetic and public, so comparing with it reveals nothing.
    schema = synthesizer.schema
    real, synthetic = compute(count_graph(read_table(data, schema), schema),
                              count_graph(release_labels(paths["parquet"], schema),
                                          schema.as_labels()))
    print("utility (total variation distance, 0 = identical):")
    print(json.dumps(marginal_distances(real, synthetic, schema), indent=2))
    from dp_dask.evaluate.values import compare_values  # scipy.stats: ~1 s to import

    values = compare_values(data, paths["parquet"], schema, seed=args.seed)
    if values is not None:
        print("values (KS, 0 = identical; W1 in the column's unit): " + "; ".join(
            f"{row['column']} KS {row['KS']:.4f} W1 {row['W1']:.3g}"
            for row in values.metrics.to_dict(orient="records")))


