"""The user-facing estimators: ``Synthesizer.create("marginals", schema, epsilon=1).fit(data)``.

fit: read lazily → exact counts on Dask → noise once on the driver → a model of noisy statistics.
sample: per-partition draws on Dask → Zarr (binary dummies) and Parquet (decoded), + metadata.
The methods differ only in what they measure and how they turn it into a model and rows.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import inspect
import warnings
from pathlib import Path
from typing import Any, ClassVar

import dask.array as da
import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

import dp_dask
from dp_dask.checks import DpDaskWarning, ModelError, check_cost, read_model_document
from dp_dask.cluster import compute
from dp_dask.copula.model import CopulaModel, fit_model
from dp_dask.copula.sample import (
    default_partition_rows,
    model_sampler,
    partition_sizes,
    resolve_device,
    sample_binary,
    sample_frame,
    write_partitions,
)
from dp_dask.data.counts import count_graph, fine_count_graph, rows_counted, split_fine
from dp_dask.data.io import (
    Location,
    TableSource,
    create_zarr,
    join,
    location,
    open_zarr_for_writing,
    read_table,
    write_json,
)
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.values import check_decode, output_record, warn_open_bins
from dp_dask.methods.marginals import (
    FINE_SHARE,
    ONE_WAY_SHARE,
    TABLE_L2_SENSITIVITY,
    MarginalModel,
    check_fine_share,
    check_neighbours,
    fit_marginals,
    measure_all,
)
from dp_dask.postprocess.consistency import estimated_rows
from dp_dask.postprocess.reweight import check_iterations
from dp_dask.privacy import NoisePlan, noisy_count_matrix, plan_noise, query_count, rho_budget
from dp_dask.privacy.accounting import epsilon_spent
from dp_dask.privacy.labels import NEIGHBOURING, PRIVATE_SAMPLERS, privacy_claim
from dp_dask.privacy.ledger import Entry, Ledger, Reservation, dataset_name_for, new_run_id
from dp_dask.release import (
    COMPLETE,
    RECORD_FORMAT,
    ReleaseError,
    StagedRelease,
    model_fingerprint,
    release_lock,
    resolve_target,
    stage_release,
)
from dp_dask.timing import timed

DEFAULT_DELTA = 2.0**-30
Model = CopulaModel | MarginalModel


class EmptyInputError(ValueError):
    """The input has no rows: there is nothing to release."""


def library_versions() -> dict[str, str]:
    names = ["dask", "distributed", "numpy", "scipy", "pandas", "pyarrow", "zarr", "opendp"]
    return {"dp_dask": dp_dask.__version__, **{name: _version(name) for name in names}}


def _version(name: str) -> str:
    """A release records what made it, "not installed" included (a seeded-noise run on a
    machine without OpenDP), rather than failing after the fit."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_model(path: str | Path, storage_options: dict[str, Any] | None = None) -> Model:
    """A saved model of any method, by the method its model.json names; ``path`` may be an
    object-store URL, read with ``storage_options``."""
    path = location(path)
    # each method checks its own format
    document = read_model_document(path, storage_options=storage_options)
    method = document.get("method", GaussianCopulaSynthesizer.name)  # copula models predate it
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
    """

    name: ClassVar[str]
    methods: ClassVar[dict[str, type[Synthesizer]]] = {}
    gpu_sampling: ClassVar[bool] = False  # whether write(device="gpu") can draw on a GPU
    fine_grids: ClassVar[bool] = False  # whether it measures the schema's fine grids

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Synthesizer.methods[cls.name] = cls

    def __init__(self, schema: Schema | str | Path, *, epsilon: float = 1.0,
                 delta: float = DEFAULT_DELTA, noise_sampler: str = "opendp",
                 noise_seed: int | None = None, show_progress: bool = False,
                 ledger: Ledger | str | Path | bool | None = None,
                 dataset_name: str | None = None, run_id: str | None = None,
                 budget_epsilon: float | None = None, force: bool = False) -> None:
        self.schema = load_schema(schema)
        self.epsilon = epsilon
        self.delta = delta
        self.noise_sampler = noise_sampler
        self.noise_seed = noise_seed
        self.show_progress = show_progress
        self.model_: Model | None = None
        self.timings_: dict[str, float] = {}
        self.ledger: Ledger | None = (None if ledger is False else
                                      ledger if isinstance(ledger, Ledger) else
                                      Ledger(None if ledger in (None, True) else ledger))
        self.dataset_name = dataset_name
        self.run_id = run_id
        self.budget_epsilon = budget_epsilon
        self.force = force
        self.ledger_entry_: Entry | None = None  # this fit's ledger entry
        self.reused_ = False  # whether fit reused the saved model of an earlier, recorded run

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
        # newer models name their method; the first two are told apart by type
        method = getattr(model, "method", MarginalSynthesizer.name
                         if isinstance(model, MarginalModel) else GaussianCopulaSynthesizer.name)
        cls = Synthesizer.methods[method]
        privacy = model.metadata.get("privacy", {})
        synthesizer = cls(model.schema, epsilon=privacy.get("epsilon", np.nan),
                          delta=privacy.get("delta", np.nan), show_progress=show_progress,
                          ledger=False)  # sampling spends nothing
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
        any data is read; a run id already recorded with a saved model reuses that model.
        ``data`` may be an fsspec URL (``s3://...``), read with ``storage_options``.
        """
        reservation = self._ledger_reserve(data, storage_options)
        if reservation is not None and reservation.reused:
            self.model_ = load_model(reservation.entry.model_path or "", storage_options)
            return self
        try:
            self._fit(data, storage_options)
        except BaseException:
            if reservation is not None:  # nothing was released
                self.ledger.cancel(reservation.entry.id)
            raise
        privacy = self.model.metadata["privacy"]
        privacy.update(privacy_claim(self.noise_sampler, privacy))
        if reservation is not None:
            self.ledger.mark_spent(reservation.entry.id)
            self.model.metadata["ledger"] = {"dataset_name": reservation.entry.dataset_name,
                                             "run_id": reservation.entry.run_id}
        return self

    def _fit(self, data: TableSource, storage_options: dict[str, Any] | None = None) -> None:
        self._privacy_plan()  # bad ε, δ or mechanism fail here, before any data is read
        check_cost(self.schema, self.name)  # warn, or refuse a schema too costly to fit
        unused = [self.schema.names[a] for a in self.schema.fine_grids]
        if unused and not self.fine_grids:
            warnings.warn(f"method {self.name!r} does not measure fine grids: 'fine' of "
                          f"{', '.join(unused)} is unused (values are drawn within the bins); "
                          "the marginals method uses it", DpDaskWarning, stacklevel=3)
        with timed(self.timings_, "read_encode_count"):
            ddf = read_table(data, self.schema, storage_options=storage_options)
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

    @property
    def rows_public(self) -> bool:
        """Whether the row count n is public under the method's neighbouring datasets (replace
        one row). Where it is not, it is neither recorded nor refused when 0: that refusal
        would tell."""
        return True

    def _ledger_reserve(self, data: TableSource,
                        storage_options: dict[str, Any] | None = None) -> Reservation | None:
        """Budget check and record, before any data is read (None without a ledger);
        ``storage_options`` reach a recorded model in a store."""
        if self.ledger is None:
            return None
        request = Entry.for_plan(self._ledger_plan(),
                                 dataset_name=dataset_name_for(data, self.dataset_name),
                                 schema_sha256=self.schema.sha256(),
                                 run_id=self.run_id or new_run_id(), sampler=self.noise_sampler,
                                 private=self.noise_sampler in PRIVATE_SAMPLERS)
        reservation = self.ledger.reserve(request, budget_epsilon=self.budget_epsilon,
                                          force=self.force, storage_options=storage_options)
        self.ledger_entry_, self.reused_ = reservation.entry, reservation.reused
        return reservation

    def _privacy_plan(self) -> dict[str, Any]:
        """The calibration (epsilon, delta, mechanism, accountant, rho), validated before any
        data is read: what the release records and, under replace-one neighbours, the ledger."""
        raise NotImplementedError

    def _ledger_plan(self) -> dict[str, Any]:
        """What the ledger counts, under its replace-one-row neighbours: the privacy plan."""
        return self._privacy_plan()

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
                        **fields: Any) -> dict[str, Any]:
        record = {"epsilon": float(self.epsilon), "delta": float(self.delta), **fields,
                  "noise_sampler": self.noise_sampler,
                  "noise_seeded": self.noise_seed is not None,
                  "neighbouring": neighbouring}
        drafted = self.schema.drafted_under_dp
        if drafted:  # the schema itself was read from the data, under DP: say so, and the sum
            record["schema_drafted_under_dp"] = {
                **{key: drafted.get(key) for key in ("epsilon", "delta", "columns",
                                                     "differentially_private", "ledger")},
                "with_this_release": {"epsilon": float(self.epsilon) + drafted["epsilon"],
                                      "delta": float(self.delta) + drafted["delta"],
                                      "composition": "basic (an upper bound)"}}
        return record

    def _rows(self, n_rows: int | None) -> int:
        """``n_rows``, or the model's n when None; 0 or less is an error, never the default."""
        if n_rows is None:
            return self.model.n_rows
        if isinstance(n_rows, bool) or int(n_rows) != n_rows or n_rows < 1:
            raise ValueError(f"the number of rows must be a positive integer, got {n_rows!r}")
        return int(n_rows)

    def sample(self, n_rows: int | None = None, *, seed: int = 0,
               partition_rows: int | None = None, device: str = "cpu",
               decode: str = "uniform") -> dd.DataFrame:
        """A lazy Dask DataFrame of synthetic rows, in the schema's output types.

        ``device``: "cpu", "gpu" or "auto" (see :meth:`write`); ``decode``: "uniform",
        "midpoint" or "label" (see :meth:`write`)."""
        warn_open_bins(self.schema, check_decode(decode))
        sampler = model_sampler(self.model, device)
        return sample_frame(self.model, self._rows(n_rows), seed=seed,
                            partition_rows=partition_rows, sampler=sampler, decode=decode)

    def sample_binary(self, n_rows: int | None = None, *, seed: int = 0,
                      partition_rows: int | None = None, device: str = "cpu") -> da.Array:
        """A lazy (rows, d) uint8 dask array of the dummy-coded (binary) output."""
        sampler = model_sampler(self.model, device)
        return sample_binary(self.model, self._rows(n_rows), seed=seed,
                             partition_rows=partition_rows, sampler=sampler)

    def release_metadata(self, n_rows: int, seed: int, partition_rows: int,
                         device: str = "cpu", decode: str = "uniform") -> dict[str, Any]:
        return {**self.model.metadata,
                "sampling": {"rows": n_rows, "seed": seed, "partition_rows": partition_rows,
                             "device": device, "decode": decode},
                "output": output_record(self.schema, decode, getattr(self.model, "fine", {}))}

    def write(self, out: str | Path, n_rows: int | None = None, *, seed: int = 0,
              partition_rows: int | None = None, with_model: bool = False,
              device: str = "cpu", storage_options: dict[str, Any] | None = None,
              decode: str = "uniform", with_binary: bool = False) -> dict[str, Location]:
        """Sample and publish the release ``synthetic.parquet`` and ``metadata.json`` (the model
        in ``model/`` with ``with_model``; the dummy-coded rows as ``synthetic.zarr`` with
        ``with_binary``) at ``out``.

        ``with_binary``: the (rows, d) uint8 dummies are d bytes a row (674 on the DSS shape,
        against ~30 for the decoded row) and the largest part of writing them, so they are
        written only when asked (docs/benchmarks.md, "Per-row cost").

        ``device``: "cpu" (default), "gpu" (the copula's draws on a CUDA GPU through CuPy: the
        same distribution, other rows for the same seed) or "auto" (the GPU where usable). The
        device is recorded in the release and part of what a resumed write must match.

        ``decode``: how codes become the Parquet's values, for attributes whose schema entry
        names no ``decode`` of its own: "uniform" (default; a seeded draw within each bin, from
        a child of the partition's seed), "midpoint", or "label" (the bins' labels, as
        Categoricals). Post-processing: no privacy cost. Recorded in ``metadata.json``
        (``output``) and part of what a resumed write must match.

        Atomic (docs/releases.md): written into a staging directory beside ``out`` under the
        target's lock, completed by ``_COMPLETE.json``, then renamed onto ``out``, replacing an
        earlier release as a whole. ``out`` may be an object-store URL (``s3://...``, reached
        with ``storage_options`` by the driver and the workers): the release is staged under
        ``<out>/_v/<key>/`` and published by the pointer ``<out>/_CURRENT.json``. Run again with
        the same model and arguments after being stopped, it resumes the partitions not yet
        written.
        """
        device = resolve_device(self.model, device)
        warn_open_bins(self.schema, check_decode(decode))
        target = resolve_target(out)  # on the driver: workers have other working directories
        n_rows = self._rows(n_rows)
        if partition_rows is None:
            partition_rows = default_partition_rows(self.schema.d)
        partitions = len(partition_sizes(n_rows, partition_rows))
        metadata = self.release_metadata(n_rows, seed, partition_rows, device, decode)
        labels_only = all(column["decode"] == "label" for column in metadata["output"])
        plan = {"model": model_fingerprint(self.model), "rows": n_rows, "seed": seed,
                "partition_rows": partition_rows, "with_model": with_model,
                "record_format": RECORD_FORMAT,
                # releases with the dummies keep their plans: an older job's staging resumes
                **({} if with_binary else {"binary": False}),
                # the CPU's and the labels' plans stay as they were, so their releases resume
                **({"device": device} if device != "cpu" else {}),
                # a resumed write never mixes decodings
                **({} if labels_only else {"output": metadata["output"]})}
        with release_lock(target, storage_options):
            staged = stage_release(target, plan, storage_options)
            if not staged.complete:
                self._write_staged(staged, metadata, partitions, with_model, with_binary)
            published = staged.publish()
        paths = {name: join(published, file) for name, file in (
            ("parquet", "synthetic.parquet"), ("metadata", "metadata.json"),
            ("record", COMPLETE))}
        if with_binary:
            paths["zarr"] = join(published, "synthetic.zarr")
        if with_model:
            paths["model"] = join(published, "model")
        if self.ledger is not None and self.ledger_entry_ is not None:
            self.ledger.set_paths(self.ledger_entry_.id, release_path=target,
                                  model_path=paths.get("model"))
        return paths

    def _write_staged(self, staged: StagedRelease, metadata: dict[str, Any], partitions: int,
                      with_model: bool, with_binary: bool) -> None:
        """The missing partitions, then metadata and the completion record, into staging."""
        sampling = metadata["sampling"]
        options = staged.storage_options
        if with_model:  # recorded here first, so a retry with the run id reuses this model
            self.save(join(staged.path, "model"), options)
        with timed(self.timings_, "prepare_sampler"):
            sampler = model_sampler(self.model, sampling["device"])
        with timed(self.timings_, "sample_write"):
            done = staged.done()
            zarr_path = join(staged.path, "synthetic.zarr")
            binary = None if not with_binary else (
                open_zarr_for_writing(zarr_path, options) if done else
                create_zarr(zarr_path, (sampling["rows"], self.schema.d),
                            sampling["partition_rows"],
                            {"columns": self.schema.column_labels(), **metadata}, options))
            compute(*write_partitions(self.model, sampling["rows"], seed=sampling["seed"],
                                      partition_rows=sampling["partition_rows"],
                                      binary_target=binary,
                                      parquet=join(staged.path, "synthetic.parquet"),
                                      markers=staged.markers, skip=done, sampler=sampler,
                                      storage_options=options, decode=sampling["decode"]),
                    show_progress=self.show_progress)
            missing = sorted(set(range(partitions)) - staged.done())
            if missing:
                raise ReleaseError(
                    f"{len(missing)} partition(s) the workers wrote (e.g. {missing[0]}) are not "
                    f"in {staged.path} as this machine sees it: the workers must see the "
                    "output path at the same absolute location")
            write_json(join(staged.path, "metadata.json"), metadata, options)
            privacy = metadata.get("privacy", {})
            staged.finish({
                "rows": sampling["rows"], "partitions": partitions,
                "partition_rows": sampling["partition_rows"], "seed": sampling["seed"],
                "columns": self.schema.names, "dummy_columns": self.schema.d,
                "method": self.name,
                "privacy": {key: privacy.get(key) for key in (
                    "epsilon", "delta", "mechanism", "accountant", "differentially_private")},
            })

    def save(self, path: str | Path,
             storage_options: dict[str, Any] | None = None) -> Location:
        """Save the noisy model (no raw data) for sampling later, in a directory or under an
        object-store URL (``storage_options``: fsspec's options of the store)."""
        path = self.model.save(location(path), storage_options)
        if self.ledger is not None and self.ledger_entry_ is not None:
            self.ledger.set_paths(self.ledger_entry_.id, model_path=path)
        return path


class MarginalSynthesizer(Synthesizer):
    """Consistent noisy 1- and 2-way marginals, then rows updated to match them (the default).

    See dp_dask/methods/marginals.py. Extra parameters: ``accountant``, "exact" (the Gaussian
    mechanism's exact privacy curve, default) or "zcdp" (zCDP with the CKS conversion);
    ``fit_iterations``, the mirror-descent steps fitting the candidate rows (once per estimate)
    to the noisy measurements (default None: 50 up to ε = 1 replace-one, more the less noise
    there is, at most 400, ``reweight.iterations_for``; 0 skips the fit: faster sampling on wide
    schemas, 2-way error a few per cent higher, docs/method.md); ``neighbours``, "replace" (one
    row replaced, n public: dp_dask's notion, default) or "add_remove" (one row added or
    removed, n private and estimated from the noisy counts: MST's and AIM's notion, half the
    noise variance at the same ε; the ledger counts it at its replace-one ε, docs/privacy.md);
    ``fine_share``, the fraction of ρ measuring the schema's fine grids, when it declares any
    (default ``FINE_SHARE``, docs/method.md).
    """

    name = "marginals"
    fine_grids = True

    def __init__(self, schema: Schema | str | Path, *, accountant: str = "exact",
                 fit_iterations: int | None = None, neighbours: str = "replace",
                 fine_share: float = FINE_SHARE, **common: Any) -> None:
        super().__init__(schema, **common)
        self.accountant = accountant
        self.fine_share = check_fine_share(fine_share)
        self.fit_iterations = check_iterations(fit_iterations)
        self.neighbours = check_neighbours(neighbours)

    @property
    def rows_public(self) -> bool:
        return self.neighbours == "replace"

    def _privacy_plan(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "mechanism": "gaussian",
                "accountant": self.accountant,
                "rho": rho_budget(self.epsilon, self.delta, self.accountant)}

    def _ledger_plan(self) -> dict[str, Any]:
        """The plan as replace-one-row DP: under add/remove the same noise meets a replacement
        moving two cells per table, twice the squared sensitivity, hence twice the charge ρ."""
        plan = self._privacy_plan()
        if self.rows_public:
            return plan
        rho = 2 * plan["rho"]
        return {**plan, "rho": rho, "epsilon": epsilon_spent(rho, self.delta, self.accountant)}

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        """The d×d count matrix and the exact fine histograms, in one pass."""
        return fine_count_graph(ddf, self.schema)

    def _rows_counted(self, exact: tuple[np.ndarray, np.ndarray]) -> int:
        return rows_counted(exact[0], self.schema)

    def _fit_counts(self, exact: tuple[np.ndarray, np.ndarray], n_rows: int,
                    metadata: dict[str, Any]) -> MarginalModel:
        rho = self._privacy_plan()["rho"]
        rng = None if self.noise_seed is None else np.random.default_rng(self.noise_seed)
        counts, fine_counts = exact
        with timed(self.timings_, "noise"):
            measurements, fine = measure_all(
                counts, split_fine(fine_counts, self.schema), self.schema, rho,
                accountant=self.accountant, sampler=self.noise_sampler, rng=rng,
                neighbours=self.neighbours, fine_share=self.fine_share)
        as_replace_one = {}
        if not self.rows_public:  # the exact n stops here: only its noisy estimate goes on
            n_rows = metadata["n_rows"] = estimated_rows(measurements)
            plan = self._ledger_plan()
            as_replace_one = {"replace_one_row": {"epsilon": plan["epsilon"], "rho": plan["rho"]}}
        k = query_count(self.schema.m)
        sensitivity = TABLE_L2_SENSITIVITY[self.neighbours]
        split = (f"{k} Gaussian measurements (every 1-way histogram and 2-way table, L2 "
                 f"sensitivity {sensitivity:.6g} each) sharing rho = {rho:.6g}: "
                 f"{ONE_WAY_SHARE:g} to the histograms, the rest to the tables, each in "
                 f"proportion to cells^(1/3)")
        fine_record = {}
        if fine:
            names = [self.schema.names[a] for a in sorted(fine)]
            split = (f"{k + len(fine)} Gaussian measurements sharing rho = {rho:.6g}: "
                     f"{self.fine_share:g} of it to the fine histograms of {', '.join(names)} "
                     f"(L2 sensitivity {sensitivity:.6g} each), in proportion to cells^(1/3); "
                     f"the rest to {k} measurements (every 1-way histogram and 2-way table, "
                     f"L2 sensitivity {sensitivity:.6g} each): {ONE_WAY_SHARE:g} of it to the "
                     "histograms, the rest to the tables, each in proportion to cells^(1/3)")
            fine_record = {"fine_share": self.fine_share, "fine_histograms": {
                self.schema.names[a]: {"cells": len(m.values), "sigma": m.sigma}
                for a, m in sorted(fine.items())}}
        metadata |= {
            "method": "marginals: consistent noisy 1-/2-way marginals + row updates",
            "privacy": self._privacy_record(
                mechanism="gaussian", accountant=self.accountant, rho=rho, k=k,
                neighbouring=NEIGHBOURING[self.neighbours], **as_replace_one,
                budget_split=f"{split}; the {self.accountant} accountant gives "
                f"({self.epsilon:g}, {self.delta:g})-DP", **fine_record,
                post_processing="consistent marginals (inverse-variance 1-way estimates, "
                "tables shrunk towards independence and fitted to them); rows sampled from a "
                "spanning tree, weighted to fit the noisy measurements and updated towards the "
                "tables" + ("; each fine histogram projected, bin by bin, onto the "
                            "consistent 1-way marginal's count" if fine else "")),
        }
        with timed(self.timings_, "consistency"):
            return fit_marginals(measurements, self.schema, n_rows, metadata,
                                 fit_iterations=self.fit_iterations, fine=fine,
                                 fine_share=self.fine_share)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        return MarginalModel.from_files(path, document, storage_options)


class GaussianCopulaSynthesizer(Synthesizer):
    """The binary Gaussian copula of Asghar et al., as in the paper (``--method copula``).

    Extra parameters: ``mechanism`` "gaussian" (one Gaussian mechanism, default) or "laplace"
    (per-query Laplace, advanced composition, as in the paper); ``accountant`` of the Gaussian
    mechanism; ``within_attribute`` "pairwise" (default) or "zero": how an attribute's exclusive
    dummies enter the latent correlation matrix (docs/method.md); ``calibration_draws``.
    """

    name = "copula"
    gpu_sampling = True

    def __init__(self, schema: Schema | str | Path, *, mechanism: str = "gaussian",
                 accountant: str = "exact", within_attribute: str = "pairwise",
                 calibration_draws: int = 200_000, **common: Any) -> None:
        super().__init__(schema, **common)
        self.mechanism = mechanism
        self.accountant = accountant
        self.within_attribute = within_attribute
        self.calibration_draws = calibration_draws

    def _plan(self) -> NoisePlan:
        return plan_noise(self.mechanism, self.epsilon, self.delta, self.schema.m,
                          accountant=self.accountant)

    def _privacy_plan(self) -> dict[str, Any]:
        return self._plan().to_json()

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> CopulaModel:
        plan = self._plan()
        with timed(self.timings_, "noise"):
            noisy_counts = noisy_count_matrix(exact, self.schema, plan,
                                              sampler=self.noise_sampler, seed=self.noise_seed)
        metadata |= {
            "method": "dp-gaussian-copula (Asghar et al.)",
            "privacy": {**self._privacy_record(**plan.to_json()), "negatives": "clamped to 0",
                        "post_processing": "histograms and tables projected onto the public "
                                           "total n; noise-sized dependence shrunk (see model)"},
        }
        with timed(self.timings_, "copula"):
            return fit_model(noisy_counts, self.schema, n_rows,
                             within_attribute=self.within_attribute, noise_std=plan.cell_std,
                             calibration_draws=self.calibration_draws, metadata=metadata,
                             timings=self.timings_)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> CopulaModel:
        return CopulaModel.load(path, storage_options)


# Methods in their own modules register on import; they subclass Synthesizer, hence at the end.
import dp_dask.methods.dpcopula  # noqa: E402, F401, I001
import dp_dask.methods.dpview  # noqa: E402, F401, I001
import dp_dask.methods.dpcopula_mle  # noqa: E402, F401, I001
import dp_dask.methods.dpcopula_hybrid  # noqa: E402, F401, I001
