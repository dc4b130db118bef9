"""Every tuned number on the default method's path is documented (issue 66): a module constant
(UPPER_CASE, an int or a float) of the modules a default release runs through has an entry in
docs/tuning.md under its name, with the measurement that chose it or why it is no tuned number."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.postprocess.config import RowUpdateConfig
from dp_dask.synthesizer import Synthesizer, load_model
from dp_dask.tuning import changed

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dp_dask"
# The default method's release: its model, fit and sampler, the post-processing passes, the
# decoding of values and the privacy unit's bounding.
DEFAULT_PATH = [*sorted((PACKAGE / "methods" / "marginals").glob("*.py")),
                *sorted((PACKAGE / "postprocess").glob("*.py")),
                PACKAGE / "data" / "decode.py", PACKAGE / "data" / "units.py"]


def numeric_constants(path: Path) -> dict[str, int | float]:
    """The module-level public UPPER_CASE names of ``path`` bound to an int or float constant
    (a literal or an arithmetic of literals: ``2**33``)."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) and node.value else None)
        if not isinstance(target, ast.Name) or not re.fullmatch(r"[A-Z][A-Z0-9_]*", target.id):
            continue
        try:
            value = eval(compile(ast.Expression(node.value), str(path), "eval"), {})  # noqa: S307
        except Exception:  # a name or a call: not a literal number
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[target.id] = value
    return found


def test_item5_the_reader_finds_literal_and_computed_constants(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("A = 2**33\nB: float = 0.5\n_C = 1\nD = (1, 2)\nE = F\nG = True\n"
                      "def f():\n    H = 3\n")
    assert numeric_constants(module) == {"A": 2**33, "B": 0.5}


def test_item5_every_constant_on_the_default_path_is_in_tuning_md():
    documented = set(re.findall(r"^### (\w+)", (ROOT / "docs" / "tuning.md").read_text(),
                                re.MULTILINE))
    missing = [f"{path.relative_to(ROOT)}: {name} = {value!r}" for path in DEFAULT_PATH
               for name, value in numeric_constants(path).items() if name not in documented]
    assert not missing, ("constants on the default path without a '### NAME' entry in "
                         "docs/tuning.md (its measurement, or why it is no tuned number; or "
                         "make it a config field): " + "; ".join(missing))


def test_item5_the_marginals_config_reaches_the_sampler_s_passes(client, tmp_path):
    """RowUpdateConfig, BalanceConfig and ReweightConfig are fields of MarginalsConfig, set as
    dicts, recorded when changed, saved with the model and read by the sampler's passes."""
    config = MarginalsConfig(row_updates={"max_sweeps": 0}, balance={"proposals_per_row": 0.0},
                             reweight={"max_fit_iterations": 5})
    assert config.row_updates == RowUpdateConfig(max_sweeps=0)
    assert changed(config) == {"row_updates": {"max_sweeps": 0},
                               "balance": {"proposals_per_row": 0.0},
                               "reweight": {"max_fit_iterations": 5}}
    assert changed(MarginalsConfig()) == {}  # a default release records nothing new
    with pytest.raises(ValueError, match="RowUpdateConfig has no field 'sweeps'"):
        MarginalsConfig(row_updates={"sweeps": 0})
    frame = correlated_frame(3000)

    def fitted(tuned: dict | None) -> Synthesizer:
        return Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0,
                                  noise_sampler="numpy", noise_seed=0, ledger=False,
                                  config=tuned).fit(frame)

    default = fitted(None)
    tuned = fitted({"row_updates": {"max_sweeps": 0}, "balance": {"proposals_per_row": 0.0}})
    # the same noise (same seed), other post-processing: other rows
    assert np.array_equal(default.model.measurements[0].values,
                          tuned.model.measurements[0].values)
    rows = [s.sample(2000, seed=0).compute() for s in (default, tuned)]
    assert not rows[0].equals(rows[1])
    assert tuned.model.metadata["config"] == {"row_updates": {"max_sweeps": 0},
                                              "balance": {"proposals_per_row": 0.0}}
    saved = load_model(tuned.save(tmp_path / "model"))
    assert saved.config == tuned.model.config and saved.config.balance.proposals_per_row == 0
    pd.testing.assert_frame_equal(Synthesizer.from_model(saved).sample(2000, seed=0).compute(),
                                  rows[1])
