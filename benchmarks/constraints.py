"""What declared constraints buy (issue 58): the default method's releases of Adult and the
census-like demo at one ε, without and with constraints written from public documentation:
rows breaking each constraint, and Q1–Q3 (``dp-dask evaluate``'s queries: the 95th percentile
of the absolute errors), per seed and their mean.

    python -m benchmarks.constraints --out benchmarks/results/adult/constraints

Adult: ``relationship = Husband ⇒ sex = Male``, ``Wife ⇒ Female`` and the codebook's
``education ↔ education-num`` (a bijection: one dependency rules out the same cells as both);
the demo: "renters never have a mortgage" (dp_dask/data/demo.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
from distributed import Client, LocalCluster

from benchmarks.paths import ADULT_CSV
from dp_dask.data.demo import write_census
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.constraints import constraint_violations
from dp_dask.evaluate.queries import evaluate_release
from dp_dask.evaluate.tables import markdown_table
from dp_dask.synthesizer import Synthesizer

EDUCATION = ["Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th",
             "HS-grad", "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters",
             "Prof-school", "Doctorate"]  # education-num 1..16 (the UCI codebook)
CONSTRAINTS = {
    "adult": [
        {"forbid": {"relationship": ["Husband"], "sex": ["Female"]}, "name": "husband-male"},
        {"forbid": {"relationship": ["Wife"], "sex": ["Male"]}, "name": "wife-female"},
        {"depends": {"from": "education", "to": "education-num",
                     "table": {e: str(k) for k, e in enumerate(EDUCATION, 1)}},
         "name": "education-num"}],
    "demo": [{"forbid": {"tenure": ["Rent"], "has_mortgage": ["Yes"]}, "name": "no-mortgage"}],
}


def schemas(name: str) -> tuple[Schema, Schema]:
    plain = load_schema(name)
    return plain, load_schema({**plain.to_json(), "constraints": CONSTRAINTS[name]})


def one(data: Path, schema: Schema, checked: Schema, epsilon: float, seed: int,
        work: Path) -> dict[str, object]:
    started = time.perf_counter()
    synthesizer = Synthesizer.create("marginals", schema, epsilon=epsilon, noise_seed=seed,
                                     noise_sampler="numpy", ledger=False).fit(data)
    rows = synthesizer.model.n_rows
    paths = synthesizer.write(work / f"{schema.name}-{bool(schema.constraints)}-{seed}", rows,
                              seed=seed, decode="label")
    seconds = time.perf_counter() - started
    records, _ = evaluate_release(data, paths["parquet"], checked, seed=seed)
    at = records[records["beta"] == 0.95].set_index("workload")["maximum"]
    broken = constraint_violations(paths["parquet"], checked)
    return {"schema": schema.name, "constrained": bool(schema.constraints), "seed": seed,
            "rows": rows, "Q1": at["Q1"], "Q2": at["Q2"], "Q3": at["Q3"],
            "violations": dict(zip(broken["constraint"], broken["violations"])),
            "fit_and_write_s": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--demo-rows", type=int, default=200_000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with (tempfile.TemporaryDirectory() as tmp,
          LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="4GiB") as cluster,
          Client(cluster)):
        work = Path(tmp)
        demo = work / "demo.parquet"
        write_census(demo, args.demo_rows, seed=0)
        for name, data in (("adult", ADULT_CSV), ("demo", demo)):
            plain, constrained = schemas(name)
            for schema in (plain, constrained):
                for seed in range(args.seeds):
                    results.append(one(data, schema, constrained, args.epsilon, seed, work))
                    print(json.dumps(results[-1]), flush=True)
    (args.out / "constraints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    (args.out / "constraints.md").write_text(summary(results))
    print(summary(results))


def summary(results: list[dict[str, object]]) -> str:
    """The mean over seeds of each schema without and with constraints, as Markdown."""
    frame = pd.DataFrame(results)
    frame["violations"] = [sum(v.values()) for v in frame["violations"]]
    means = frame.groupby(["schema", "constrained"], as_index=False)[
        ["violations", "Q1", "Q2", "Q3"]].mean()
    return markdown_table(means.round(2)) + "\n"


if __name__ == "__main__":
    main()
