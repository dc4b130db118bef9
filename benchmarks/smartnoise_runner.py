"""smartnoise-synth's MST or AIM on one raw table, in the peer's own interpreter.

Run by :mod:`benchmarks.from_raw` as a child process with the Python of a virtual environment
that holds ``smartnoise-synth`` (it pins its own OpenDP and pulls torch: kept out of the
project's environment, see ../shared/notes/ops.md). It imports neither dp_dask nor the
benchmarks package.

The raw table goes in as a pandas user would hand it over: the synthesizer's ``fit_sample`` with
``preprocessor_eps`` (its DP bounds of continuous columns, taken out of the synthesizer's ε, so
``--epsilon`` is the total), ``nullable=True``, and column hints from the storage types (text and
dictionary columns categorical, numbers continuous). Timestamps, which it cannot take, go in as
epoch seconds and come back as the input's timestamp type; identifier columns (``--drop``) are
left out; every other column is written as the peer returns it. The category lists are read
from the data by the peer, without ε.

    python benchmarks/smartnoise_runner.py --data T.parquet --out R.parquet --synth mst \
        --epsilon 1 --preprocessor-eps 0.1 --delta 1e-9 --seed 0

Writes R.parquet and R.json (seconds, versions).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--synth", choices=("mst", "aim"), required=True)
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--preprocessor-eps", type=float, required=True)
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drop", nargs="*", default=[],
                        help="identifier columns, left out as a user of the peer would")
    args = parser.parse_args()
    random.seed(args.seed)
    # the peer draws from numpy's global generator (OpenDP's noise inside it cannot be seeded)
    np.random.seed(args.seed)  # noqa: NPY002

    from snsynth import Synthesizer

    table = pq.read_table(args.data)
    table = table.drop_columns([name for name in args.drop if name in table.column_names])
    frame = table.to_pandas()
    categorical, continuous, stamps = [], [], {}
    for field in table.schema:
        name, kind = field.name, field.type
        if pa.types.is_timestamp(kind):
            stamps[name] = kind
            frame[name] = frame[name].astype("int64").where(frame[name].notna()) / 1e9
            continuous.append(name)
        elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)
              or pa.types.is_dictionary(kind) or pa.types.is_boolean(kind)):
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
            categorical.append(name)
        else:
            frame[name] = frame[name].astype(float)
            continuous.append(name)
    start = time.perf_counter()
    synthesizer = Synthesizer.create(args.synth, epsilon=args.epsilon, delta=args.delta)
    released = synthesizer.fit_sample(frame, preprocessor_eps=args.preprocessor_eps,
                                      categorical_columns=categorical,
                                      continuous_columns=continuous, nullable=True)
    seconds = time.perf_counter() - start
    released = pd.DataFrame(released, columns=frame.columns)
    for name, kind in stamps.items():
        seconds_since = pd.to_numeric(released[name], errors="coerce")
        released[name] = pd.to_datetime(seconds_since * 1e9, unit="ns", utc=kind.tz is not None)
    for name in categorical:  # the peer's label decoder returns objects: text stays text
        released[name] = released[name].astype(object).where(released[name].notna(), None)
    pq.write_table(pa.Table.from_pandas(released, preserve_index=False), args.out)
    args.out.with_suffix(".json").write_text(json.dumps({
        "seconds": round(seconds, 1), "smartnoise-synth": version("smartnoise-synth"),
        "opendp": version("opendp"), "categorical": categorical, "continuous": continuous}))


if __name__ == "__main__":
    main()
