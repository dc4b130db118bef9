"""The default's model choice (issue 68): at each ε and table shape, the release of either model
(``cliques: pairs`` and, where the joint fits, ``cliques: joint``) scored on Q1/Q2/Q3 beside
the model the public rule (``cliques: auto``, the default; methods/marginals/choice.py) picks.

    python -m benchmarks.model_choice [--tables planted8 planted adult7 gauss6 adult14 demo
        adult15 flights] [--epsilons 0.5 1 2 5] [--seeds 2] [--first-seed 0]
        [--models pairs joint adaptive] [--neighbours add_remove] [--out FILE.jsonl]

Tables: planted / planted8 (benchmarks.cliques: tall narrow, planted 3- and 4-way structure),
adult7 (private-pgm's discretized Adult in shared/data, its 7 columns of at most 16 values:
48,842 rows, a joint of 241,920 cells), gauss6 (a tall narrow latent-Gaussian table of
benchmarks.shapes, 200 k rows, 6 attributes of 2–4 values: dependence that pairs mostly carry),
adult14 (all 14 discretized columns: the joint is over ``max_clique_cells``) and demo (the
1 M-row demo census, 15 attributes: over the cap too). Where the joint is over the cap only
``pairs`` runs (the rule has nothing to choose): there ``--models adaptive`` runs pairs with
AIM-like adaptive rounds instead (one per attribute, the default workload of every triple,
``adaptive_share`` 0.3, zCDP: adaptive.py), on adult15 (Adult's 15 columns, the ``adult``
schema's bins) and flights (benchmarks.raw_tables' flights-like table, 100 k rows generated, its
80 k input rows, the schema drafted from its public codebook and the rest under DP at ε 0.1,
seed 0, as benchmarks.from_raw's informed path). The auto release is the chosen model's byte
for byte, so it is not run again: the rule's pick is read from the joint release's record
(``privacy.model_choice``), which holds the expected errors of both.

Scored by the project's scorer (Q1/Q2/Q3: mean error over the best 95 % of queries, and the
worst 2-way query; evaluate.queries), with fit + sample seconds (a joint release also its fitted
joint's own Q1 and its rows' mean 1-way distance from the joint's: :func:`joint_one_way`),
seeded numpy noise, δ = 1e-9.
Compares with the raw data: an evaluation for the data owner, not a release.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from dask.distributed import Client, LocalCluster

from benchmarks import from_raw
from benchmarks.cliques import Q3_SAMPLE, planted
from benchmarks.peers import DEFAULT_DATA, DELTA, error_summary, fitted, read_data, table_schema
from benchmarks.raw_tables import write_table
from benchmarks.shapes import FixedShape, partition_frame, schema_for
from dp_dask.data.demo import generate_census
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.queries import alpha_beta, evaluate_release
from dp_dask.methods.marginals.adaptive import rounds_for
from dp_dask.methods.marginals.choice import family_weights, weighted_ratio
from dp_dask.methods.marginals.cliques import cliques_possible

DISCRETE = Path(__file__).parents[2] / "shared" / "data" / "adult_discrete"
ADULT7 = ("workclass", "education-num", "marital-status", "relationship", "race", "sex",
          "income>50K")
GAUSS6 = FixedShape("gauss6", 200_000, 6, 19, float("nan"), (3, 4, 3, 2, 3, 4))
FAMILIES = ("Q1", "Q2", "Q3")


def adult_discrete(columns: tuple[str, ...] | None = None) -> tuple[Schema, pd.DataFrame]:
    """private-pgm's discretized Adult (codes), its ``columns`` (None: all 14), as labels."""
    domain = json.loads((DISCRETE / "adult-domain.json").read_text())
    columns = columns or tuple(domain)
    schema = Schema.from_json({"schema_version": 1, "name": "adult_discrete", "attributes": [
        {"name": c, "type": "categorical", "categories": [str(v) for v in range(domain[c])]}
        for c in columns]})
    frame = pd.read_csv(DISCRETE / "adult.csv", usecols=list(columns), dtype=str)
    return schema, frame[list(columns)]


def gauss6() -> tuple[Schema, pd.DataFrame]:
    spec, cuts = schema_for(GAUSS6)
    frame = partition_frame(spec, cuts, GAUSS6.rows, np.random.SeedSequence(0))
    return Schema.from_json(spec), frame


def demo() -> tuple[Schema, pd.DataFrame]:
    return load_schema("demo"), generate_census(1_000_000, seed=0).compute()


def flights() -> tuple[Schema, pd.DataFrame]:
    """The flights-like table's input rows and its schema (the module's docstring)."""
    work = Path(tempfile.mkdtemp(prefix="flights-"))
    table = write_table("flights", work, 100_000)
    from_raw._draft(table, work, 0, work / "schema.json", ["--public", str(table.codebook)])
    return load_schema(work / "schema.json"), pd.read_parquet(table.data)


TABLES = {"planted": lambda: planted(200_000), "planted8": lambda: planted(255_000, m=8),
          "adult7": lambda: adult_discrete(ADULT7), "gauss6": gauss6,
          "adult14": adult_discrete, "demo": demo,
          "adult15": lambda: (table_schema("all"), read_data(DEFAULT_DATA)), "flights": flights}


def run(table: str, schema: Schema, frame: pd.DataFrame, neighbours: str, model: str,
        epsilon: float, seed: int) -> dict:
    """One release of ``model`` (a ``cliques`` value, or "adaptive": pairs and rounds), scored."""
    start = time.perf_counter()
    options = ({"rounds": rounds_for(schema), "accountant": "zcdp", "config": {"cliques": "pairs"}}
               if model == "adaptive" else {"config": {"cliques": model}})
    synthesizer = fitted("marginals", schema, frame, epsilon, DELTA, seed, neighbours=neighbours,
                         **options)
    synthetic = synthesizer.sample(len(frame), seed=seed).compute()
    seconds = time.perf_counter() - start
    records, _ = evaluate_release(frame, synthetic, schema, q3_sample=Q3_SAMPLE, seed=0)
    summary = error_summary(records)
    return {"table": table, "rows": len(frame), "neighbours": neighbours, "model": model,
            "epsilon": epsilon, "seed": seed,
            "Q1": summary["Q1"]["avg95"], "Q2": summary["Q2"]["avg95"],
            "worst2": summary["Q2"]["max"], "Q3": summary["Q3"]["avg95"],
            "seconds": round(seconds, 1), **joint_one_way(synthesizer.model_, frame, synthetic),
            "model_choice": synthesizer.model_.metadata["privacy"].get("model_choice"),
            "rounds": [r["marginal"] for r in synthesizer.model_.metadata["privacy"]
                       .get("adaptive", {}).get("measured", [])]}


def joint_one_way(model: Any, frame: pd.DataFrame, synthetic: pd.DataFrame) -> dict:
    """A dense-joint release's 1-way counts beside its fitted joint's (none for pairs):
    "joint_Q1", the joint's own Q1 (its 1-way counts scaled to the n rows, as the scorer's),
    and "rows_off_joint", the mean |released − joint| 1-way count: what drawing the rows adds."""
    if getattr(model, "joint", None) is None:
        return {}
    schema, joint = model.schema, model.joint
    expected = np.concatenate([joint.sum(axis=tuple(b for b in range(schema.m) if b != a))
                               for a in range(schema.m)]) * (len(frame) / joint.sum())

    def one_way(rows: pd.DataFrame) -> np.ndarray:
        codes = encode_partition(rows[schema.names], schema)
        return np.concatenate([np.bincount(c, minlength=s) for c, s in zip(codes, schema.sizes)])

    return {"joint_Q1": round(alpha_beta(np.abs(one_way(frame) - expected))[0.95][0], 2),
            "rows_off_joint": round(float(np.abs(one_way(synthetic) - expected).mean()), 2)}


def summary_rows(lines: list[dict]) -> list[str]:
    """The markdown table: per table, notion and ε the two models' means over the seeds, the
    rule's pick and whether the other model beats it on every family."""
    out = []
    keys = sorted({(r["table"], r["neighbours"], r["epsilon"]) for r in lines},
                  key=lambda k: (k[0], k[1], k[2]))
    for table, neighbours, epsilon in keys:
        runs = [r for r in lines if (r["table"], r["neighbours"], r["epsilon"])
                == (table, neighbours, epsilon)]
        means = {model: {f: float(np.mean([r[f] for r in runs if r["model"] == model]))
                         for f in (*FAMILIES, "worst2", "seconds")}
                 for model in ("pairs", "joint") if any(r["model"] == model for r in runs)}
        joint_runs = [r for r in runs if r["model"] == "joint"]
        picks = ["joint" if rule_ratio(r["model_choice"]) < 1 else "pairs"
                 for r in joint_runs] or ["pairs (joint over the cap)"]
        pick = picks[0] if len(set(picks)) == 1 else "/".join(picks)
        beaten = ""
        if len(means) == 2 and len(set(picks)) == 1:
            other = "pairs" if pick == "joint" else "joint"
            if all(means[other][f] < means[pick][f] for f in FAMILIES):
                beaten = f" **beaten by {other} on every family**"
        ratio = (f"{np.mean([rule_ratio(r['model_choice']) for r in joint_runs]):.2f}"
                 if joint_runs else "")
        out.append(f"| {table}, {neighbours}, {epsilon:g} | {cell(means.get('pairs'))} "
                   f"| {cell(means.get('joint'))} "
                   f"| {ratio} | {pick}{beaten} |")
    return out


def rule_ratio(choice: dict) -> float:
    """The rule's weighted relative error of the joint, from a release's record: a record from
    before the families' weights (issue 68, their expected errors the same) with today's."""
    return weighted_ratio(choice["expected_error"],
                          choice.get("family_weights") or family_weights())


def adaptive_rows(lines: list[dict]) -> list[str]:
    """The markdown table of pairs beside pairs with rounds (``--models adaptive``): per table,
    notion and ε the means over the seeds."""
    out = []
    keys = sorted({(r["table"], r["neighbours"], r["epsilon"]) for r in lines
                   if r["model"] == "adaptive"})
    for key in keys:
        runs = [r for r in lines if (r["table"], r["neighbours"], r["epsilon"]) == key]
        means = {model: {f: float(np.mean([r[f] for r in runs if r["model"] == model]))
                         for f in (*FAMILIES, "worst2", "seconds")}
                 for model in ("pairs", "adaptive") if any(r["model"] == model for r in runs)}
        seeds = ", ".join(str(seed) for seed in sorted({r["seed"] for r in runs}))
        out.append(f"| {key[0]}, {key[1]}, {key[2]:g} (seeds {seeds}) "
                   f"| {cell(means.get('pairs'))} | {cell(means.get('adaptive'))} |")
    return out


def cell(means: dict[str, float] | None) -> str:
    """Q1 / Q2 / worst 2-way / Q3; seconds (None: the model did not run)."""
    if means is None:
        return "over the cap"
    return (f"{means['Q1']:.1f} / {means['Q2']:.1f} / {means['worst2']:.0f} / "
            f"{means['Q3']:.1f}; {means['seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--models", nargs="+", default=["pairs", "joint"],
                        choices=["pairs", "joint", "adaptive"],
                        help="the joint where it fits; adaptive: pairs with rounds")
    parser.add_argument("--neighbours", nargs="+", default=["add_remove"])
    parser.add_argument("--out", type=Path, default=None, help="append the runs (JSON lines)")
    parser.add_argument("--summary", type=Path, default=None,
                        help="print the table of an earlier --out file and stop")
    args = parser.parse_args()
    if args.summary:
        lines = [json.loads(x) for x in args.summary.read_text().splitlines() if x.strip()]
        print("\n".join(summary_rows([r for r in lines if r["model"] != "adaptive"])
                        + adaptive_rows(lines)))
        return
    lines = []
    with Client(LocalCluster(n_workers=1, threads_per_worker=2, processes=False)):
        for table in args.tables:
            schema, frame = TABLES[table]()
            models = [m for m in args.models if m != "joint" or cliques_possible(schema)]
            for neighbours in args.neighbours:
                for epsilon in args.epsilons:
                    for seed in range(args.first_seed, args.first_seed + args.seeds):
                        for model in models:
                            line = run(table, schema, frame, neighbours, model, epsilon, seed)
                            lines.append(line)
                            print(json.dumps(line), flush=True)
                            if args.out:
                                with args.out.open("a") as f:
                                    f.write(json.dumps(line) + "\n")
    print("\n".join(summary_rows([r for r in lines if r["model"] != "adaptive"])
                    + adaptive_rows(lines)))


if __name__ == "__main__":
    main()
