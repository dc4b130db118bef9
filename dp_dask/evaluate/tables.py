"""The data owner's evaluation tables: Markdown, CSV and JSON, each marked not DP, never
written inside a release directory (evaluations against raw data are never part of a release)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dp_dask.data.io import write_json
from dp_dask.privacy.labels import OWNER_ONLY


def markdown_table(frame: pd.DataFrame, float_format: str = "{:.1f}") -> str:
    """A GitHub Markdown table of a small frame (no tabulate dependency).

    Pipes inside cells are escaped (``Q2 \\|r\\|>=0.5``): unescaped, they split the cell.
    """
    def cell(value: object) -> str:
        text = float_format.format(value) if isinstance(value, float) else str(value)
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(cell(str(c)) for c in frame.columns) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def wide_table(records: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    """One row per method and workload; columns ``avg β``/``max β`` for each β."""
    wide = records.pivot_table(index=index, columns="beta", values=["average", "maximum"],
                               sort=False)
    columns = {}
    for beta in sorted(records["beta"].unique()):
        columns[f"avg {beta:.0%}"] = wide[("average", beta)]
        columns[f"max {beta:.0%}"] = wide[("maximum", beta)]
    return pd.DataFrame(columns).reset_index()


class ReleaseDirectoryError(ValueError):
    """An evaluation output would land inside a release directory."""


def release_holding(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` that holds a release's ``metadata.json``."""
    for directory in [path, *path.parents]:
        metadata = directory / "metadata.json"
        if not metadata.is_file():
            continue
        try:
            document = json.loads(metadata.read_text())
        except (OSError, ValueError):
            return directory  # unreadable: assume a release, to be safe
        if isinstance(document, dict) and "privacy" in document:
            return directory
    return None


def check_outside_release(out: Path, force: bool = False) -> None:
    """Refuse to write the data owner's evaluation inside a release directory unless ``force``."""
    release = release_holding(Path(out).resolve())
    if release is not None and not force:
        raise ReleaseDirectoryError(
            f"{out} is inside the release directory {release} (it holds a release's "
            "metadata.json); evaluation outputs are exact functions of the raw data, "
            f"{OWNER_ONLY}: write them elsewhere, or pass --force (force=True)")


def owner_only_markdown(text: str) -> str:
    """Markdown that opens with the not-DP, data-owner-only line."""
    return f"> **{OWNER_ONLY.capitalize()}**: computed from the raw data.\n\n{text}"


def write_owner_csv(frame: pd.DataFrame, path: Path) -> Path:
    """A CSV whose first line is a ``#`` comment marking it not DP (read with comment="#")."""
    with path.open("w", newline="") as handle:
        handle.write(f"# {OWNER_ONLY}: computed from the raw data\n")
        frame.to_csv(handle, index=False)
    return path


def write_tables(records: pd.DataFrame, out: Path, stem: str, title: str,
                 notes: str = "", *, force: bool = False) -> dict[str, Path]:
    """``<stem>.csv`` (long), ``<stem>.json`` (long) and ``<stem>.md`` (wide) under ``out``.

    Each is marked not DP; ``out`` must not lie inside a release directory unless ``force``.
    """
    check_outside_release(out, force)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / f"{stem}.csv", "json": out / f"{stem}.json", "md": out / f"{stem}.md"}
    write_owner_csv(records, paths["csv"])
    write_json(paths["json"], {"privacy": OWNER_ONLY, "differentially_private": False,
                               "title": title, "notes": notes,
                               "records": records.to_dict(orient="records")})
    table = wide_table(records, ["method", "workload", "queries"])
    paths["md"].write_text(owner_only_markdown(f"# {title}\n\n{notes}\n\n"
                                               f"{markdown_table(table)}\n"))
    return paths
