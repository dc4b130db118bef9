"""Every tuned number on the default method's path is configuration (issue 66): a module
constant (UPPER_CASE, an int or a float) of the modules a default release runs through is no
tuned number (docs/tuning.md, "Not tuned", with why) or a method parameter's default; a tuned
number is a field of the method's config, documented in docs/tuning.md with its measurement."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame
from test_unit_shape import PANEL_SCHEMA, K, panel

from dp_dask.data.schema import load_schema
from dp_dask.data.units import UnitConfig
from dp_dask.methods.marginals.config import PASSES, MarginalsConfig
from dp_dask.postprocess.config import RakingConfig, RowUpdateConfig
from dp_dask.privacy.accounting import DISCRETE_VARIANCE_SHIFT
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


def tuning_entries() -> dict[str, dict[str, str]]:
    """docs/tuning.md's ``### NAME`` entries (their text) by the ``## `` section holding them."""
    sections: dict[str, dict[str, str]] = {}
    for part in re.split(r"^## ", (ROOT / "docs" / "tuning.md").read_text(), flags=re.MULTILINE):
        heading, _, body = part.partition("\n")
        entries = re.split(r"^### (\S+)\n", body, flags=re.MULTILINE)
        sections[heading.strip()] = {name: text.strip()
                                     for name, text in zip(entries[1::2], entries[2::2])}
    return sections


def test_item5_every_constant_on_the_default_path_is_configuration_or_not_tuned():
    """A constant is listed under "Not tuned" (with a reason), or is the default of the
    marginals method's parameter of its name; every other tuned number is a config field."""
    entries = tuning_entries()
    parameters = inspect.signature(Synthesizer.methods["marginals"].__init__).parameters
    unplaced = []
    for path in DEFAULT_PATH:
        for name, value in numeric_constants(path).items():
            parameter = parameters.get(name.lower())
            if entries["Not tuned"].get(name):  # an entry with its reason
                continue
            if name in entries["Defaults of method parameters"]:
                assert parameter is not None and parameter.default == value, (
                    f"{name} = {value!r} is listed as the default of a parameter "
                    f"{name.lower()!r} of the marginals method, which has none of that default")
                continue
            unplaced.append(f"{path.relative_to(ROOT)}: {name} = {value!r}")
    assert not unplaced, ("tuned numbers on the default path that are no config field: make each "
                          "a field of MarginalsConfig (or a nested config), or list it under "
                          "'Not tuned' in docs/tuning.md with why: " + "; ".join(unplaced))


def test_item5_every_config_field_has_its_entry_in_tuning_md():
    """Each MarginalsConfig field and each field of its nested configs has a ``### field``
    entry under the config's section (the nested configs': their own), and so has each field
    of the privacy unit's UnitConfig under its section."""
    entries = tuning_entries()
    sections = {MarginalsConfig: next(h for h in entries if h.startswith("marginals")),
                UnitConfig: next(h for h in entries if "(`UnitConfig`" in h)}
    sections |= {kind: kind.__name__ for kind in PASSES.values()}
    missing = [f"{kind.__name__}.{f.name}" for kind, heading in sections.items()
               for f in dataclasses.fields(kind) if not entries.get(heading, {}).get(f.name)]
    assert not missing, "config fields without a '### field' entry in docs/tuning.md: " + \
        ", ".join(missing)


def fitted(frame: pd.DataFrame, tuned: dict | None) -> Synthesizer:
    """The marginals method on ``frame`` with the config fields ``tuned``, seeded noise."""
    return Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0,
                              noise_sampler="numpy", noise_seed=0, ledger=False,
                              config=tuned).fit(frame)


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
    default = fitted(frame, None)
    tuned = fitted(frame, {"row_updates": {"max_sweeps": 0},
                           "balance": {"proposals_per_row": 0.0}})
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


def test_item5_consistency_and_raking_are_config_that_reaches_their_passes(client, tmp_path):
    """ConsistencyConfig and RakingConfig, set as dicts of MarginalsConfig, are recorded when
    changed, saved with the model and read: the same noisy measurements, other consistent
    tables (consistency) or other rows (raking); the defaults record nothing."""
    frame = correlated_frame(3000)
    default = fitted(frame, None)
    assert "config" not in default.model.metadata
    strict = fitted(frame, {"consistency": {"signal_sigmas": 0.5, "dykstra_sweeps": 1}})
    assert strict.model.metadata["config"] == {
        "consistency": {"signal_sigmas": 0.5, "dykstra_sweeps": 1}}
    assert np.array_equal(default.model.measurements[-1].values,
                          strict.model.measurements[-1].values)
    pairs = default.model.marginals.two_way
    assert any(not np.allclose(pairs[p], strict.model.marginals.two_way[p]) for p in pairs)
    one_pass = fitted(frame, {"raking": {"max_passes": 1}})
    assert one_pass.model.config.raking == RakingConfig(max_passes=1)
    rows = [s.sample(2000, seed=0).compute() for s in (default, one_pass)]
    assert not rows[0].equals(rows[1])
    saved = Synthesizer.from_model(load_model(one_pass.save(tmp_path / "model")))
    pd.testing.assert_frame_equal(saved.sample(2000, seed=0).compute(), rows[1])
    with pytest.raises(ValueError, match="RakingConfig.window must be an integer > 0"):
        MarginalsConfig(raking={"window": 0})


def test_item5_a_budget_share_in_config_keeps_its_accounting(client):
    """``unit_share``, a budget share, moved into MarginalsConfig: a unit-shaped release records
    it in its privacy record (rho_split, budget_split) and the σ's follow it, the total ρ the
    same: the unit model's noise scales by √(0.2/0.4), the row model's by √(0.8/0.6) (τ of the
    discrete Gaussian's σ² = τ² + its variance shift, as gaussian_sigma calibrates it)."""
    frame = panel(600)

    def shaped(config: dict | None) -> Synthesizer:
        return Synthesizer.create("marginals", load_schema(PANEL_SCHEMA), epsilon=1.0,
                                  noise_sampler="numpy", noise_seed=11, ledger=False,
                                  privacy_unit={"column": "uid", "max_rows": K},
                                  unit_shape=True, config=config).fit(frame)

    default, tuned = shaped(None), shaped({"unit_share": 0.4})
    records = [s.model.metadata["privacy"] for s in (default, tuned)]
    for privacy, share in zip(records, (0.2, 0.4)):
        split = privacy["rho_split"]
        assert split["unit_model"] == pytest.approx(share * privacy["rho"], rel=1e-12)
        assert split["row_model"] == pytest.approx((1 - share) * privacy["rho"], rel=1e-12)
        assert f"({share:g} of the budget) to the unit model" in privacy["budget_split"]
    assert records[0]["rho"] == records[1]["rho"]
    assert records[1]["epsilon"] == records[0]["epsilon"] == 1.0
    assert tuned.model.metadata["config"] == {"unit_share": 0.4}
    assert "config" not in default.model.metadata

    def taus(sigma: dict, kinds: tuple[str, ...] = ("one_way", "two_way")) -> np.ndarray:
        return np.sqrt(np.concatenate([sigma[kind] for kind in kinds]) ** 2
                       - DISCRETE_VARIANCE_SHIFT)

    units = [taus(s.model.metadata["unit_shape"]["unit_model"]["noise_sigma"])
             for s in (default, tuned)]
    np.testing.assert_allclose(units[1], units[0] * math.sqrt(0.2 / 0.4), rtol=1e-12)
    # the row model's tables (its histograms' σ combine two measurements: the tree plan's top-up)
    rows = [taus(s.model.metadata["model"]["noise_sigma"], ("two_way",))
            for s in (default, tuned)]
    np.testing.assert_allclose(rows[1], rows[0] * math.sqrt(0.8 / 0.6), rtol=1e-12)
    with pytest.raises(ValueError, match="unit_share \\+ lag_share must be below 1"):
        MarginalsConfig(unit_share=0.95, lag_share=0.1)
