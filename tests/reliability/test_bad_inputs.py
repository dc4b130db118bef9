"""Every bad input of docs/reliability.md's table, run through the real CLI: exit code and message
as the table states, and nothing written. Cases refused before the cluster starts run ``main``
in this process (a subprocess per case would cost ~5 s of imports each); the ones that depend on
the process (worker logs, connecting) run ``dp-dask`` in a subprocess with a hard timeout."""

from __future__ import annotations

import gzip
import json
import shlex
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA, correlated_frame
from reliability_table import assert_row, rows, run_cli
from test_hangs import CASES as HANG_CASES

from dp_dask.checks import (
    MAX_DUMMY_COLUMNS,
    MAX_TABLE_CELLS,
    CostError,
    DpDaskWarning,
    check_cost,
)
from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.synthesizer import Synthesizer

SYNTH = "synth --data {csv} --schema {schema} --out {out} --quiet"
SAMPLE = "sample --model {model} --out {out} --quiet"
FIT = "fit --data {csv} --schema {schema} --model {out} --quiet"
# case: (how it runs, arguments); "main" runs in this process, "scheduler" also in this
# process on the suite's cluster (a complete job), "subprocess" in a fresh process.
CASES: dict[str, tuple[str, str]] = {
    "rows-zero": ("main", SYNTH + " --rows 0"),
    "rows-negative": ("main", SYNTH + " --rows -5"),
    "rows-text": ("main", SYNTH + " --rows ten"),
    "partition-rows-zero": ("main", SAMPLE + " --partition-rows 0"),
    "workers-zero": ("main", SYNTH + " --workers 0"),
    "workers-negative": ("main", SYNTH + " --workers -1"),
    "memory-limit-text": ("main", SYNTH + " --memory-limit lots"),
    "epsilon-zero": ("main", SYNTH + " --epsilon 0"),
    "epsilon-nan": ("main", SYNTH + " --epsilon nan"),
    "delta-one": ("main", SYNTH + " --delta 1"),
    "seed-negative": ("main", SAMPLE + " --seed -1"),
    "out-is-file": ("main", "synth --data {csv} --schema {schema} --out {tmp}/afile"),
    "out-unwritable": ("main", "synth --data {csv} --schema {schema} --out /proc/dp-dask-out"),
    "model-out-is-file": ("main", "fit --data {csv} --schema {schema} --model {tmp}/afile"),
    "schema-missing": ("main", "synth --data {csv} --schema {tmp}/nope.json --out {out}"),
    "data-missing": ("scheduler", "synth --data {tmp}/nope.csv --schema {schema} --out {out} "
                                  "--dataset-name t"),
    "parquet-part-missing-column": ("main", "synth --data {tmp}/parts --schema {schema} "
                                            "--out {out}"),
    "gzip-named-csv": ("main", "synth --data {tmp}/gzip.csv --schema {schema} --out {out}"),
    "model-missing": ("main", "sample --model {tmp}/nomodel --out {out}"),
    "model-truncated": ("main", "sample --model {tmp}/truncated --out {out}"),
    "model-nan": ("main", "sample --model {tmp}/nan --out {out}"),
    "model-schema-edited": ("main", "sample --model {tmp}/edited --out {out}"),
    "too-many-categories": ("main", "fit --data {csv} --schema {tmp}/huge.json --model {out}"),
    "many-categories": ("scheduler", "fit --data {tmp}/wide.csv --schema {tmp}/wide.json "
                                     "--model {out}"),
    "epsilon-huge": ("scheduler", FIT + " --epsilon 1e9"),
    "epsilon-tiny": ("scheduler", FIT + " --epsilon 1e-9"),
    "non-utf8-csv": ("subprocess", "synth --data {tmp}/latin1.csv --schema {schema} --out {out} "
                                   "--workers 1 --quiet --dataset-name t"),
    "dead-scheduler": ("subprocess", SAMPLE + " --scheduler tcp://127.0.0.1:9"),
}
ENV = {"dead-scheduler": {"DASK_DP_DASK__SCHEDULER_TIMEOUT": "2s"}}


def categorical_schema(name: str, sizes: dict[str, int]) -> dict:
    return {"name": name, "attributes": [
        {"name": attribute, "categories": [str(i) for i in range(size)]}
        for attribute, size in sizes.items()]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Good and bad inputs, side by side; a copula model and corrupted copies of it."""
    tmp = tmp_path_factory.mktemp("bad-inputs")
    frame = correlated_frame(300, seed=3)
    frame.to_csv(tmp / "small.csv", index=False)
    (tmp / "schema.json").write_text(json.dumps(SMALL_SCHEMA))
    (tmp / "afile").write_text("not a directory")
    (tmp / "parts").mkdir()
    frame.iloc[:150].to_parquet(tmp / "parts" / "part.0.parquet")
    frame.iloc[150:].drop(columns=["flag"]).to_parquet(tmp / "parts" / "part.1.parquet")
    (tmp / "gzip.csv").write_bytes(gzip.compress((tmp / "small.csv").read_bytes()))
    latin = frame.head(10).copy()
    latin.loc[1, "city"] = "café"  # data line 2, file line 3
    latin.to_csv(tmp / "latin1.csv", index=False, encoding="latin-1")
    (tmp / "huge.json").write_text(json.dumps(categorical_schema(
        "huge", {"code": MAX_DUMMY_COLUMNS + 1000, "flag": 2})))
    (tmp / "wide.json").write_text(json.dumps(categorical_schema("wide", {"code": 2500,
                                                                          "flag": 2})))
    rng = np.random.default_rng(0)
    pd.DataFrame({"code": rng.integers(0, 2500, 300),
                  "flag": rng.integers(0, 2, 300)}).to_csv(tmp / "wide.csv", index=False)

    model = Synthesizer.create("copula", SMALL_SCHEMA, ledger=False, noise_sampler="numpy",
                               noise_seed=0, calibration_draws=2_000).fit(frame).save(
                                   tmp / "model")
    for name in ("truncated", "nan", "edited"):
        shutil.copytree(model, tmp / name)
    npz = (tmp / "truncated" / "model.npz").read_bytes()
    (tmp / "truncated" / "model.npz").write_bytes(npz[: len(npz) // 2])
    with np.load(tmp / "nan" / "model.npz") as loaded:
        arrays = dict(loaded)
    arrays["correlation"][0, 1] = arrays["correlation"][1, 0] = np.nan
    np.savez_compressed(tmp / "nan" / "model.npz", **arrays)
    document = json.loads((tmp / "edited" / "model.json").read_text())
    document["schema"]["attributes"][0]["categories"].append("pink")
    (tmp / "edited" / "model.json").write_text(json.dumps(document))
    return tmp


def test_every_row_of_the_table_is_tested():
    assert set(rows()) == set(CASES) | set(HANG_CASES)


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case, inputs, capsys, request):
    how, template = CASES[case]
    out = inputs / f"out-{case}"
    values = {"tmp": inputs, "csv": inputs / "small.csv", "schema": inputs / "schema.json",
              "model": inputs / "model", "out": out}
    args = shlex.split(template.format(**values))
    if how == "subprocess":
        done = run_cli(args, env=ENV.get(case))
        code, stderr = done.returncode, done.stderr
        # --quiet: the one-line message only, no worker's "Compute Failed" or traceback
        assert len(stderr.strip().splitlines()) == 1, stderr
    else:
        if how == "scheduler":
            args += ["--scheduler", request.getfixturevalue("client").scheduler.address]
        try:
            code = main(args)
        except SystemExit as exc:  # argparse: exit 2 and its usage message
            code = exc.code
        stderr = capsys.readouterr().err
    assert_row(case, code, stderr, inputs)
    assert "Traceback" not in stderr
    # the case's warning once, though the cost is checked both up front and by the fit (the
    # run's other warnings, e.g. the noise against a tiny table's counts, are other tests'),
    # and none where the case expects none
    expected = rows()[case].message
    assert stderr.count(expected if "warning" in expected else "dp-dask: warning") == (
        "warning" in expected)
    if code != 0:
        assert not out.exists(), "a refused job must write nothing"


def test_the_api_refuses_a_costly_schema_before_reading_data(inputs):
    """The cost guard is shared: the Python API refuses before it opens the (absent) input."""
    schema = inputs / "huge.json"
    with pytest.raises(CostError, match=f"'code' has {MAX_DUMMY_COLUMNS + 1000:,} categories"):
        Synthesizer.create("copula", schema, ledger=False).fit(inputs / "absent.csv")


def test_large_tables_are_refused_for_marginals_only():
    # 5,000 × 4,100 cells exceed the table limit with fewer dummy columns than their limit
    sizes = {"a": 5_000, "b": MAX_TABLE_CELLS // 5_000 + 100}
    schema = load_schema(categorical_schema("tables", sizes))
    with pytest.raises(CostError, match=r"table \('a', 'b'\) has 20,500,000 cells"):
        check_cost(schema, Synthesizer.methods["marginals"])
    with pytest.warns(DpDaskWarning, match="9,100 dummy columns"):
        assert check_cost(schema, Synthesizer.methods["copula"]).table_cells == 5_000 * sizes["b"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_cost(load_schema(SMALL_SCHEMA), Synthesizer.methods["marginals"])  # small: silent
