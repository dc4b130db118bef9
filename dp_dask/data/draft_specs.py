"""The drafted schema and the spec helpers every drafting step shares: the :class:`Draft`, the
labels of its public bins (``missing``, ``other``), missing bins, identifiers, calendar features
and placeholders. The public draft (:mod:`dp_dask.data.draft`) and the steps under DP
(:mod:`dp_dask.data.draft_dp` and its drafters) build on this module, which imports none of
them: the drafting modules form no import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dp_dask.data.attribute import TODO
from dp_dask.data.ids import IdColumn
from dp_dask.privacy.labels import NON_PRIVATE_LABEL

MISSING, OTHER = "missing", "other"
DP_BINS = 10  # under DP: edges at the 1/10, ..., 9/10 quantiles (at most 10 bins)
# Storage kinds of a number; "number": integer or float, when the storage types are data.
NUMBER_KINDS = ("integer", "float", "number")


@dataclass
class Draft:
    """A drafted schema (JSON, possibly with placeholders) and what the user must still do."""

    schema: dict[str, Any]
    todo: dict[str, str] = field(default_factory=dict)  # column → what to fill in
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"drafted {len(self.schema['attributes'])} attribute(s) from public information"]
        spent = self.schema.get("drafted_under_dp")
        if spent:
            claim = "" if spent["differentially_private"] else \
                f" ({NON_PRIVATE_LABEL}: seeded noise, not DP)"
            unit = spent.get("privacy_unit", {})
            per = (f", per {unit['unit']!r} of at most {unit['max_rows']} rows"
                   if "max_rows" in unit else "")
            lines[0] = (f"drafted {len(self.schema['attributes'])} attribute(s): "
                        f"{len(spent['columns'])} from the data under DP (ε={spent['epsilon']:g}, "
                        f"δ={spent['delta']:.3g}{per}){claim}, the others from public "
                        "information")
            if spent["ledger"]:
                lines.append(f"  spent in the ledger {spent['ledger']['path']}: dataset "
                             f"{spent['ledger']['dataset_name']!r}, run "
                             f"{spent['ledger']['run_id']}")
        lines += [f"  note: {note}" for note in self.notes]
        if self.todo:
            lines.append(f"{len(self.todo)} attribute(s) to fill in before the schema is valid "
                         "(each is marked \"todo\" in the file):")
            lines += [f"  {name}: {what}" for name, what in self.todo.items()]
        else:
            lines.append("nothing to fill in: the schema is complete")
        return "\n".join(lines)


def with_missing_bin(spec: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    return {**spec, "extra": [*extra, MISSING], "on_missing": MISSING}


def free_label(label: str, taken: list[str]) -> str:
    """``label``, or with stars appended while a category or bin has that text."""
    while label in taken:
        label += "*"
    return label


def add_identifier(draft: Draft, column: str, kind: str, ids: str, why: str,
                   spec: dict[str, Any] | None = None) -> None:
    """Make ``column`` an identifier of the draft: a synthetic id column of the schema (of a
    public codebook's ``spec``, else by its storage ``kind``), or dropped (``ids`` "drop")."""
    if ids == "drop":
        draft.notes.append(f"{column}: an identifier ({why}): dropped (ids= drop)")
        return
    dtype = "string" if kind in ("text", "unknown") else "int64"
    column_spec = IdColumn.from_json({"name": column, "dtype": dtype, **(spec or {})})
    draft.schema.setdefault("ids", []).append(column_spec.to_json())
    draft.notes.append(f"{column}: an identifier ({why}): released as synthetic ids of format "
                       f"{column_spec.format!r}, drawn, never read (ids= drop to leave it out)")


IDS = ("synthetic", "drop")  # --ids: what an identifier column becomes


# The calendar features a datetime column with public years is drafted as, in recombination order.
CALENDAR_FEATURES = ("year", "month", "weekday", "hour")


def calendar_features(column: str, years: dict[str, float],
                      dtype: str | None) -> list[dict[str, Any]]:
    """Year (bins of the public ``years`` range), month, weekday and hour features of one
    datetime column: the release recombines them into one timestamp of the stored type
    (``dtype``; a date column keeps the default) — docs/releases.md, "Recombined timestamps"."""
    year = {"edges": years, **({"dtype": dtype} if dtype else {})}
    return [with_missing_bin({"name": f"{column}_{unit}", "type": "datetime", "source": column,
                               "unit": unit, **(year if unit == "year" else {})})
            for unit in CALENDAR_FEATURES]


def placeholder(name: str, kind: str) -> tuple[dict[str, Any], str]:
    if kind in NUMBER_KINDS:
        what = (f"numeric ({kind}): give public bounds as \"edges\": {{\"start\": 0, "
                f"\"stop\": 100, \"step\": 5}} (or ranges= {name}=0:100:5), then delete \"todo\"")
        return {"name": name, "type": "numeric",
                "edges": {"start": None, "stop": None, "step": None}, TODO: what}, what
    stored = "stored as text" if kind == "text" else "a CSV stores no type"
    what = (f"categorical? ({stored}): list the public \"categories\" (a codebook), or make it "
            "numeric with public \"edges\"; values outside can go to a public bin with \"extra\": "
            "[\"other\"], \"on_unknown\": \"other\"; then delete \"todo\"")
    return {"name": name, "type": "categorical", "categories": [], TODO: what}, what


def round_value(value: float) -> float | int:
    """Round float noise off (0.30000000000000004); integral values as ints, for the JSON."""
    value = round(float(value), 12)
    return int(value) if value.is_integer() else value
