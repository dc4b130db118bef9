"""The spine every method shares (issue 66): Synthesizer keeps scikit-learn's estimator contract
(parameters in ``__init__``, nothing read or opened there; a refit is a fresh fit), and writes a
release by a :class:`~dp_dask.release.ReleasePlan` (dp_dask.release.writer)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from conftest import SMALL_SCHEMA, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.data.schema import SchemaError
from dp_dask.privacy.ledger import Entry
from dp_dask.release import ReleasePlan, write_release
from dp_dask.synthesizer import Synthesizer
from dp_dask.tuning import as_config

FORBID = {**SMALL_SCHEMA, "constraints": [{"forbid": {"colour": "red", "flag": "yes"}}]}


@pytest.mark.parametrize("method", sorted(Synthesizer.methods))
def test_item1_init_does_no_io(tmp_path, method):
    """No method reads its schema or opens its ledger in ``__init__``: a schema path that does
    not exist and a ledger in a directory that does not exist are only stored; the fit says the
    schema is missing, before it reads any data or makes the ledger's directory."""
    schema, ledger = tmp_path / "absent.json", tmp_path / "no-such-dir" / "ledger.sqlite"
    synthesizer = Synthesizer.create(method, schema, ledger=ledger, noise_sampler="numpy")
    with pytest.raises(FileNotFoundError, match="absent.json' is neither a file nor a built-in"):
        synthesizer.fit(tmp_path / "absent.csv")
    assert not ledger.parent.exists()
    with pytest.raises(ValueError, match="has no option 'nope'"):  # refused at once, as before
        Synthesizer.create(method, schema, nope=1)


@pytest.mark.parametrize(("method", "schema", "options", "error", "message"), [
    ("copula", SMALL_SCHEMA, {"privacy_unit": {"column": "city", "max_rows": 2}}, ValueError,
     "method 'copula' does not support a privacy unit"),
    ("marginals", SMALL_SCHEMA, {"privacy_unit": {"column": "city", "max_rows": 2}}, ValueError,
     "privacy unit column 'city' is also an attribute"),
    ("copula", FORBID, {}, SchemaError, "method 'copula' cannot honour 'forbid' constraints"),
    ("marginals", SMALL_SCHEMA, {"workload": [["colour", "nope"]]}, ValueError,
     "unknown column 'nope'"),
])
def test_item1_parameter_errors_come_before_any_data_or_budget(tmp_path, method, schema,
                                                                options, error, message):
    """What ``__init__`` refused from the schema (a unit the method cannot bound or the schema
    reads, a constraint it cannot honour, a workload naming another column), the fit
    refuses first: the data, absent, is never reached, and the ledger is never written."""
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    ledger = tmp_path / "ledger" / "ledger.sqlite"
    synthesizer = Synthesizer.create(method, tmp_path / "schema.json", ledger=ledger,
                                     noise_sampler="numpy", **options)
    with pytest.raises(error, match=message):
        synthesizer.fit(tmp_path / "absent.csv")
    assert not ledger.parent.exists()


def recorded(fitted: Synthesizer) -> tuple[dict, Entry]:
    """What a fit records, less its time and run id: the model's metadata, its ledger entry."""
    metadata = {key: value for key, value in fitted.model.metadata.items()
                if key not in ("created", "ledger")}
    entry = fitted.ledger.entries()[-1]
    return metadata, dataclasses.replace(entry, id=None, run_id="", created="")


@pytest.mark.parametrize(("method", "options"), [
    ("marginals", {"workload": [["colour", "*"]]}),  # rounds and candidates from the schema
    ("dpview", {"neighbours": "add_remove"}),  # the layout from a noisy n
    ("dpcopula-mle", {}),  # the blocks from n
])
def test_item1_a_refit_is_a_fresh_fit(client, tmp_path, method, options):
    """A synthesizer fitted on one frame, then on another, records what a fresh one fitted on
    the second does (the model's metadata, the ledger entry), and its ledger holds both fits."""
    def synthesizer(name: str) -> Synthesizer:
        return Synthesizer.create(method, SMALL_SCHEMA_PATH, epsilon=4.0, noise_sampler="numpy",
                                  noise_seed=3, ledger=tmp_path / f"{name}.sqlite",
                                  dataset_name="frames", **options)

    refitted = synthesizer("refit").fit(correlated_frame(3_000, seed=1))
    first = recorded(refitted)
    refitted.fit(correlated_frame(12_000, seed=2))
    fresh = synthesizer("fresh").fit(correlated_frame(12_000, seed=2))
    assert recorded(refitted) == recorded(fresh) != first
    assert len(refitted.ledger.entries()) == 2 and len(fresh.ledger.entries()) == 1


def keyword_parameters(cls: type[Synthesizer]) -> dict[str, object]:
    """The keyword parameters of a method's constructor and the common one, with defaults."""
    found: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and issubclass(klass, Synthesizer):
            found |= {p.name: p.default
                      for p in inspect.signature(klass.__init__).parameters.values()
                      if p.kind is p.KEYWORD_ONLY}
    return found


@pytest.mark.parametrize("method", sorted(Synthesizer.methods))
def test_item3_parameters_read_back_as_given(method):
    """scikit-learn's ``get_params`` round trip: every keyword parameter reads back as given or
    as its default (``config``: its dataclass), and a synthesizer made from what was read
    back reads back the same. A pure ε-DP method keeps the δ it was given (it spends none: its
    privacy record says δ = 0, the golden releases hold it); the marginals method's
    ``accountant`` stays None, resolved where used (``release_accountant``). ``privacy_unit``
    and ``ledger`` are read through properties that load what they name
    (test_item1_init_does_no_io)."""
    cls = Synthesizer.methods[method]
    defaults = {name: default for name, default in keyword_parameters(cls).items()
                if name not in ("privacy_unit", "ledger")}
    given = {"epsilon": 2.0, "delta": 1e-7, "noise_sampler": "numpy"}
    made = Synthesizer.create(method, SMALL_SCHEMA_PATH, **given)
    params = {name: getattr(made, name) for name in defaults}
    expected = {name: as_config(cls.config_class, default) if name == "config" else default
                for name, default in defaults.items()} | given
    assert params == expected
    again = Synthesizer.create(method, SMALL_SCHEMA_PATH, **params)
    assert {name: getattr(again, name) for name in defaults} == params


@pytest.fixture(scope="module")
def fitted(client) -> Synthesizer:
    return Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=2.0, noise_sampler="numpy",
                              noise_seed=0, ledger=False).fit(correlated_frame(4_000))


def test_item2_write_writes_its_plan(fitted, tmp_path):
    """``Synthesizer.write`` is its arguments' ReleasePlan written by write_release: the same
    files, byte for byte."""
    arguments = {"seed": 4, "partition_rows": 1_500, "decode": "midpoint", "with_binary": True}
    by_write = fitted.write(tmp_path / "write", 4_000, **arguments)
    plan = ReleasePlan.for_model(fitted.model, 4_000, **arguments)
    by_plan = write_release(fitted.model, plan, tmp_path / "plan")
    assert sorted(by_write) == sorted(by_plan) == ["metadata", "parquet", "record", "zarr"]
    for kind in ("metadata", "parquet"):
        files = [sorted(p for p in paths[kind].rglob("*") if p.is_file())
                 if paths[kind].is_dir() else [paths[kind]] for paths in (by_write, by_plan)]
        assert [p.name for p in files[0]] == [p.name for p in files[1]]
        assert [p.read_bytes() for p in files[0]] == [p.read_bytes() for p in files[1]]
    assert json.loads(by_plan["metadata"].read_text())["sampling"] == {
        "rows": 4_000, "seed": 4, "partition_rows": 1_500, "device": "cpu",
        "decode": "midpoint"}


@pytest.mark.parametrize(("fields", "message"), [
    ({"rows": 0}, "number of rows must be a positive integer, got 0"),
    ({"rows": 2.5}, "positive integer, got 2.5"),
    ({"partition_rows": 0}, "partition_rows must be positive, got 0"),
    ({"device": "auto"}, "ReleasePlan.for_model resolves 'auto'"),
    ({"decode": "median"}, "decode must be one of"),
])
def test_item2_a_release_plan_is_checked_when_made(fields, message):
    with pytest.raises(ValueError, match=message):
        ReleasePlan(**{"rows": 100, "partition_rows": 50, **fields})


def test_item2_a_release_plan_is_frozen_and_filled_in_by_the_model(fitted, tmp_path):
    plan = ReleasePlan.for_model(fitted.model, device="auto")
    assert (plan.rows, plan.device, plan.partitions) == (fitted.model.n_rows, "cpu", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rows = 5  # type: ignore[misc]
    conditioned = dataclasses.replace(plan, where="colour == 'red'")
    with pytest.raises(ValueError, match="conditioned sampler"):
        write_release(fitted.model, conditioned, tmp_path / "out")
    assert not (tmp_path / "out").exists()
