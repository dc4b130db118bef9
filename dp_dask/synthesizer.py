"""The user-facing estimators: ``Synthesizer.create("marginals", schema, epsilon=1).fit(data)``.

fit: read lazily → exact counts on Dask → noise once on the driver → a model of noisy statistics.
sample: per-partition draws on Dask → Zarr (binary dummies) and Parquet (decoded), + metadata.
The methods differ only in what they measure and how they turn it into a model and rows.

The base estimator is the one place every method's fit and release pass through (ledger
reservation, privacy unit bounding, constraints, conditioned sampling, the release record), so
that no method can skip a guarantee; what is method-specific lives in dp_dask.methods, and the
writing of a release by its plan in dp_dask.release.writer.

Size: the fit's steps before any measurement (the ledger's reservation, the privacy unit's two
searches under "auto", its bounding) and the release's record stay together because every
method's fit passes through them in this order; the privacy unit's steps (``_choose_max_rows``,
``_find_unit_level``, ``unit_rho``, ``rho_record``) are the part to move out (a unit mixin) if
the estimator grows again.
"""

from __future__ import annotations

import datetime as dt
import inspect
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import dask.array as da
import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.checks import check_cost
from dp_dask.cluster import compute
from dp_dask.conditions import ConditionError
from dp_dask.copula.sample import (
    PartitionSampler,
    model_sampler,
    resolve_device,
    sample_binary,
    sample_frame,
)
from dp_dask.data import units
from dp_dask.data.attribute import SchemaError
from dp_dask.data.counts import count_graph, rows_counted
from dp_dask.data.io import Location, TableSource, location, read_table
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.values import check_decode, warn_open_bins
from dp_dask.exceptions import DpDaskWarning
from dp_dask.fit_cost import FitCost, FitWork, dense_tables_cost
from dp_dask.model_io import ModelError, read_model_document
from dp_dask.privacy.labels import NEIGHBOURING, PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import (
    Entry,
    Ledger,
    dataset_name_for,
    new_run_id,
    reserving,
)
from dp_dask.privacy.record import COST_FIELDS, Cost, PrivacyRecord
from dp_dask.release import ReleasePlan, resolve_target, write_release
from dp_dask.release.writer import Model, positive_rows
from dp_dask.timing import timed
from dp_dask.version import library_versions

DEFAULT_DELTA = 2.0**-30


class EmptyInputError(ValueError):
    """The input has no rows: there is nothing to release."""


def load_model(path: str | Path, storage_options: dict[str, Any] | None = None) -> Model:
    """A saved model of any method, by the method its model.json names; ``path`` may be an
    object-store URL, read with ``storage_options``."""
    path = location(path)
    # each method checks its own format
    document = read_model_document(path, storage_options=storage_options)
    method = document.get("method", "copula")  # the copula's first models named no method
    if method not in Synthesizer.methods:
        raise ModelError(f"{path}: a model of unknown method {method!r}; expected one of "
                         f"{sorted(Synthesizer.methods)}")
    return Synthesizer.methods[method].load_model(path, document, storage_options)


class Synthesizer:
    """Shared spine of every method: count on Dask, noise on the driver, sample on Dask.

    Parameters common to all methods
    --------------------------------
    schema: a :class:`Schema`, a schema JSON path, or a built-in name ("adult", "demo").
    epsilon, delta: the (ε, δ) budget of the whole release.
    noise_sampler: "opendp" (vetted samplers, OS entropy; use for real releases) or "numpy"
        (seeded by ``noise_seed``, reproducible: for tests and research only).
    show_progress: print progress bars for the Dask steps.
    ledger: the privacy ledger that ``fit`` checks and records in: a :class:`Ledger`, a path or URL,
        None (the default ledger: ``$DP_DASK_LEDGER`` or ``~/.config/dp_dask/ledger.sqlite``), or
        False (not recorded: for public data only).
    dataset_name: the dataset's name in the ledger (default: the input file's stem; unnamed
        in-memory frames all count against one dataset, "in-memory").
    run_id: the id of this fit; a retried job with the same id reuses the model it saved rather
        than spending again (default: a fresh id per fit).
    budget_epsilon: refuse to fit past this total ε for the dataset (besides its stored budget).
    force: fit even past the budget, or when the run id is recorded without a saved model.
    privacy_unit: ``{"column": ..., "max_rows": K}`` or a :class:`~.data.units.PrivacyUnit`:
        protect every row of one value of that column together, after keeping at most K rows of each
        (:mod:`dp_dask.data.units`); default: the schema's ``privacy_unit``, else a row. Only
        methods whose ``supports_privacy_unit`` scale their sensitivity to K take one. K "auto":
        chosen under DP at each fit (the smallest candidate covering a quantile of the rows per
        unit) with the unit's ``config.auto_share`` of the budget (:class:`~.data.units.UnitConfig`,
        its tuned numbers: ``{"column": ..., "max_rows": "auto", "config": {...}}``);
        ``privacy_unit`` keeps "auto", the fit learns ``max_rows_``.
    accept_row_level_draft: with a privacy unit, fit a schema drafted under DP at another unit
        (a row) rather than refuse it (``fit`` raises ValueError before any budget is spent);
        the release then records each guarantee under its own unit, never their total.

    scikit-learn's estimator contract: ``__init__`` stores the parameters (refusing those bad on
    their own) and reads or opens nothing (a schema path, a ledger); each fit loads and checks
    them against the schema first, before any data is read or budget spent, and learns its
    state afresh, so a refit on other data records what a fresh fit does. ``schema``,
    ``privacy_unit`` and ``ledger`` read back what the last fit (or :meth:`from_model`) loaded
    (``schema_``, ``privacy_unit_``, ``ledger_``); before a fit, what the parameters name.
    Learned by each fit: ``model_``, ``privacy_record_``, ``ledger_entry_``, ``reused_``,
    ``timings_``; ``max_rows_``, the K rows per unit the fit bounded to (the K given, or the one
    chosen under "auto"; None without a unit), and ``unit_choice_``, the record of that choice.
    """

    name: ClassVar[str]
    methods: ClassVar[dict[str, type[Synthesizer]]] = {}
    gpu_sampling: ClassVar[bool] = False  # whether write(device="gpu") can draw on a GPU
    fine_grids: ClassVar[bool] = False  # whether it measures the schema's fine grids
    # whether sample/write take ``where``/``balance``: its model's ``conditioned_sampler``
    conditional: ClassVar[bool] = False
    # the frozen dataclass of its tuned numbers, given as ``config`` (docs/tuning.md), if any
    config_class: ClassVar[type | None] = None
    # Its cost from the schema alone (dp_dask.checks.check_cost, before a fit and in plan):
    # whether it keeps every 2-way table dense (refused past MAX_TABLE_CELLS, warned past
    # WARN_TABLE_CELLS), and what else of its fit grows with d, named in the warning past
    # WARN_DUMMY_COLUMNS. Every method counts a d×d matrix; those limits hold for all.
    dense_tables: ClassVar[bool] = False
    grows_with_d: ClassVar[str | None] = None
    # the kinds of schema constraints (dp_dask.data.constraints) every release of it satisfies;
    # a schema declaring another kind is refused
    constraint_kinds: ClassVar[frozenset[str]] = frozenset()
    # whether every mechanism it runs scales its sensitivity to a privacy unit's max_rows
    supports_privacy_unit: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Synthesizer.methods[cls.name] = cls

    def __init__(self, schema: Schema | str | Path, *, epsilon: float = 1.0,
                 delta: float = DEFAULT_DELTA, noise_sampler: str = "opendp",
                 noise_seed: int | None = None, show_progress: bool = False,
                 ledger: Ledger | str | Path | bool | None = None,
                 dataset_name: str | None = None, run_id: str | None = None,
                 budget_epsilon: float | None = None, force: bool = False,
                 privacy_unit: units.PrivacyUnit | dict[str, Any] | None = None,
                 accept_row_level_draft: bool = False) -> None:
        # scikit-learn's contract: the parameters are stored as given, nothing is read or opened
        # here; fit loads what they name (_load_params), afresh each time
        self._schema = schema
        self._privacy_unit = privacy_unit
        self._ledger = ledger
        self.epsilon = epsilon
        self.delta = delta
        self.noise_sampler = noise_sampler
        self.noise_seed = noise_seed
        self.show_progress = show_progress
        self.dataset_name = dataset_name
        self.run_id = run_id
        self.budget_epsilon = budget_epsilon
        self.force = force
        self.accept_row_level_draft = accept_row_level_draft
        # set by dp_dask.one_command before its fit: the one command's split of (ε, δ) between
        # the draft and this release, recorded in the release's privacy record
        self.one_command: dict[str, Any] | None = None
        # loaded from the parameters by each fit (and by from_model)
        self.schema_: Schema | None = None
        self.privacy_unit_: units.PrivacyUnit | None = None
        self.ledger_: Ledger | None = None
        # learned by each fit
        self.max_rows_: int | None = None  # the K this fit bounded to (max_rows "auto": chosen)
        self.unit_choice_: dict[str, Any] | None = None  # the record of a choice under "auto"
        # the record of the search for unit-level attributes under unit_level "auto"
        self.unit_level_choice_: dict[str, Any] | None = None
        self.model_: Model | None = None
        self.privacy_record_: PrivacyRecord | None = None  # the release's, once (the metadata's)
        self.timings_: dict[str, float] = {}
        self.ledger_entry_: Entry | None = None  # this fit's ledger entry
        self.reused_ = False  # whether fit reused the saved model of an earlier, recorded run

    @property
    def schema(self) -> Schema:
        """The schema: the one the last fit (or :meth:`from_model`) loaded; before either, the
        one the ``schema`` given names, loaded at each read."""
        return self.schema_ if self.schema_ is not None else load_schema(self._schema)

    @property
    def privacy_unit(self) -> units.PrivacyUnit | None:
        """The privacy unit (None: a row), "auto" kept as given: the one the last fit loaded;
        before a fit, the one ``privacy_unit`` or the schema names, unchecked."""
        if self.schema_ is not None:
            return self.privacy_unit_
        return self._unit_of(self.schema)

    @property
    def ledger(self) -> Ledger | None:
        """The ledger fit records in (None: not recorded): the last fit's; before a fit, the
        one ``ledger`` names (a :class:`Ledger` opens its store only when used)."""
        if self.schema_ is not None:
            return self.ledger_
        return self._ledger_of()

    def _unit_of(self, schema: Schema) -> units.PrivacyUnit | None:
        return units.PrivacyUnit.of(self._privacy_unit if self._privacy_unit is not None
                                    else schema.privacy_unit)

    def _ledger_of(self) -> Ledger | None:
        if self._ledger is False:
            return None
        if isinstance(self._ledger, Ledger):
            return self._ledger
        return Ledger(None if self._ledger in (None, True) else self._ledger)

    def _load_params(self) -> None:
        """Load what the parameters name and check them against the method, afresh: the schema
        (and the constraints the method must honour), the privacy unit (whether the method
        takes one, its column in the schema), the ledger, then the method's own
        (:meth:`_prepare`). Run first by fit and by :meth:`from_model`: an error in a parameter
        is raised before any data is read or any budget spent."""
        schema = load_schema(self._schema)
        self._check_constraints(schema)
        unit = self._unit_of(schema)
        if unit is not None:
            if not self.supports_privacy_unit:
                raise ValueError(f"method {self.name!r} does not support a privacy unit "
                                 f"({unit.column!r}): its mechanisms' sensitivity "
                                 "is that of one row; use the marginals method")
            unit.check(schema)
        ledger = self._ledger_of()
        self.schema_, self.privacy_unit_, self.ledger_ = schema, unit, ledger
        self._prepare()
        # only a unit-shaped release (the marginals method's, its unit_shape_) has unit-level
        # attributes: a search for them would spend budget on nothing
        if unit is not None and unit.unit_level_auto and not getattr(self, "unit_shape_", False):
            raise ValueError(f"privacy unit {unit.column!r}: unit_level 'auto' finds the "
                             "attributes constant within a unit for a unit-shaped release (the "
                             "marginals method's default under a privacy unit); this release "
                             f"(method {self.name!r}) has rows, not units")

    def _prepare(self) -> None:
        """The method's state from its parameters and the loaded :attr:`schema`, learned afresh
        at each fit before any data is read, and its parameters' errors that need the schema
        (none by default)."""

    def _check_constraints(self, schema: Schema) -> None:
        """A SchemaError naming the first constraint of ``schema`` this method cannot honour."""
        for constraint in schema.constraints:
            if constraint.kind not in self.constraint_kinds:
                able = sorted(name for name, method in Synthesizer.methods.items()
                              if constraint.kind in method.constraint_kinds)
                raise SchemaError(f"{constraint.name}: method {self.name!r} cannot honour "
                                  f"{constraint.kind!r} constraints (methods that do: "
                                  f"{', '.join(able) or 'none'})")

    @classmethod
    def fit_cost(cls, work: FitWork) -> FitCost:
        """Its model's memory, fit and sampling time, and any decoding calibration, for
        ``dp-dask plan`` (dp_dask.estimate). By default the dense 2-way tables' costs (the
        marginals method's), which the methods that declare none of their own are estimated
        by."""
        return dense_tables_cost(work)

    @classmethod
    def config_memory(cls, schema: Schema, rows: int,
                      config: dict[str, Any] | None) -> dict[str, int] | None:
        """What the method's ``config`` (a dict of its fields) adds to the driver's memory, for
        ``dp-dask plan``: a record whose ``*_bytes`` entries are added (None: nothing)."""
        return None

    @staticmethod
    def create(method: str, schema: Schema | str | Path, **params: Any) -> Synthesizer:
        """The synthesizer of ``method`` ("marginals", the default, "copula", "dpview", ...);
        ``params`` are the common ones of :class:`Synthesizer` and the method's own
        (:meth:`options`). An unknown name is a ValueError naming the method's options."""
        if method not in Synthesizer.methods:
            raise ValueError(f"unknown method {method!r}; expected one of "
                             f"{sorted(Synthesizer.methods)}")
        cls = Synthesizer.methods[method]
        known = set(cls.options()) | set(inspect.signature(Synthesizer.__init__).parameters)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"method {method!r} has no option {unknown[0]!r}; its options: "
                             f"{', '.join(cls.options()) or 'none'}")
        return cls(schema, **params)

    @classmethod
    def options(cls) -> tuple[str, ...]:
        """The method's own keyword parameters, beyond the common ones of Synthesizer."""
        common = inspect.signature(Synthesizer.__init__).parameters
        names: list[str] = []
        for klass in cls.__mro__[:cls.__mro__.index(Synthesizer)]:
            if "__init__" in vars(klass):
                names += [p.name for p in inspect.signature(klass.__init__).parameters.values()
                          if p.kind is p.KEYWORD_ONLY and p.name not in common
                          and p.name not in names]
        return tuple(names)

    @staticmethod
    def from_model(model: Model | str | Path, show_progress: bool = False,
                   storage_options: dict[str, Any] | None = None) -> Synthesizer:
        """A synthesizer that samples from a saved model, without the private data."""
        if isinstance(model, str | Path):
            model = load_model(model, storage_options)
        cls = Synthesizer.methods[model.method]
        privacy = model.metadata.get("privacy", {})
        synthesizer = cls(model.schema, epsilon=privacy.get("epsilon", np.nan),
                          delta=privacy.get("delta", np.nan), show_progress=show_progress,
                          ledger=False)  # sampling spends nothing
        synthesizer._load_params()
        synthesizer.model_ = model
        return synthesizer

    @property
    def model(self) -> Model:
        if self.model_ is None:
            raise RuntimeError("call fit() first, or load a model with from_model()")
        return self.model_

    def fit(self, data: TableSource, *,
            storage_options: dict[str, Any] | None = None) -> Synthesizer:
        """Count exactly on Dask, add noise once on the driver, fit the model to noisy counts.

        With a ledger, the fit is first checked against the dataset's budget and recorded, before
        any data is read; a run id already recorded with a saved model reuses that model. A fit
        that fails before drawing noise drops its entry; after, the entry stays, counted.
        ``data`` may be an fsspec URL (``s3://...``), read with ``storage_options``.
        """
        # learned afresh by every fit: a refit records what a fresh fit does
        self.max_rows_, self.unit_choice_, self.model_, self.privacy_record_ = (None,) * 4
        self.unit_level_choice_ = None
        self.ledger_entry_, self.reused_, self.timings_ = None, False, {}
        self._load_params()  # a bad schema, unit or ledger fails here, before any data is opened
        self._privacy_plan()  # bad ε, δ or mechanism fail here, before any data is opened
        check_cost(self.schema, type(self))  # warn, or refuse a schema too costly to fit
        # a schema drafted at another unit, or a missing unit column, fails before any spend
        # (a refused budget before the input is even opened)
        units.check_drafted_unit(self.schema, self.privacy_unit, self.accept_row_level_draft)
        source = data if self.privacy_unit is None else self._read(data, storage_options)
        with reserving(self.ledger, self._ledger_requests(data),
                       budget_epsilon=self.budget_epsilon, force=self.force,
                       storage_options=storage_options) as booking:
            self.ledger_entry_ = booking.entries[0] if booking.entries else None
            self.reused_ = booking.reused
            if booking.reused:  # its model exists: loaded, nothing drawn or charged
                self.model_ = load_model(self.ledger_entry_.model_path or "", storage_options)
                unit = self.model_.metadata.get("privacy", {}).get("privacy_unit", {})
                self.max_rows_, self.unit_choice_ = unit.get("max_rows"), unit.get("auto")
                self.privacy_record_ = PrivacyRecord.from_metadata(
                    self.model_.metadata["privacy"])
                return self
            self._fit(source, storage_options)
        if self.ledger_entry_ is not None:
            self.model.metadata["ledger"] = {"dataset_name": self.ledger_entry_.dataset_name,
                                             "run_id": self.ledger_entry_.run_id}
        return self

    def _fit(self, data: TableSource, storage_options: dict[str, Any] | None = None) -> None:
        if self.schema.types_from_data:  # never silently: the release records them too
            warnings.warn(f"schema {self.schema.name!r}: the types of "
                          f"{self.schema.types_from_data} were taken from the data's storage "
                          "types (dtype_source 'data'), which one null or non-integer can "
                          "change; if the storage schema is public, draft with "
                          "--public-types, else declare the types or draft them under DP "
                          "(--dp-epsilon)", DpDaskWarning,
                          stacklevel=3)
        unused = [self.schema.names[a] for a in self.schema.fine_grids]
        if unused and not self.fine_grids:
            warnings.warn(f"method {self.name!r} does not measure fine grids: 'fine' of "
                          f"{', '.join(unused)} is unused (values are drawn within the bins); "
                          "the marginals method uses it", DpDaskWarning, stacklevel=3)
        with timed(self.timings_, "read_encode_count"):
            ddf = self._read(data, storage_options)
            self.max_rows_, self.unit_choice_ = self._choose_max_rows(ddf)
            self.unit_level_choice_ = self._find_unit_level(ddf)
            if self.privacy_unit is not None:
                ddf = units.bound_contributions(self._with_unit_key(ddf), self.schema,
                                                self.bound_unit, units.unit_seed(self.noise_seed))
            (exact,) = compute(self._count_graph(ddf), show_progress=self.show_progress)
            n_rows = self._rows_counted(exact)
            if n_rows == 0 and self.rows_public:
                raise EmptyInputError("the input has no rows; nothing to release")
        metadata = {
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            **({"n_rows": n_rows} if self.rows_public else {}),
            "schema": {"name": self.schema.name, "sha256": self.schema.sha256(),
                       "attributes": self.schema.m, "dummy_columns": self.schema.d},
            "versions": library_versions(),
        }
        self.model_ = self._fit_counts(exact, n_rows, metadata)  # exact counts end here
        noise = self.model_.metadata.get("quality", {}).get("noise")
        if noise:  # a figure of noisy counts only (dp_dask.postprocess.noise_level)
            warnings.warn(noise["warning"], DpDaskWarning, stacklevel=3)

    def _choose_max_rows(self, ddf: dd.DataFrame) -> tuple[int | None, dict[str, Any] | None]:
        """This fit's K and the record of its choice: the K given (no record; None without a
        unit), or under max_rows "auto" K from the rows per unit under DP, with the unit's
        ``config.auto_share`` of the plan's ρ (:attr:`max_rows_rho`; the method's measurements
        spend what the unit's searches leave, :attr:`unit_rho`)."""
        if not self.unit_auto:
            return self.max_rows, None
        (sizes,) = compute(units.rows_per_unit_graph(ddf, self.privacy_unit.column),
                           show_progress=self.show_progress)
        plan = self._privacy_plan()
        rng = None if self.noise_seed is None else np.random.default_rng([self.noise_seed, 57])
        return units.choose_max_rows(sizes, self.max_rows_rho, plan["accountant"],
                                     sampler=self.noise_sampler, rng=rng)

    def _find_unit_level(self, ddf: dd.DataFrame) -> dict[str, Any] | None:
        """Under the privacy unit's unit_level "auto", the attributes not declared unit-level
        that are found so under DP (``units.find_unit_level`` over the raw rows' counts of
        varying units, the unit's ``config.unit_level_share`` of the plan's ρ, :attr:`unit_rho`,
        its ``config.unit_level_threshold``) marked
        unit-level in this fit's schema: the unit model measures them and the release keeps
        them constant within each unit. The record of the search (None without one). A
        unit-shaped release's lag attribute (``unit_lag``) varies within a unit by design: it
        is never a candidate."""
        if not self.unit_level_auto:
            return None
        schema = self.schema
        lag = getattr(self, "unit_lag", None)
        candidates = [i for i, attribute in enumerate(schema.attributes)
                      if not attribute.unit_level and attribute.name != lag]
        (counts,) = compute(units.varying_units_graph(ddf, schema, self.privacy_unit.column,
                                                      candidates),
                            show_progress=self.show_progress)
        rng = None if self.noise_seed is None else np.random.default_rng([self.noise_seed, 68])
        found, record = units.find_unit_level(
            counts, [schema.names[i] for i in candidates], self.unit_level_rho,
            self._privacy_plan()["accountant"], sampler=self.noise_sampler, rng=rng,
            threshold=self.privacy_unit.config.unit_level_threshold)
        self.schema_ = replace(schema, attributes=tuple(
            replace(attribute, unit_level=True) if attribute.name in found else attribute
            for attribute in schema.attributes))
        return record

    @property
    def unit_level_auto(self) -> bool:
        """Whether unit-level attributes are looked for under DP (unit_level "auto")."""
        return self.privacy_unit is not None and self.privacy_unit.unit_level_auto

    @property
    def unit_level_rho(self) -> float:
        """The ρ the search for unit-level attributes spends (0 without one)."""
        return (self._privacy_plan()["rho"] * self.privacy_unit.config.unit_level_share
                if self.unit_level_auto else 0.0)

    def _with_unit_key(self, ddf: dd.DataFrame) -> dd.DataFrame:
        """The rows bounding reads (which drops the unit column; unit-shaped releases copy it)."""
        return ddf

    @property
    def unit_auto(self) -> bool:
        """Whether the privacy unit's max_rows is "auto" (chosen under DP at each fit)."""
        return self.privacy_unit is not None and self.privacy_unit.max_rows == units.AUTO

    @property
    def max_rows_rho(self) -> float:
        """The ρ a choice of max_rows "auto" spends (0 without one)."""
        return (self._privacy_plan()["rho"] * self.privacy_unit.config.auto_share
                if self.unit_auto else 0.0)

    @property
    def unit_rho(self) -> float:
        """The ρ the unit's searches spend before the measurements: a choice of max_rows
        "auto" and a search of unit_level "auto" (0 without them)."""
        return self.max_rows_rho + self.unit_level_rho

    def rho_record(self, measurements_rho: float) -> dict[str, Any]:
        """The record's ``rho``: the measurements' ``measurements_rho`` and the unit's
        searches' (:attr:`unit_rho`: under max_rows "auto" the choice of K's, under
        unit_level "auto" the search's), the split in ``rho_split``."""
        if not self.unit_rho:
            return {"rho": measurements_rho}
        return {"rho": measurements_rho + self.unit_rho,
                "rho_split": {**({"max_rows_choice": self.max_rows_rho} if self.unit_auto
                                 else {}),
                              **({"unit_level_search": self.unit_level_rho}
                                 if self.unit_level_auto else {}),
                              "measurements": measurements_rho}}

    def _read(self, data: TableSource, storage_options: dict[str, Any] | None) -> dd.DataFrame:
        """The schema's columns of ``data``, lazily, and the privacy unit's where there is one
        (an error naming it where the input lacks it)."""
        unit = () if self.privacy_unit is None else (self.privacy_unit.column,)
        return read_table(data, self.schema, storage_options=storage_options, extra=unit)

    @property
    def max_rows(self) -> int | None:
        """The privacy unit's bound on rows: the K given, or under "auto" the fit's choice
        (:attr:`max_rows_`; None before it). None: the unit is a row."""
        if self.unit_auto:
            return self.max_rows_
        return None if self.privacy_unit is None else int(self.privacy_unit.max_rows)

    @property
    def bound_unit(self) -> units.PrivacyUnit | None:
        """The privacy unit with the bound in effect (:attr:`max_rows`): "auto" replaced by
        the fit's choice once there is one."""
        if self.max_rows is None:
            return self.privacy_unit
        return replace(self.privacy_unit, max_rows=self.max_rows)

    @property
    def rows_public(self) -> bool:
        """Whether the row count n is public under the method's neighbouring datasets (replace
        one row). Where it is not, it is neither recorded nor refused when 0: that refusal
        would tell. Never with a privacy unit: replacing a unit of 1 row by one of K moves n."""
        return self.privacy_unit is None

    def _ledger_requests(self, data: TableSource) -> list[Entry]:
        """What the fit asks the ledger to reserve before any data is read (none without a
        ledger): one entry of the replace-one-row cost."""
        if self.ledger is None:
            return []
        return [Entry.for_cost(self.ledger_cost(),
                                dataset_name=dataset_name_for(data, self.dataset_name),
                                schema_sha256=self.schema.sha256(),
                                run_id=self.run_id or new_run_id(), sampler=self.noise_sampler,
                                private=self.noise_sampler in PRIVATE_SAMPLERS,
                                unit_column=getattr(self.privacy_unit, "column", None),
                                # "auto" (None) until the fit chooses: never an earlier fit's K
                                unit_max_rows=None if self.unit_auto else self.max_rows)]

    def _privacy_plan(self) -> dict[str, Any]:
        """The calibration (epsilon, delta, mechanism, accountant, rho), validated before any
        data is read: what the release records and, under replace-one neighbours, the ledger."""
        raise NotImplementedError

    def _ledger_plan(self) -> dict[str, Any]:
        """What the ledger counts, under its replace-one-row neighbours: the privacy plan."""
        return self._privacy_plan()

    def ledger_cost(self) -> Cost:
        """The replace-one-row cost: what the ledger reserves, the record's ``charge``."""
        return Cost.of_plan(self._ledger_plan())

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        """The exact counts the method measures, lazily: the d×d 1-/2-way count matrix, unless
        a method needs other counts (DPView's view tables)."""
        return count_graph(ddf, self.schema)

    def _rows_counted(self, exact: np.ndarray) -> int:
        """n, from the exact counts of :meth:`_count_graph`."""
        return rows_counted(exact, self.schema)

    def _fit_counts(self, exact: np.ndarray, n_rows: int, metadata: dict[str, Any]) -> Model:
        """Noise the exact counts of :meth:`_count_graph` once and fit the method's model to
        the noisy ones."""
        raise NotImplementedError

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> Model:
        """The method's model saved at ``path``, whose model.json holds ``document``."""
        raise NotImplementedError

    def _privacy_record(self, *, neighbouring: str = NEIGHBOURING["replace"],
                        as_replace_one: bool = False, **fields: Any) -> dict[str, Any]:
        """The :class:`PrivacyRecord` (``privacy_record_``) rendered. ``fields``: the cost's (ε, δ:
        the synthesizer's by default), ``rho_split``, ``split`` (the budget split, a
        :class:`~dp_dask.privacy.split.BudgetSplit`), the method's own;
        ``as_replace_one``: it holds the ledger's replace-one-row cost too (the release's notion
        is another)."""
        cost = {"epsilon": self.epsilon, "delta": self.delta, "rho": None,
                **{key: fields.pop(key) for key in COST_FIELDS if key in fields}}
        record = PrivacyRecord(
            Cost(float(cost["epsilon"]), float(cost["delta"]), cost["mechanism"],
                 cost["accountant"], cost["rho"]),
            neighbouring, {**units.unit_record(self.bound_unit, self.noise_seed is not None),
                           **({"auto": self.unit_choice_} if self.unit_choice_ else {}),
                           **({"unit_level": self.unit_level_choice_}
                              if self.unit_level_choice_ else {})},
            self.noise_sampler, self.noise_seed is not None,
            charge=self.ledger_cost() if as_replace_one else None,
            rho_split=fields.pop("rho_split", None), split=fields.pop("split", None),
            details=fields, one_command=self.one_command,
            types_from_data=self.schema.types_from_data or None,  # see _fit's warning
            # drafted under DP: the sum only where both protect one unit (and one notion)
            draft=units.drafted_record(
                self.schema.drafted_under_dp, epsilon=float(cost["epsilon"]),
                delta=float(cost["delta"]), unit=self.privacy_unit,
                notion=getattr(self, "neighbours", "replace"))
            if self.schema.drafted_under_dp else None)
        self.privacy_record_ = record
        return record.to_metadata()

    def _rows(self, n_rows: int | None) -> int:
        """``n_rows``, or the model's n when None; 0 or less is an error, never the default."""
        return self.model.n_rows if n_rows is None else positive_rows(n_rows)

    def sampler(self, device: str = "cpu", where: str | None = None,
                balance: str | None = None, decode: str = "uniform") -> PartitionSampler:
        """The model's partition sampler; with ``where`` (a condition, dp_dask.conditions) or
        ``balance`` (an attribute: equal rows per class), its model conditioned, where the
        method's model allows it (``conditional``), else a ConditionError."""
        if where is None and balance is None:
            return model_sampler(self.model, device)
        if not self.conditional:
            raise ConditionError(f"method {self.name!r} cannot sample conditionally (--where, "
                                 "--balance); the marginals method can")
        if resolve_device(self.model, device) != "cpu":
            raise ConditionError("conditional sampling draws on the CPU only")
        return self.model.conditioned_sampler(where, balance, decode)

    def sample(self, n_rows: int | None = None, *, seed: int = 0,
               partition_rows: int | None = None, device: str = "cpu",
               decode: str = "uniform", where: str | None = None,
               balance: str | None = None) -> dd.DataFrame:
        """A lazy Dask DataFrame of synthetic rows, in the schema's output types.

        ``device``: "cpu", "gpu" or "auto" (see :meth:`write`); ``decode``: "uniform",
        "midpoint" or "label" (see :meth:`write`); ``where``, ``balance``: rows of the model
        conditioned (see :meth:`write`)."""
        warn_open_bins(self.schema, check_decode(decode))
        sampler = self.sampler(device, where, balance, decode)
        return sample_frame(self.model, self._rows(n_rows), seed=seed,
                            partition_rows=partition_rows, sampler=sampler, decode=decode)

    def sample_binary(self, n_rows: int | None = None, *, seed: int = 0,
                      partition_rows: int | None = None, device: str = "cpu") -> da.Array:
        """A lazy (rows, d) uint8 dask array of the dummy-coded (binary) output."""
        sampler = model_sampler(self.model, device)
        return sample_binary(self.model, self._rows(n_rows), seed=seed,
                             partition_rows=partition_rows, sampler=sampler)

    def write(self, out: str | Path, n_rows: int | None = None, *, seed: int = 0,
              partition_rows: int | None = None, with_model: bool = False,
              device: str = "cpu", storage_options: dict[str, Any] | None = None,
              decode: str = "uniform", with_binary: bool = False, where: str | None = None,
              balance: str | None = None) -> dict[str, Location]:
        """Sample and publish the release at ``out``: ``synthetic.parquet`` and ``metadata.json``,
        the model in ``model/`` with ``with_model``, the dummy-coded rows as ``synthetic.zarr``
        with ``with_binary``; the paths of each, by kind. ``n_rows``: the model's n when None.

        The arguments make the release's :class:`~dp_dask.release.ReleasePlan` (each one's
        meaning is there), which :func:`~dp_dask.release.write_release` writes: atomically
        (docs/releases.md), under the target's lock, in a version published whole; run again
        with the same model and arguments after being stopped, it resumes the partitions not
        yet written. ``out`` may be an object-store URL (``s3://...``), reached with
        ``storage_options`` by the driver and the workers. With a ledger entry (a fit here),
        the release's path is recorded on it.
        """
        plan = ReleasePlan.for_model(self.model, n_rows, partition_rows=partition_rows,
                                     device=device, seed=seed, decode=decode, where=where,
                                     balance=balance, with_binary=with_binary,
                                     with_model=with_model, storage_options=storage_options)
        # the method decides whether its model can be conditioned
        sampler = (self.sampler(plan.device, where, balance, decode) if plan.conditioned
                   else None)
        target = resolve_target(out)
        paths = write_release(self.model, plan, target, sampler=sampler, save_model=self.save,
                              timings=self.timings_, show_progress=self.show_progress)
        if self.ledger is not None and self.ledger_entry_ is not None:
            self.ledger.set_paths(self.ledger_entry_.id, release_path=target,
                                  model_path=paths.get("model"))
        return paths

    def save(self, path: str | Path,
             storage_options: dict[str, Any] | None = None) -> Location:
        """Save the noisy model (no raw data) for sampling later, in a directory or under an
        object-store URL (``storage_options``: fsspec's options of the store)."""
        path = self.model.save(location(path), storage_options)
        if self.ledger is not None and self.ledger_entry_ is not None:
            self.ledger.set_paths(self.ledger_entry_.id, model_path=path)
        return path
