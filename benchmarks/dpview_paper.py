"""DPView in the paper's own setting, scored by the paper's own metrics, beside MST and AIM.

    python -m benchmarks.dpview_paper --private-pgm /work/mbi-repo \\
        --peer-python /work/peers-venv/bin/python --epsilons 0.1 0.5 1 2 --seeds 0 1 2 \\
        --aim-epsilons 1 --aim-seeds 0 --out benchmarks/results/adult/dpview-paper

The setting: UCI Adult's 15 attributes, train + test (32,561 + 16,281 = 48,842 rows), binned by
the built-in ``adult`` schema (its public bins: 2–42 values per attribute; the paper's own
discretisation is not published with it); add/remove neighbours (the paper's: Δ = 1 per view,
n private); DPView and DPView+ at the paper's fixed view size d = 5 and at the guideline's d
(``view_size="auto"``). The metrics, all on the binned codes: the average ℓ1 distance of the
1-, 2- and 3-way marginals as row fractions (every set of attributes), 1,000 random range
queries on 3 attributes each scored as |true − released| row fractions
(``dp_dask.evaluate.queries``), and the accuracy of a logistic regression predicting income,
trained on the release and tested on the real test split (which is part of every release's input,
as in the paper's use of all 48,842 rows; the real train split gives the reference).

Beside them: private-pgm's MST and AIM through ``benchmarks.peers.run_peer`` (the authors'
scripts, mbi 2.0, add/remove neighbours, (ε, δ = 1e-9)-DP: a weaker guarantee than DPView's
pure ε-DP at the same ε), and noise-free independent marginals (not private: the reference a
view-based release must beat). Each release's metrics are one JSON line in ``<out>/runs.jsonl``,
reused unless ``--rerun``; ``<out>/results.md`` is written from all of them.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.paths import ADULT_CSV, ADULT_TEST_CSV, RESULTS_DIR
from benchmarks.peers import (
    DELTA,
    cache_key,
    export_codes,
    peer_versions,
    read_codes,
    read_data,
    run_peer,
)
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.queries import marginal_l1_errors, range_fraction_errors
from dp_dask.evaluate.sweep import classifier_accuracies
from dp_dask.evaluate.tables import markdown_table

DATA = (str(ADULT_CSV), str(ADULT_TEST_CSV))
TARGET = "income"
# name -> (method, options): add/remove neighbours throughout, as in the paper
OURS = {"DPView (d = 5)": ("dpview", {"view_size": 5}),
        "DPView (guideline d)": ("dpview", {"view_size": "auto"}),
        "DPView+ (d = 5)": ("dpview+", {"view_size": 5}),
        "DPView+ (guideline d)": ("dpview+", {"view_size": "auto"})}
INDEPENDENT = "independent marginals (noise-free, not private)"


def paper_metrics(real: np.ndarray, synthetic: np.ndarray, schema: Schema,
                  test: pd.DataFrame) -> dict[str, float]:
    """ℓ1 of 1-/2-/3-way marginals (mean over attribute sets), range-query error (mean), and
    income accuracy on ``test``; codes are (m, rows)."""
    metrics = {f"l1_{k}way": float(marginal_l1_errors(real, synthetic, schema.sizes, k).mean())
               for k in (1, 2, 3)}
    metrics["range3"] = float(range_fraction_errors(real, synthetic, schema).mean())
    train = codes_to_frame(synthetic.T, schema)
    accuracy = classifier_accuracies({"release": train}, test, TARGET)
    metrics["accuracy"] = float(accuracy["accuracy"].iloc[0])
    return {key: round(value, 5) for key, value in metrics.items()}


def ours(method: str, options: dict[str, Any], schema: Schema, frame: pd.DataFrame,
         epsilon: float, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """A dp_dask release (seeded numpy noise, no ledger: Adult is public): its codes and what
    its model says of the view size and n."""
    from dp_dask.synthesizer import Synthesizer

    synthesizer = Synthesizer.create(method, schema, epsilon=epsilon, noise_sampler="numpy",
                                     noise_seed=seed, ledger=False, neighbours="add_remove",
                                     **options).fit(frame)
    synthetic = synthesizer.sample(seed=seed).compute()
    metadata = synthesizer.model.metadata
    return encode_partition(synthetic, schema), {
        "view_size": metadata["parameters"]["chosen_view_size"],
        "n_released": len(synthetic),
        "total_domain": metadata["model"]["layout"]["total_domain"]}


def independent(real: np.ndarray, seed: int) -> np.ndarray:
    """Each attribute's exact marginal, drawn independently: n rows, shuffled column by column."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(column) for column in real])


def run(args: argparse.Namespace) -> None:
    schema = load_schema("adult")
    frames = [read_data(path) for path in DATA]
    frame = pd.concat(frames, ignore_index=True)
    real = encode_partition(frame, schema)
    test = codes_to_frame(encode_partition(frames[1], schema).T, schema)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / "runs.jsonl"
    cache = {}
    if cache_path.exists() and not args.rerun:
        for line in cache_path.read_text().splitlines():
            row = json.loads(line)
            cache[(row["release"], row["epsilon"], row["seed"])] = row

    def record(row: dict[str, Any]) -> None:
        cache[(row["release"], row["epsilon"], row["seed"])] = row
        with cache_path.open("a") as stream:
            stream.write(json.dumps(row, sort_keys=True) + "\n")
        print(json.dumps(row), flush=True)

    reference = paper_metrics(real, encode_partition(frames[0], schema), schema, test)
    work = Path(args.work)
    data_csv, domain_json = export_codes(frame, schema, work)
    versions = peer_versions(args.peer_python) if args.private_pgm else {}
    for seed in args.seeds:
        if (INDEPENDENT, None, seed) not in cache:
            record({"release": INDEPENDENT, "epsilon": None, "seed": seed,
                    **paper_metrics(real, independent(real, seed), schema, test)})
    ours_runs = OURS | {f"DPView (d = {d})": ("dpview", {"view_size": d})
                        for d in args.view_sizes}
    for epsilon in args.epsilons:
        for seed in args.seeds:
            for name, (method, options) in ours_runs.items():
                if (name, epsilon, seed) in cache:
                    continue
                start = time.perf_counter()
                codes, about = ours(method, options, schema, frame, epsilon, seed)
                record({"release": name, "epsilon": epsilon, "seed": seed, **about,
                        "release_s": round(time.perf_counter() - start, 1),
                        **paper_metrics(real, codes, schema, test)})
    # the peers after all of ours: MST's first seed, AIM (slow at 15 attributes), MST's others
    seeds = args.peer_seeds or args.seeds
    runs = [("mst", epsilon, seeds[0]) for epsilon in args.epsilons]
    runs += [("aim", epsilon, seed) for epsilon in args.aim_epsilons for seed in args.aim_seeds]
    runs += [("mst", epsilon, seed) for seed in seeds[1:] for epsilon in args.epsilons]
    for peer, epsilon, seed in runs if args.private_pgm else []:
        label = f"{peer.upper()} (private-pgm)"
        if (label, epsilon, seed) in cache:
            continue
        row = run_peer(cache_key(peer, "all", epsilon, DELTA, seed),
                       checkout=Path(args.private_pgm), python=args.peer_python, options={},
                       data_csv=data_csv, domain_json=domain_json, work=work, frame=frame,
                       schema=schema,
                       q3_sample=1_000, timeout=args.peer_timeout, versions=versions)
        result = {"release": label, "epsilon": epsilon, "seed": seed, "status": row["status"],
                  "release_s": row["wall_s"]}
        if row["status"] == "ok":
            codes = read_codes(work / f"{peer}-all-eps{epsilon:g}-seed{seed}.csv", schema).T
            result |= paper_metrics(real, codes, schema, test)
        record(result)
        write_results(list(cache.values()), reference, out)
    write_results(list(cache.values()), reference, out)


def write_results(rows: list[dict[str, Any]], reference: dict[str, float], out: Path) -> Path:
    """Mean (± standard deviation over seeds) of every metric, by ε and release."""
    frame = pd.DataFrame([r for r in rows if r.get("status", "ok") == "ok"])
    metrics = ["l1_1way", "l1_2way", "l1_3way", "range3", "accuracy"]
    frame["epsilon"] = frame["epsilon"].fillna(np.inf)
    grouped = frame.groupby(["epsilon", "release"], sort=True)
    table = grouped[metrics].agg(["mean", "std"])
    lines = []
    for (epsilon, release), values in table.iterrows():
        cells = {m: f"{values[(m, 'mean')]:.4f} ± {np.nan_to_num(values[(m, 'std')]):.4f}"
                 for m in metrics}
        sizes = grouped.get_group((epsilon, release)).get("view_size")
        d = "" if sizes is None or sizes.isna().all() else "/".join(
            str(int(v)) for v in sorted(set(sizes.dropna())))
        lines.append({"ε": "—" if np.isinf(epsilon) else f"{epsilon:g}", "release": release,
                      "d": d, "seeds": len(grouped.get_group((epsilon, release))), **cells})
    lines.append({"ε": "—", "release": "real train split (reference)", "d": "", "seeds": 1,
                  **{m: f"{reference[m]:.4f}" for m in metrics}})
    text = ("# DPView in the paper's setting (Adult, 15 attributes, 48,842 rows, add/remove)\n\n"
            "Not differentially private: errors against the raw data (data owner's "
            "evaluation). Mean ± sd over seeds. ℓ1: average over attribute sets of the k-way "
            "marginal's ℓ1 distance (row fractions); range3: mean |true − released| row "
            "fraction of 1,000 random 3-attribute range queries; accuracy: logistic regression "
            "for income, tested on the real test split.\n\n"
            + markdown_table(pd.DataFrame(lines)) + "\n")
    path = out / "results.md"
    path.write_text(text)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--view-sizes", type=int, nargs="*", default=[],
                        help="DPView at these fixed d too (does the guideline pick well?)")
    parser.add_argument("--aim-epsilons", type=float, nargs="*", default=[1.0],
                        help="the ε at which AIM runs too (slow at 15 attributes)")
    parser.add_argument("--peer-seeds", type=int, nargs="*",
                        help="MST's seeds (default: --seeds)")
    parser.add_argument("--aim-seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--private-pgm", help="a private-pgm checkout (no peers without it)")
    parser.add_argument("--peer-python", default="/work/peers-venv/bin/python")
    parser.add_argument("--peer-timeout", type=float, default=3_600.0)
    parser.add_argument("--work", default="/tmp/dpview-paper-work",
                        help="the peers' code table and releases (large, not committed)")
    parser.add_argument("--out", default=str(RESULTS_DIR / "adult" / "dpview-paper"))
    parser.add_argument("--rerun", action="store_true", help="ignore <out>/runs.jsonl")
    return parser.parse_args(argv)


if __name__ == "__main__":
    from dp_dask.checks import DpDaskWarning

    warnings.simplefilter("ignore", DpDaskWarning)  # unused fine grids, open bins: known here
    run(parse_args())
