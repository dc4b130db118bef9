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
from dp_dask.config import DemoSpec
from dp_dask.copula.sample import choose_device
from dp_dask.data.counts import count_graph
from dp_dask.data.io import local_only, read_table
from dp_dask.evaluate.queries import marginal_distances, release_labels
from dp_dask.synthesizer import Synthesizer


def arguments() -> argparse.ArgumentParser:
    """The options of ``demo``, which a job config with ``job: demo`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--demo-rows", type=positive_int, default=1_000_000,
                        help="rows of demo data")
    privacy_options(parser)
    sampling_options(parser, out_default=Path("dp-dask-demo"), summary=False)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="generate census-like data and release it",
                               parents=[arguments()])
    demo.set_defaults(run=run, preflight=preflight)


def preflight(spec: DemoSpec) -> None:
    check_method_options(spec.method, spec.method_options)
    # before the fit spends any budget
    choose_device(spec.sampling_device, Synthesizer.methods[spec.method].gpu_sampling,
                  f"method {spec.method!r}")
    spec.out = local_only(spec.out, "--out")  # the demo writes its input data there too
    check_release_out(spec)


def run(spec: DemoSpec) -> None:
    from dp_dask.data.demo import write_census

    started = time.perf_counter()
    out = Path(spec.out)  # local: preflight
    data = write_census(out / "census.parquet", n_rows=spec.demo_rows, seed=spec.seed,
                        overwrite=True)
    print(f"wrote {spec.demo_rows:,} census-like rows to {data} "
          f"in {time.perf_counter() - started:.1f}s")
    # the demo data is generated here and public: its spec has no ledger, nothing is recorded
    synthesizer = new_synthesizer(spec, "demo").fit(data)
    paths = {"model": synthesizer.save(out / "model")}
    paths |= synthesizer.write(out / "release", spec.rows, seed=spec.seed,
                               partition_rows=spec.partition_rows, device=spec.sampling_device,
                               decode=spec.decode, with_binary=spec.zarr)
    report(synthesizer, paths)
    # The demo data is itself synthetic and public, so comparing with it reveals nothing.
    schema = synthesizer.schema
    real, synthetic = compute(count_graph(read_table(data, schema), schema),
                              count_graph(release_labels(paths["parquet"], schema),
                                          schema.as_labels()))
    print("utility (total variation distance, 0 = identical):")
    print(json.dumps(marginal_distances(real, synthetic, schema), indent=2))
    from dp_dask.evaluate.values import compare_values  # scipy.stats: ~1 s to import

    values = compare_values(data, paths["parquet"], schema, seed=spec.seed)
    if values is not None:
        print("values (KS, 0 = identical; W1 in the column's unit): " + "; ".join(
            f"{row['column']} KS {row['KS']:.4f} W1 {row['W1']:.3g}"
            for row in values.metrics.to_dict(orient="records")))


