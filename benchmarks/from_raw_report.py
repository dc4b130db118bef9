"""docs/from-raw.md's tables from benchmarks.from_raw's JSON lines (``--report``).

First the summary: the naive path (no public information) of each table against issue 65's
"done when" thresholds, then per table the per-column tables of every path, point masses, pairs,
train-on-synthetic scores and times. Figures are means over the seeds of a path; a threshold is
met only where every seed meets it, and the value shown is then the worst seed's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.from_raw_scores import LEFT_OUT
from benchmarks.raw_tables import TARGETS

PATH_NAMES = {"naive": "naive", "codebook": "codebook", "mst": "MST (peer)", "aim": "AIM (peer)"}
PEERS = ("mst", "aim")
TYPES_EQUAL, INVENTED, LEVELS, OUTSIDE, POINT_GAP, MEAN_KS, WORST_KS = (
    0.0, 0.001, 0, 0.005, 0.02, 0.03, 0.10)
LOWER, HIGHER = False, True


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _values(record: dict[str, Any], metric: str) -> list[float]:
    return [c["ks_or_tvd"] for c in record["columns"].values()
            if c.get("metric") == metric and c.get("ks_or_tvd") is not None]


def _worst(values: list[float]) -> float:
    return max(values) if values else 0.0


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _gap(real: float | None, released: float | None) -> float | None:
    if real is None:
        return None
    return abs(real - (released if released is not None else 0.0))


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """One release's summary figures (None where it has none)."""
    columns = record["columns"].values()
    compared = [c for c in columns if "same_type" in c]
    pairs = record["pairs"]
    categorical = pairs.get("categorical")
    return {
        "types_equal": sum(bool(c["same_type"]) for c in compared),
        "types_total": len(compared),
        "invented_nulls": _worst([c["null_out"] for c in compared
                                  if c.get("null_in") == 0 and c.get("null_out") is not None]),
        "levels_lost": sum(len(c.get("levels_lost") or ()) for c in compared),
        "outside": _worst([c["outside_range"] for c in compared
                           if c.get("outside_range") is not None]),
        "point_gap": _worst([abs(p["released"] - p["real"])
                             for p in record["point_masses"].values()]),
        "mean_ks": _mean(_values(record, "KS")), "worst_ks": _worst(_values(record, "KS")),
        "mean_tvd": _mean(_values(record, "TVD")),
        "pearson_gap": _mean([g for p in pairs["numeric"] if (g := _gap(
            p["pearson_real"], p["pearson_released"])) is not None]),
        "spearman_gap": _mean([g for p in pairs["numeric"] if (g := _gap(
            p["spearman_real"], p["spearman_released"])) is not None]),
        "cramer_gap": (None if categorical is None
                       else _gap(categorical["v_real"], categorical["v_released"])),
        "tstr": record["train_on_synthetic"],
    }


# The numeric figures set against the peer's: key → (label, higher is better)
AGAINST_PEER = {"mean_ks": ("mean KS", LOWER), "worst_ks": ("worst KS", LOWER),
                "mean_tvd": ("mean TVD", LOWER), "outside": ("outside range", LOWER),
                "invented_nulls": ("invented nulls", LOWER), "point_gap": ("point-mass gap", LOWER),
                "pearson_gap": ("Pearson gap", LOWER), "spearman_gap": ("Spearman gap", LOWER),
                "cramer_gap": ("Cramér's V gap", LOWER), "tstr": ("train on synthetic", HIGHER)}


def _runs(records: list[dict[str, Any]], table: str, path: str) -> list[dict[str, Any]]:
    return [r for r in records if r["table"] == table and r["path"] == path]


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if "error" not in r]


def _average(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [figures(r)[key] for r in _ok(runs)]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.2%}"


def _failure(runs: list[dict[str, Any]]) -> str | None:
    if not runs:
        return "not run"
    if _ok(runs):
        return None
    error = runs[0]["error"]
    return "did not finish" if runs[0].get("timed_out") else f"failed: {error[:140]}"


def _threshold(runs: list[dict[str, Any]], key: str, limit: float, show: Callable[[Any], str],
               per_run: Callable[[dict[str, Any]], Any] | None = None) -> str:
    """'met' / 'not met' where every seed's figure is at most ``limit``; the worst seed's."""
    failure = _failure(runs)
    if failure:
        return failure.split(":")[0]
    values = [per_run(r) if per_run else figures(r)[key] for r in _ok(runs)]
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    worst = max(values)
    return f"{'met' if worst <= limit else '**not met**'} ({show(worst)})"


def _against_peer(records: list[dict[str, Any]], table: str) -> tuple[str, str]:
    """Ahead of the best finished peer on every numeric figure; level for level as complete."""
    ours = _runs(records, table, "naive")
    peers = [p for p in PEERS if _ok(_runs(records, table, p))]
    if _failure(ours) or not peers:
        return (_failure(ours) or "no peer finished").split(":")[0], "—"
    behind, total = [], 0
    for key, (label, higher) in AGAINST_PEER.items():
        mine = _average(ours, key)
        theirs = [v for p in peers if (v := _average(_runs(records, table, p), key)) is not None]
        if mine is None or not theirs:
            continue
        total += 1
        best = max(theirs) if higher else min(theirs)
        if (mine < best) if higher else (mine > best):
            behind.append(label)
    ahead = (f"{'met' if not behind else '**not met**'} ({total - len(behind)} of {total}"
             + (f"; behind on {', '.join(behind)})" if behind else ")"))
    short = []
    columns = ours[0]["columns"] if _ok(ours) else {}
    for name in columns:
        mine = min(r["columns"][name].get("levels_present", 0) for r in _ok(ours))
        for peer in peers:
            theirs = min(r["columns"][name].get("levels_present", 0)
                         for r in _ok(_runs(records, table, peer)))
            if mine < theirs:
                short.append(f"{name} {mine}/{theirs}")
    levels = "met" if not short else f"**not met** ({'; '.join(sorted(set(short)))})"
    return ahead, levels


def summary(records: list[dict[str, Any]], tables: list[str]) -> str:
    lines = ["| threshold (naive path, total ε = 1) | " + " | ".join(tables) + " |",
             "|---|" + "---|" * len(tables)]

    def row(label: str, cell: Callable[[str], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(t) for t in tables) + " |")

    def types(table: str) -> str:
        runs = _runs(records, table, "naive")
        failure = _failure(runs)
        if failure:
            return failure.split(":")[0]
        worst = min((figures(r)["types_equal"], figures(r)["types_total"]) for r in _ok(runs))
        return f"{'met' if worst[0] == worst[1] else '**not met**'} ({worst[0]} / {worst[1]})"

    row("Arrow types equal to the input's", types)
    row("no invented nulls (≤ 0.1 % where none)", lambda t: _threshold(
        _runs(records, t, "naive"), "invented_nulls", INVENTED, _pct))
    row("every level with ≥ 1 % of rows kept", lambda t: _threshold(
        _runs(records, t, "naive"), "levels_lost", LEVELS, lambda v: f"{v} lost"))
    row("≤ 0.5 % outside the real range (worst column)", lambda t: _threshold(
        _runs(records, t, "naive"), "outside", OUTSIDE, _pct))
    row("point masses within 2 points (worst)", lambda t: _threshold(
        _runs(records, t, "naive"), "point_gap", POINT_GAP, lambda v: f"{100 * v:.1f} pts"))
    row("mean KS ≤ 0.03", lambda t: _threshold(
        _runs(records, t, "naive"), "mean_ks", MEAN_KS, _fmt))
    row("worst KS ≤ 0.10", lambda t: _threshold(
        _runs(records, t, "naive"), "worst_ks", WORST_KS, _fmt))
    row("ahead of the peer on every numeric figure", lambda t: _against_peer(records, t)[0])
    row("levels as complete as the peer's (leaked) list", lambda t: _against_peer(records, t)[1])
    return "\n".join(lines)


def _present(paths: list[str], records: list[dict[str, Any]], table: str) -> list[str]:
    return [p for p in paths if _runs(records, table, p)]


def _released(paths: list[str], records: list[dict[str, Any]], table: str) -> list[str]:
    """The paths with at least one release of ``table`` (a failed path is in the times)."""
    return [p for p in paths if _ok(_runs(records, table, p))]


def _short_type(arrow: str) -> str:
    for order, word in (("1", "ordered"), ("0", "unordered")):
        for width in ("int8", "int16", "int32"):
            arrow = arrow.replace(f"dictionary<values=string, indices={width}, ordered={order}>",
                                  f"dictionary ({word}, {width})")
    return arrow


def _column_mean(runs: list[dict[str, Any]], name: str, key: str) -> float | None:
    values = [r["columns"].get(name, {}).get(key) for r in _ok(runs)]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _distance(runs: list[dict[str, Any]], name: str) -> str:
    """A column's mean KS or TVD over the seeds; how many seeds left it out."""
    ok = _ok(runs)
    out = sum(r["columns"].get(name, {}).get("type_out") == LEFT_OUT for r in ok)
    mean = _fmt(_column_mean(runs, name, "ks_or_tvd"))
    if not out:
        return mean
    return f"{mean} (left out)" if out == len(ok) else f"{mean} ({out} of {len(ok)} left out)"


def column_tables(records: list[dict[str, Any]], table: str, paths: list[str]) -> str:
    """Per column: types, nulls and levels; then KS / TVD and the share outside the range."""
    runs = {p: _runs(records, table, p) for p in paths}
    first = next((r for p in paths for r in _ok(runs[p])), None)
    if first is None:
        return "No path released this table."
    names = [n for n, c in first["columns"].items() if "same_type" in c]
    heads = [PATH_NAMES[p] for p in paths]
    lines = ["| column | type in | " + " | ".join(f"type out: {h}" for h in heads)
             + " | null in | " + " | ".join(f"null out: {h}" for h in heads)
             + " | " + " | ".join(f"levels kept: {h}" for h in heads) + " |",
             "|---|---|" + "---|" * (3 * len(paths) + 1)]
    for name in names:
        type_in = first["columns"][name]["type_in"]
        cells = [name, _short_type(type_in)]
        for path in paths:
            ok = _ok(runs[path])
            outs = sorted({str(r["columns"].get(name, {}).get("type_out")) for r in ok})
            cells.append("—" if not ok else "=" if outs == [type_in]
                         else " / ".join(map(_short_type, outs)))
        cells.append(_pct(first["columns"][name].get("null_in")))
        cells += [_pct(_column_mean(runs[p], name, "null_out")) for p in paths]
        for path in paths:
            ok = _ok(runs[path])
            column = first["columns"][name]
            if "levels" not in column or not ok:
                cells.append("")
                continue
            common = column["levels_common"]
            kept = min(common - len(r["columns"][name].get("levels_lost") or ()) for r in ok)
            present = min(r["columns"][name].get("levels_present", 0) for r in ok)
            cells.append(f"{kept}/{common}; {present}/{column['levels']}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| column | metric | " + " | ".join(heads) + " | "
              + " | ".join(f"outside: {h}" for h in heads) + " |",
              "|---|---|" + "---|" * (2 * len(paths))]
    for name in names:
        metric = first["columns"][name].get("metric") or "—"
        cells = [name, metric]
        cells += [_distance(runs[p], name) for p in paths]
        cells += [_pct(_column_mean(runs[p], name, "outside_range")) if metric == "KS" else ""
                  for p in paths]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_tables(records: list[dict[str, Any]], table: str, paths: list[str]) -> str:
    """Point masses, pairs, train-on-synthetic scores and times of one table."""
    runs = {p: _ok(_runs(records, table, p)) for p in paths}
    first = next((r for p in paths for r in runs[p]), None)
    if first is None:
        return ""
    heads = [PATH_NAMES[p] for p in paths]
    lines = ["Point masses (share of the non-null rows at the column's most common value):", "",
             "| column | value | real | " + " | ".join(heads) + " |",
             "|---|---|---|" + "---|" * len(paths)]
    for name, mass in first["point_masses"].items():
        cells = [name, f"{mass['value']:g}", _pct(mass["real"])]
        for path in paths:
            shares = [r["point_masses"][name]["released"] for r in runs[path]
                      if name in r["point_masses"]]
            cells.append(_pct(float(np.mean(shares))) if shares else "—")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Pairs (the three real numeric pairs of largest |Spearman|, the text pair of "
              "largest Cramér's V):", "",
              "| pair | statistic | real | " + " | ".join(heads) + " |",
              "|---|---|---|" + "---|" * len(paths)]
    for k, pair in enumerate(first["pairs"]["numeric"]):
        for method in ("pearson", "spearman"):
            cells = [" × ".join(pair["pair"]), method.capitalize(),
                     _fmt(pair[f"{method}_real"], 2)]
            for path in paths:
                values = [r["pairs"]["numeric"][k][f"{method}_released"] for r in runs[path]
                          if len(r["pairs"]["numeric"]) > k]
                values = [v for v in values if v is not None]
                cells.append(_fmt(float(np.mean(values)), 2) if values else "—")
            lines.append("| " + " | ".join(cells) + " |")
    categorical = first["pairs"].get("categorical")
    if categorical:
        cells = [" × ".join(categorical["pair"]), "Cramér's V", _fmt(categorical["v_real"], 2)]
        for path in paths:
            values = [r["pairs"]["categorical"]["v_released"] for r in runs[path]
                      if r["pairs"]["categorical"]["v_released"] is not None]
            cells.append(_fmt(float(np.mean(values)), 2) if values else "—")
        lines.append("| " + " | ".join(cells) + " |")
    target = first["target"]
    lines += ["", f"Train on synthetic, test on {first['holdout_rows']:,} held-out real rows "
              f"(target `{target}`; HistGradientBoosting):", "",
              "| metric | train on real | " + " | ".join(heads) + " |",
              "|---|---|" + "---|" * len(paths)]
    metric = "ROC AUC" if TARGETS[table].task == "classification" else "R²"
    cells = [metric, _fmt(first["train_on_real"])]
    for path in paths:
        values = [r["train_on_synthetic"] for r in runs[path]
                  if r["train_on_synthetic"] is not None]
        cells.append(_fmt(float(np.mean(values))) if values else "—")
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def times(records: list[dict[str, Any]], table: str, paths: list[str]) -> str:
    """Per path: its runs, their mean seconds (the release, not its scoring), and why any
    run has no release (an error, or the cap a peer ran past)."""
    lines = ["| path | runs | s per run (mean) | not released |", "|---|---|---|---|"]
    for path in paths:
        runs = _runs(records, table, path)
        failed = [r for r in runs if "error" in r]
        why = "; ".join(sorted({r["error"][:160] for r in failed}))  # a cap names its seconds
        lines.append(f"| {PATH_NAMES[path]} | {len(runs)} | "
                     f"{np.mean([r['seconds'] for r in runs]):.0f} | "
                     f"{len(failed)}{': ' + why if why else ''} |")
    return "\n".join(lines)


def _column_worst(runs: list[dict[str, Any]], key: str, limit: float,
                  applies: Callable[[dict[str, Any]], bool] = lambda column: True
                  ) -> dict[str, float]:
    """Per column of the released seeds ``runs``: the worst seed's ``key`` where it is above
    ``limit`` (``applies``: which columns the threshold is for)."""
    worst: dict[str, float] = {}
    for run in _ok(runs):
        for name, column in run["columns"].items():
            value = column.get(key)
            if value is not None and applies(column) and value > limit:
                worst[name] = max(value, worst.get(name, value))
    return worst


def _listed(found: dict[str, Any], show: Callable[[Any], str]) -> str:
    ranked = sorted(found.items(), key=lambda item: item[1], reverse=True)
    return ", ".join(f"{name} {show(value)}" for name, value in ranked)


def _table_losses(records: list[dict[str, Any]], table: str) -> dict[str, str]:
    """What the naive path of ``table`` misses, threshold by threshold (the worst seed's)."""
    runs = _runs(records, table, "naive")
    if _failure(runs):
        return {"released": _failure(runs) or ""}
    ok = _ok(runs)
    lost: dict[str, str] = {}
    left_out = {n for r in ok for n, c in r["columns"].items() if c.get("type_out") == LEFT_OUT}
    changed = sorted({f"{n} ({_short_type(c['type_in'])} → {_short_type(c['type_out'])})"
                      for r in ok for n, c in r["columns"].items()
                      if "same_type" in c and not c["same_type"] and n not in left_out})
    if left_out or changed:
        lost["types"] = ", ".join(changed + ([f"left out: {', '.join(sorted(left_out))}"]
                                             if left_out else []))
    invented = _column_worst(runs, "null_out", INVENTED, lambda c: c.get("null_in") == 0)
    if invented:
        lost["nulls"] = _listed(invented, _pct)
    levels = {n: max(len(r["columns"][n].get("levels_lost") or ()) for r in ok)
              for n, c in ok[0]["columns"].items() if "levels_common" in c}
    if any(levels.values()):
        common = ok[0]["columns"]
        lost["levels"] = ", ".join(f"{n} {k} of {common[n]['levels_common']}"
                                   for n, k in levels.items() if k)
    outside = _column_worst(runs, "outside_range", OUTSIDE)
    if outside:
        lost["outside"] = _listed(outside, _pct)
    gaps: dict[str, float] = {}
    for run in ok:
        for name, mass in run["point_masses"].items():
            gap = abs(mass["released"] - mass["real"])
            if gap > POINT_GAP:
                gaps[name] = max(gap, gaps.get(name, gap))
    if gaps:
        masses = ok[0]["point_masses"]
        lost["points"] = ", ".join(
            f"{n} at {masses[n]['value']:g} ({_pct(masses[n]['real'])} real, "
            f"{100 * g:.1f} pts off)" for n, g in sorted(gaps.items(), key=lambda i: -i[1]))
    mean_ks = max((figures(r)["mean_ks"] or 0.0) for r in ok)
    if mean_ks > MEAN_KS:
        lost["mean_ks"] = _fmt(mean_ks)
    worst = _column_worst(runs, "ks_or_tvd", WORST_KS, lambda c: c.get("metric") == "KS")
    if worst:
        lost["worst_ks"] = ", ".join(f"{n} {_fmt(v)}{' (left out)' if n in left_out else ''}"
                                     for n, v in sorted(worst.items(), key=lambda i: -i[1]))
    ahead, complete = _against_peer(records, table)
    if "not met" in ahead:
        lost["peer"] = ahead.split("; behind on ", 1)[-1].rstrip(")")
    if "not met" in complete:
        lost["peer_levels"] = complete.split("(", 1)[-1].rstrip(")")
    return lost


LOSS_LABELS = {"released": "no release", "types": "Arrow types differ",
               "nulls": "invented nulls (> 0.1 % where the input has none)",
               "levels": "levels with ≥ 1 % of the rows lost",
               "outside": "outside the real range (> 0.5 %)",
               "points": "point masses off by more than 2 points",
               "mean_ks": "mean KS above 0.03", "worst_ks": "columns with KS above 0.10",
               "peer": "behind the best peer on",
               "peer_levels": "fewer real levels than the peer's leaked list (ours/peer's)"}


def losses(records: list[dict[str, Any]], tables: list[str]) -> str:
    """The done-when bar, threshold by threshold: the tables and columns where the naive path
    misses it (worst seed)."""
    found = {table: _table_losses(records, table) for table in tables}
    lines = []
    for key, label in LOSS_LABELS.items():
        where = [f"{table}: {lost[key]}" for table, lost in found.items() if key in lost]
        if where:
            lines.append(f"- **{label}**: " + "; ".join(where) + ".")
    return "\n".join(lines) or "- Nowhere: every threshold met on every table."


def run_facts(records: list[dict[str, Any]]) -> str:
    """The command(s), when, how long, on what machine under what load, with which versions."""
    machines = [r["machine"] for r in records]
    commands = sorted({m["command"] for m in machines if "command" in m})
    starts = [m["run_started_utc"] for m in machines if "run_started_utc" in m]
    ends = [r["finished_utc"] for r in records if "finished_utc" in r]
    loads = [m["load_1min"] for m in machines]
    first = machines[0]
    when = ""
    if starts and ends:
        wall = (datetime.fromisoformat(max(ends)) - datetime.fromisoformat(min(starts)))
        minutes = wall.total_seconds() / 60
        when = (f"started {min(starts).replace('+00:00', ' UTC')}, wall time {minutes:.0f} "
                "min (first start to last release); ")
    peers = {(r.get("smartnoise-synth"), r.get("opendp")) for r in records
             if r["path"] in PEERS and r.get("smartnoise-synth")}
    versions = dict(first.get("versions", {}))
    text = (f"`{'`; `'.join(commands) or 'python -m benchmarks.from_raw'}`: {when}"
            f"{first['cpus']}-CPU {first['processor']} machine, Python {first['python']}, "
            f"commit{'s' if len({m['commit'] for m in machines}) > 1 else ''} "
            f"{', '.join(sorted({m['commit'] for m in machines}))}; 1-minute load "
            f"{min(loads):.1f}–{max(loads):.1f} during the run (a shared machine: the seconds "
            "below are under that load); "
            + ", ".join(f"{name} {v}" for name, v in versions.items()))
    if peers:
        text += "; " + ", ".join(f"smartnoise-synth {s} with OpenDP {o}" for s, o in sorted(peers))
    return text + "."


def report(path: Path) -> str:
    """The results section of docs/from-raw.md from the JSON lines at ``path``."""
    records = load(path)
    tables = list(dict.fromkeys(r["table"] for r in records))
    paths = [p for p in PATH_NAMES if any(r["path"] == p for r in records)]
    text = ["## Measured", "", run_facts(records), "", METHOD, "",
            "### Against the issue's bar (naive path, total ε = 1)", "",
            summary(records, tables), "", "### Where we lose", "", losses(records, tables)]
    for table in tables:
        released = _released(paths, records, table)
        rows = records[[r["table"] for r in records].index(table)]["rows"]
        text += ["", f"### {table} ({rows:,} input rows)", "",
                 column_tables(records, table, released), "",
                 detail_tables(records, table, released), "",
                 times(records, table, _present(paths, records, table))]
    return "\n".join(text)


METHOD = """\
Each table of [`raw_tables.py`](../benchmarks/raw_tables.py) is written as typed Parquet the way
a pandas user would (`DataFrame.to_parquet`), split once (seeded) into the input (80 %) and
held-out real rows; every path gets the same total ε = 1 and δ = 1e-9:

- **naive**: no public information, the one command (`dp-dask synth --data T --epsilon 1`);
- **codebook**: the table's documented ranges, levels and recording precision (a codebook a
  user writes from the data's public documentation, never from the data: `raw_tables.py`'s
  `CODEBOOKS`), the columns it leaves out drafted under DP with 0.1 of ε, the release with the
  rest;
- **MST (peer)**, **AIM (peer)**: smartnoise-synth on the raw frame with `preprocessor_eps` 0.1
  (its DP bounds of the continuous columns, out of the same total ε), identifiers left out; its
  category lists are read from the data without ε (a leak: compare level completeness with that
  in mind). AIM under a time cap (`--aim-timeout`), one seed.

Our paths use numpy's seeded noise (`--noise-sampler numpy`), so every figure reproduces: not
private releases; the peer's OpenDP noise cannot be seeded. Figures are means over a path's
seeds; a threshold is met only where every seed meets it (the worst seed's figure shown). Per
column: Arrow type in → out (`=`: equal), KS (numeric and timestamp columns, every real value,
those beyond any bin too) or TVD (text), the share of released values outside the real
[min, max], null shares in and out, levels kept (kept / real levels with ≥ 1 % of the rows;
real levels present at all / all real levels). A column a release leaves out counts as lost:
KS or TVD 1, its levels lost, "left out" in the tables. Point masses: a numeric column's most
common value where it holds ≥ 5 % of the non-null rows. Pairs: Pearson and Spearman of the
three real numeric pairs of largest |Spearman|, Cramér's V of the real text pair of largest V.
Train on synthetic, test on the held-out real rows: scikit-learn's HistGradientBoosting, for the
table's target. An evaluation for the data owner: it reads raw values."""


BEGIN, END = "<!-- benchmarks.from_raw: begin -->", "<!-- benchmarks.from_raw: end -->"


def write_section(doc: Path, lines: Path) -> None:
    """Replace what stands between ``doc``'s markers (``BEGIN``, ``END``) by the results section
    of ``lines``; a doc without the markers is refused, so nothing hand-written is overwritten."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc} has no {BEGIN} … {END} markers around its results section")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    doc.write_text(f"{head}{BEGIN}\n{report(lines)}\n{END}{tail}")
