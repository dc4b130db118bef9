"""The one command's draft share, measured (docs/from-raw.md, "The draft's share").

For each raw table (benchmarks/raw_tables.py) and each share of a total ε = 1 given to the DP
draft, the one command (dp_dask.one_command.synthesize) releases a table, compared with the raw
one column by column: a numeric column by its KS statistic, a text column by its 1-way TVD; a
column left out of the release counts 1. Seeded noise (numpy), so the numbers reproduce.

    python -m benchmarks.draft_share [rows]
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp

from benchmarks.raw_tables import adult_frame, demo_frame, flights_frame
from dp_dask.cluster import dask_client
from dp_dask.one_command import synthesize

SHARES = (0.1, 0.2, 0.3)


def distances(raw: pd.DataFrame, released: pd.DataFrame) -> tuple[float, float]:
    """Mean KS over the numeric columns and mean 1-way TVD over the others (1 if left out)."""
    ks, tvd = [], []
    for column in raw.columns:
        numeric = pd.api.types.is_numeric_dtype(raw[column])
        if column not in released.columns:
            (ks if numeric else tvd).append(1.0)
        elif numeric:
            a = pd.to_numeric(raw[column], errors="coerce").dropna()
            b = pd.to_numeric(released[column], errors="coerce").dropna()
            ks.append(float(ks_2samp(a, b).statistic) if len(a) and len(b) else 1.0)
        else:
            p = raw[column].astype(str).value_counts(normalize=True)
            q = released[column].astype(str).value_counts(normalize=True)
            tvd.append(0.5 * float(p.subtract(q, fill_value=0).abs().sum()))
    return float(np.mean(ks)) if ks else float("nan"), float(np.mean(tvd)) if tvd else float("nan")


def main(rows: int = 20_000) -> None:
    tables = {"adult": adult_frame(), "demo": demo_frame(rows), "flights": flights_frame(rows)}
    print("| table | rows | draft share | mean KS | mean 1-way TVD | left out |")
    print("|---|---|---|---|---|---|")
    with dask_client(n_workers=2, quiet=True):
        for name, raw in tables.items():
            for share in SHARES:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    released = synthesize(raw, epsilon=1.0, draft_share=share, ledger=False,
                                          noise_sampler="numpy", noise_seed=0,
                                          dataset_name=name)
                ks, tvd = distances(raw, released)
                left = released.attrs["dp_dask"]["privacy"]["one_command"]["left_out"]
                print(f"| {name} | {len(raw):,} | {share:g} | {ks:.3f} | {tvd:.3f} | "
                      f"{', '.join(left) or '-'} |", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
