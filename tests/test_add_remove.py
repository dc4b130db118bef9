"""The default method under add/remove-one-row neighbours (MST's and AIM's): n private."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import CORRELATED_ROWS, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.methods.marginals import MarginalsConfig, measure_all, measured_queries
from dp_dask.postprocess.consistency import Measurement, estimated_rows
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import epsilon_spent
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import EmptyInputError, Synthesizer

SCHEMA = load_schema(SMALL_SCHEMA_PATH)
CONFIG = MarginalsConfig()  # the defaults


def test_add_remove_halves_the_noise_variance_at_the_same_charge():
    counts = np.zeros((SCHEMA.d, SCHEMA.d), dtype=np.int64)
    rho = rho_budget(1.0, 1e-9, "zcdp")
    # every pair under both (no rows: the threshold would send replace-one to a tree)
    kwargs = {"accountant": "zcdp", "sampler": "numpy", "rng": np.random.default_rng(0),
              "tables": "all"}
    replace = measure_all(counts, {}, SCHEMA, rho, **kwargs)[0]
    add_remove = measure_all(counts, {}, SCHEMA, rho, neighbours="add_remove", **kwargs)[0]
    for r, a in zip(replace, add_remove, strict=True):
        assert r.sigma == pytest.approx(math.sqrt(2) * a.sigma, rel=1e-12)


def test_the_estimated_row_count_is_within_its_noise():
    rng = np.random.default_rng(4)
    frame_counts = [rng.multinomial(10_000, np.full(size, 1 / size))
                    for size in (3, 5, 8, 40)]
    sigmas = (30.0, 30.0, 20.0, 10.0)
    estimates = [estimated_rows([Measurement((k,), c + rng.normal(0, s, c.size), s)
                                 for k, (c, s) in enumerate(zip(frame_counts, sigmas))])
                 for _ in range(200)]
    sd = 1 / math.sqrt(sum(1 / (c.size * s**2) for c, s in zip(frame_counts, sigmas)))
    assert abs(np.mean(estimates) - 10_000) < 4 * sd / math.sqrt(200) + 0.5  # unbiased
    assert np.std(estimates) == pytest.approx(sd, rel=0.2)  # and inverse-variance weighted
    assert estimated_rows([Measurement((0,), np.full(3, -50.0), 1.0)]) == 1  # never below 1


def integers_in(document: object) -> set[int]:
    """Every integer anywhere in a parsed JSON document."""
    if isinstance(document, dict):
        return set().union(*map(integers_in, document.values()))
    if isinstance(document, list):
        return set().union(*map(integers_in, document))
    return {document} if isinstance(document, int) and not isinstance(document, bool) else set()


def test_an_add_remove_release_records_only_the_estimated_count(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    # every pair: no selection (tables="auto" is charged as the tree it may choose, in
    # test_selection_sensitivity.py)
    synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0,
                                     neighbours="add_remove", noise_sampler="numpy",
                                     noise_seed=3, ledger=ledger, dataset_name="small",
                                     tables="all").fit(data)
    model = synthesizer.model
    estimate = estimated_rows(list(model.measurements))
    assert model.n_rows == model.metadata["n_rows"] == estimate != CORRELATED_ROWS
    paths = synthesizer.write(tmp_path / "release", seed=1, with_model=True)
    written = [json.loads(path.read_text())
               for path in (paths["metadata"], paths["model"] / "model.json")]
    assert CORRELATED_ROWS not in integers_in(written)
    assert json.loads(paths["metadata"].read_text())["sampling"]["rows"] == estimate
    privacy = model.metadata["privacy"]
    assert privacy["neighbouring"].startswith("add or remove one row; n private")
    assert "L2 sensitivity 1 each" in privacy["budget_split"]
    # The ledger sums replace-one ε: the same Gaussian noise is twice the charge there.
    as_replace = epsilon_spent(2 * privacy["rho"], synthesizer.delta, "exact")
    assert privacy["replace_one_row"] == {"epsilon": as_replace, "rho": 2 * privacy["rho"]}
    (entry,) = ledger.entries("small")
    assert (entry.epsilon, entry.rho) == (as_replace, 2 * privacy["rho"])
    assert 1.3 < entry.epsilon < 1.5


def test_an_empty_input_is_refused_only_where_n_is_public(client):
    empty = correlated_frame(10).iloc[:0]
    with pytest.raises(EmptyInputError, match="no rows"):
        Synthesizer.create("marginals", SMALL_SCHEMA_PATH, ledger=False).fit(empty)
    # Under add/remove the refusal would tell an empty table from one row: it is released.
    fitted = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, neighbours="add_remove",
                                noise_sampler="numpy", noise_seed=0, ledger=False).fit(empty)
    assert fitted.model.n_rows >= 1
    assert len(fitted.sample(seed=0).compute()) == fitted.model.n_rows
    queries = [m.attributes for m in fitted.model.measurements]
    # an estimated n of a few rows is far too noisy for every pair: the threshold picks a tree,
    # then the refinement's tables
    tree = queries[:2 * SCHEMA.m - 1]
    assert tree == measured_queries(SCHEMA, [q for q in tree if len(q) == 2])
    assert len(queries) == 2 * SCHEMA.m - 1 + CONFIG.refine_rounds


def test_the_cli_names_the_neighbours_and_the_ledger_counts_replace_one_epsilon(
        client, data, tmp_path, capsys):
    out = tmp_path / "release"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method-options", '{"neighbours": "add_remove"}',
                 "--ledger", str(tmp_path / "ledger.sqlite"),
                 "--scheduler", client.scheduler.address, "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "neighbours: add or remove one row; n private" in printed
    metadata = json.loads((out / "metadata.json").read_text())
    as_replace = metadata["privacy"]["replace_one_row"]["epsilon"]
    assert f"as replace one row: ε={as_replace:.4g}" in printed
    assert f"dataset total ε={as_replace:.6g}" in printed  # the ledger counts replace-one ε
    # OpenDP's noise: n̂ may equal n by chance, so the seeded test above checks it is not n.
    assert metadata["sampling"]["rows"] == metadata["n_rows"]


@pytest.mark.parametrize("bad", ["add-remove", "bounded", None])
def test_an_unknown_neighbouring_notion_is_refused_before_any_work(bad):
    with pytest.raises(ValueError, match="neighbours must be one of"):
        Synthesizer.create("marginals", SMALL_SCHEMA_PATH, neighbours=bad)
