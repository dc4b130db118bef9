"""The data owner's HTML report of ``dp-dask evaluate``: its content, and how a real browser
renders it (headless Chromium; skipped when it is absent, required by .ci/browser)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH

from dp_dask import Synthesizer, load_schema
from dp_dask.cli import main
from dp_dask.data.counts import counts_from_codes
from dp_dask.evaluate.html import REPORT_NAME, associations
from dp_dask.privacy.labels import OWNER_ONLY

ATTRIBUTES = 4  # SMALL_SCHEMA: colour, size, flag, city
VALUE_COLUMNS = 1  # size: numeric, decoded to values (one histogram; Spearman needs two)
# the heatmap pair, one bar chart per attribute, a histogram of each value column's raw values
# (columns) and one of its values in the bins (values)
FIGURES = 1 + ATTRIBUTES + 2 * VALUE_COLUMNS


@pytest.fixture(scope="module")
def evaluated(client, data, tmp_path_factory) -> Path:
    """A small release of the correlated data, evaluated by the CLI into <tmp>/eval."""
    root = tmp_path_factory.mktemp("html-report")
    synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0, ledger=False)
    synthesizer.fit(data).write(root / "release", 4000, seed=0, partition_rows=1000)
    assert main(["evaluate", "--data", str(data), "--synthetic", str(root / "release"),
                 "--schema", str(SMALL_SCHEMA_PATH), "--out", str(root / "eval"),
                 "--q3-sample", "40", "--scheduler", client.scheduler.address, "--quiet"]) == 0
    return root / "eval"


def test_report_holds_figures_tables_and_privacy_parameters(evaluated):
    page = (evaluated / REPORT_NAME).read_text()
    assert OWNER_ONLY.capitalize() in page
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == FIGURES
    assert all(len(image) > 1000 for image in images)
    for name in ("colour", "size", "flag", "city"):
        assert f'alt="{name}: real vs synthetic shares"' in page
    assert 'alt="size: real vs synthetic values"' in page  # the value section
    assert 'alt="size: raw values, real vs synthetic"' in page  # the columns section
    assert "Spearman's ρ needs two value columns" in page
    metrics = pd.read_csv(evaluated / "values.csv", comment="#")
    assert list(metrics["column"]) == ["size"]
    assert f"<td>{metrics['KS'][0]:.6g}</td>" in page
    assert "<td>Q2 |r|&lt;0.5</td>" in page  # escaped by pandas, one cell
    metadata = json.loads((evaluated.parent / "release" / "metadata.json").read_text())
    assert metadata["privacy"]["differentially_private"] is True
    assert f"<td>{metadata['privacy']['epsilon']}</td>" in page
    assert f"<td>{metadata['privacy']['accountant']}</td>" in page
    assert "differentially private release</strong>" in page


def test_associations_are_one_for_a_function_and_zero_for_independent_attributes():
    schema = load_schema(SMALL_SCHEMA_PATH)
    rows = np.arange(15 * 40)
    codes = np.stack([rows % 3,  # colour
                      (rows // 3) % 4,  # size: independent of colour (all 12 pairs equally often)
                      (rows % 3 == 0).astype(int),  # flag: a function of colour
                      np.zeros_like(rows)])  # city: one label only
    v = associations(counts_from_codes(codes, schema), schema)
    assert v.loc["colour", "flag"] == pytest.approx(1.0)
    assert v.loc["colour", "size"] == pytest.approx(0.0, abs=1e-12)
    assert (v["city"].drop("city") == 0).all() and (np.diag(v) == 1).all()


def test_markdown_table_escapes_pipes(evaluated):
    lines = (evaluated / "alpha-beta.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    assert any("| Q2 \\|r\\|<0.5 |" in row for row in rows)
    # every row has as many cells as the header once escaped pipes are not separators
    widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
    assert len(widths) == 1


def test_report_is_refused_inside_a_release(client, data, evaluated, capsys):
    inside = evaluated.parent / "release" / "eval"
    code = main(["evaluate", "--data", str(data), "--synthetic", str(evaluated.parent / "release"),
                 "--schema", str(SMALL_SCHEMA_PATH), "--out", str(inside),
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2 and "inside the release directory" in capsys.readouterr().err
    assert not inside.exists()


def chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("DP_DASK_REQUIRE_BROWSER"):
        pytest.fail("DP_DASK_REQUIRE_BROWSER is set but chromium is not installed")
    return found


# Written into a copy of the page: after load, the DOM records what the browser rendered.
CHECKER = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight]);
  const result = {images, tables: document.querySelectorAll("table").length,
                  rows: document.querySelectorAll("tr").length,
                  owner: document.querySelector(".owner").innerText,
                  values: [...document.querySelectorAll("#values ~ div.figures img")]
                    .map(i => i.alt)};
  const out = document.createElement("pre");
  out.id = "checked";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script></body>"""


def run_chromium(binary: str, tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=10000", *arguments],
        capture_output=True, text=True, timeout=120, check=True)


def rendered(page: Path, tmp_path: Path) -> tuple[str, dict]:
    """Chromium's binary and what it rendered of ``page`` (CHECKER's record); skipped without
    chromium."""
    binary = chromium()
    if binary is None:
        pytest.skip("chromium is not installed (.ci/browser installs it)")
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECKER))
    dom = run_chromium(binary, tmp_path, "--dump-dom", checked.as_uri()).stdout
    found = re.search(r'<pre id="checked">(.*?)</pre>', dom, re.S)
    assert found, "the page's load handler did not run"
    return binary, json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_browser_renders_figures_and_tables(evaluated, tmp_path):
    binary, result = rendered(evaluated / REPORT_NAME, tmp_path)
    assert len(result["images"]) == FIGURES
    assert all(complete and width > 100 and height > 100
               for complete, width, height in result["images"])
    # privacy (ε; fields), columns (per column; quantiles), distances, (α, β), shares, values
    # (distances; quantiles)
    assert result["tables"] == 9
    assert result["values"] == ["size: real vs synthetic values"]  # rendered after its heading
    assert result["rows"] > 20
    assert OWNER_ONLY in result["owner"].lower()

    screenshot = tmp_path / "page.png"
    run_chromium(binary, tmp_path, f"--screenshot={screenshot}", "--window-size=1200,2400",
                 (evaluated / REPORT_NAME).as_uri())
    pixels = matplotlib.image.imread(screenshot)[..., :3]
    # not blank: text, the red banner and coloured figures, not one colour everywhere
    assert pixels.std() > 0.05
    assert ((pixels[..., 0] - pixels[..., 2]) > 0.3).any()  # the red owner-only banner
