"""google/dpsynth's SWIFT, AIM-GDP or MST on a code table, in the peers' own Python.

Not imported anywhere: ``benchmarks.dpsynth`` runs this file with the Python of a separate env
that holds dpsynth (Python 3.12, jax, mbi, current dp_accounting; benchmarks/DPSYNTH.md):

    python -P dpsynth_runner.py MECHANISM SEED CODES_CSV DOMAIN_JSON EPSILON DELTA SAVE_CSV

The table is the one private-pgm's scripts read (``benchmarks.peers.export_codes``: integer
codes, one column per attribute, and ``{"attr": size}``); every attribute is a
``CategoricalAttribute`` whose possible values are exactly the schema's codes 0 .. size-1, so
dpsynth sees the same public domains as dp_dask. Everything else is dpsynth's default
(``TabularConfig``: 10 % of ρ to the noisy total and 1-way marginals, no domain compression for
closed categorical domains; the mechanism's own config), calibrated by dpsynth to (ε, δ) under
its add/remove-one neighbours, noise from ``np.random.default_rng(SEED)``. Writes the synthetic
codes to SAVE_CSV and what ran beside it (SAVE_CSV with suffix ``.json``).
"""

import dataclasses
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

MECHANISMS = {"swift": "SWIFTConfig", "aim-gdp": "AIMGDPConfig", "mst": "MSTConfig"}
VERSIONS = ("dpsynth", "dp-accounting", "mbi", "jax", "jaxlib", "numpy", "pandas", "scipy")


def main(argv: list[str]) -> None:
    mechanism, seed, csv, domain_json, epsilon, delta, save = argv
    import dpsynth
    from dpsynth import discrete_mechanisms, domain

    sizes = json.loads(Path(domain_json).read_text())
    frame = pd.read_csv(csv, dtype=np.int64)[list(sizes)]
    domains = {name: domain.CategoricalAttribute(possible_values=list(range(size)))
               for name, size in sizes.items()}
    config = getattr(discrete_mechanisms, MECHANISMS[mechanism])()
    tabular = dpsynth.TabularConfig(domains=domains, discrete_mechanism=config)
    start = time.perf_counter()
    calibrated = tabular.calibrate(epsilon=float(epsilon), delta=float(delta))
    calibrate_s = time.perf_counter() - start
    result = calibrated(np.random.default_rng(int(seed)), frame)
    synthetic = result.synthetic_data[list(sizes)].astype(np.int64)
    synthetic.to_csv(save, index=False)
    base = calibrated.base_mechanism
    Path(save).with_suffix(".json").write_text(json.dumps({
        "mechanism": type(config).__name__,
        "config": {k: v for k, v in dataclasses.asdict(config).items()
                   if isinstance(v, int | float | str | bool | type(None))},
        "init_budget_fraction": tabular.init_budget_fraction,
        "calibrate_s": round(calibrate_s, 2), "release_s": round(time.perf_counter() - start, 2),
        "gdp_budget": getattr(base, "gdp_budget", None),
        "dp_event": str(calibrated.dp_event)[:2000],
        "python": platform.python_version(),
        "versions": {name: version(name) for name in VERSIONS}}))


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main(sys.argv[1:])
