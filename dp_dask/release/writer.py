"""Writing a fitted model's release: its plan (:class:`ReleasePlan`) and :func:`write_release`.

A plan is the whole of what a release is drawn and written with (rows, seed, partitions,
device, decoding, condition, outputs); :func:`write_release` samples the model by it on Dask
and publishes the result atomically (:mod:`.staging`): the partitions into the version its
staging record names, then metadata.json and the completion record, then the pointer. Sampling
is post-processing of the noisy model: nothing here reads private data or spends budget.
``Synthesizer.write`` builds the plan from its arguments and delegates here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from dp_dask.cluster import compute
from dp_dask.copula.sample import (
    PartitionSampler,
    SampledModel,
    default_partition_rows,
    model_sampler,
    partition_sizes,
    resolve_device,
    write_partitions,
)
from dp_dask.data.ids import with_ids
from dp_dask.data.io import Location, create_zarr, join, open_zarr_for_writing, write_json
from dp_dask.data.values import check_decode, output_columns, output_record, warn_open_bins
from dp_dask.release.layout import COMPLETE, RECORD_FORMAT, ReleaseError, resolve_target
from dp_dask.release.staging import StagedRelease, release_lock, stage_release
from dp_dask.release.verify import model_fingerprint
from dp_dask.timing import timed


class Model(SampledModel, Protocol):
    """What a release needs of any method's fitted model: its method's name (the registry's
    key), its metadata, and saving."""

    method: str
    metadata: dict[str, Any]

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        ...


def positive_rows(n_rows: Any) -> int:
    """``n_rows`` as an int, else a ValueError: 0 or less is an error, never a default."""
    if isinstance(n_rows, bool) or int(n_rows) != n_rows or n_rows < 1:
        raise ValueError(f"the number of rows must be a positive integer, got {n_rows!r}")
    return int(n_rows)


@dataclasses.dataclass(frozen=True)
class ReleasePlan:
    """What a release is drawn and written with; :meth:`for_model` fills in what the model
    decides. All but ``storage_options`` are recorded and part of what a resumed write must
    match.

    ``rows``: the synthetic rows. ``partition_rows``: rows per output partition (one task and
    one Parquet part each). ``seed``: the draws' seed (each partition's a child of it).

    ``device``: "cpu", or "gpu" (the copula's draws on a CUDA GPU through CuPy: the same
    distribution, other rows for the same seed); :meth:`for_model` resolves "auto".

    ``decode``: how codes become the Parquet's values, for attributes whose schema entry names
    no ``decode`` of its own: "uniform" (default; a seeded draw within each bin, from a child of
    the partition's seed), "midpoint", or "label" (the bins' labels, as Categoricals).
    Post-processing: no privacy cost. Recorded in ``metadata.json`` (``output``).

    ``where``: a condition on the rows (``"region == 'EU' and age >= 30"``,
    dp_dask.conditions); ``balance``: an attribute whose classes get equal rows. The model is
    conditioned, not its release filtered (methods whose model allows it: ``conditional``);
    metadata.json records the condition (``sampling.conditioned``).

    ``with_binary``: the (rows, d) uint8 dummies in ``synthetic.zarr`` too: d bytes a row (674
    on the DSS shape, against ~30 for the decoded row) and the largest part of writing them,
    so written only when asked (benchmarks/SESSIONS.md, "Per-row cost"). ``with_model``: the model
    in ``model/`` too. ``storage_options``: fsspec's options of the store the release goes to.
    """

    rows: int
    partition_rows: int
    seed: int = 0
    device: str = "cpu"
    decode: str = "uniform"
    where: str | None = None
    balance: str | None = None
    with_binary: bool = False
    with_model: bool = False
    storage_options: dict[str, Any] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", positive_rows(self.rows))
        if (isinstance(self.partition_rows, bool) or int(self.partition_rows) != self.partition_rows
                or self.partition_rows < 1):
            raise ValueError(f"partition_rows must be positive, got {self.partition_rows!r}")
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"a plan's device is 'cpu' or 'gpu' (ReleasePlan.for_model resolves "
                             f"'auto'), got {self.device!r}")
        check_decode(self.decode)

    @classmethod
    def for_model(cls, model: SampledModel, rows: int | None = None, *,
                  partition_rows: int | None = None, device: str = "cpu",
                  **fields: Any) -> ReleasePlan:
        """The plan of a release of ``model``: ``rows`` (None: the model's n), ``partition_rows``
        (None: the default for its width), ``device`` ("auto": the GPU where the model's
        sampler can use one and one is seen; a GPU asked for and not usable is an error)."""
        return cls(rows=model.n_rows if rows is None else rows,
                   partition_rows=(default_partition_rows(model.schema.d)
                                   if partition_rows is None else partition_rows),
                   device=resolve_device(model, device), **fields)

    @property
    def conditioned(self) -> bool:
        """Whether the rows are drawn from the model conditioned (``where`` or ``balance``)."""
        return self.where is not None or self.balance is not None

    @property
    def partitions(self) -> int:
        return len(partition_sizes(self.rows, self.partition_rows))


def release_metadata(model: Model, plan: ReleasePlan,
                     sampler: PartitionSampler | None = None) -> dict[str, Any]:
    """metadata.json of the release of ``model`` by ``plan``: the model's metadata, how it was
    sampled (``sampler``'s condition, when conditioned), its output columns and constraints."""
    record = getattr(sampler, "record", None)  # a conditioned sampler's condition
    schema = model.schema
    return {**model.metadata,
            "sampling": {"rows": plan.rows, "seed": plan.seed,
                         "partition_rows": plan.partition_rows, "device": plan.device,
                         "decode": plan.decode,
                         **({"conditioned": record(plan.rows)} if record else {})},
            "output": output_record(schema, plan.decode, getattr(model, "fine", {})),
            # absent without constraints: such releases stay as they were
            **({"constraints": {c.name: c.to_json() for c in schema.constraints}}
               if schema.constraints else {})}


def staging_record(model: Model, plan: ReleasePlan, metadata: dict[str, Any]) -> dict[str, Any]:
    """What the staged version is keyed by and a resumed write must match: the model and the
    plan. Fields are added only where a release departs from the older records, so that the
    stagings older jobs left behind keep their keys and resume."""
    labels_only = all(column["decode"] == "label" for column in metadata["output"])
    return {"model": model_fingerprint(model), "rows": plan.rows, "seed": plan.seed,
            "partition_rows": plan.partition_rows, "with_model": plan.with_model,
            "record_format": RECORD_FORMAT,
            # releases with the dummies keep their plans: an older job's staging resumes
            **({} if plan.with_binary else {"binary": False}),
            # the CPU's and the labels' plans stay as they were, so their releases resume
            **({"device": plan.device} if plan.device != "cpu" else {}),
            # a resumed write never mixes decodings
            **({} if labels_only else {"output": metadata["output"]}),
            **({"conditioned": metadata["sampling"]["conditioned"]}
               if "conditioned" in metadata["sampling"] else {})}


def write_release(model: Model, plan: ReleasePlan, out: str | Path, *,
                  sampler: PartitionSampler | None = None,
                  save_model: Callable[[Location, dict[str, Any] | None], Location] | None = None,
                  timings: dict[str, float] | None = None,
                  show_progress: bool = False) -> dict[str, Location]:
    """Sample ``model`` by ``plan`` and publish the release at ``out`` (docs/releases.md):
    ``synthetic.parquet``, ``metadata.json`` and the completion record, with ``model/`` and
    ``synthetic.zarr`` as the plan asks; the paths of each, by kind.

    ``sampler``: the model's conditioned sampler where the plan is conditioned (the method
    decides whether it can condition), else None: the model's own on the plan's device.
    ``save_model``: how ``model/`` is saved (default ``model.save``; the synthesizer's also
    records it in the ledger). ``timings``: the stages' seconds are recorded there.

    Atomic: written under the target's lock into the version the model and plan key
    (``.<name>.v-<key>`` beside ``out``, or ``<out>/_v/<key>/`` in an object store), completed
    by ``_COMPLETE.json``, then published by switching the link ``out`` (the pointer
    ``<out>/_CURRENT.json``) to it, replacing an earlier release as a whole (kept for
    ``RELEASE_GRACE_SECONDS`` for readers that verified it). A version already complete for the
    same model and plan is only published again; one a stopped job left is resumed, its
    missing partitions written.
    """
    if plan.conditioned and sampler is None:
        raise ValueError("a conditioned plan (where, balance) is drawn by its conditioned "
                         "sampler: pass it as sampler")
    warn_open_bins(model.schema, plan.decode)
    target = resolve_target(out)  # on the driver: workers have other working directories
    metadata = release_metadata(model, plan, sampler)
    with release_lock(target, plan.storage_options):
        staged = stage_release(target, staging_record(model, plan, metadata),
                               plan.storage_options)
        if not staged.complete:
            _write_staged(model, plan, staged, metadata, sampler,
                          save_model or model.save, timings, show_progress)
        published = staged.publish()
    paths = {name: join(published, file) for name, file in (
        ("parquet", "synthetic.parquet"), ("metadata", "metadata.json"), ("record", COMPLETE))}
    if plan.with_binary:
        paths["zarr"] = join(published, "synthetic.zarr")
    if plan.with_model:
        paths["model"] = join(published, "model")
    return paths


def _write_staged(model: Model, plan: ReleasePlan, staged: StagedRelease,
                  metadata: dict[str, Any], sampler: PartitionSampler | None,
                  save_model: Callable[[Location, dict[str, Any] | None], Location],
                  timings: dict[str, float] | None, show_progress: bool) -> None:
    """The missing partitions, then metadata and the completion record, into staging (drawn by
    ``sampler``, else the model's on the plan's device)."""
    options = staged.storage_options
    schema = model.schema
    if plan.with_model:  # saved first, so a retry with the run id reuses this model
        save_model(join(staged.path, "model"), options)
    with timed(timings, "prepare_sampler"):
        sampler = sampler or model_sampler(model, plan.device)
    with timed(timings, "sample_write"):
        done = staged.done()
        zarr_path = join(staged.path, "synthetic.zarr")
        binary = None if not plan.with_binary else (
            open_zarr_for_writing(zarr_path, options) if done else
            create_zarr(zarr_path, (plan.rows, schema.d), plan.partition_rows,
                        {"columns": schema.column_labels(), **metadata}, options))
        compute(*write_partitions(model, plan.rows, seed=plan.seed,
                                  partition_rows=plan.partition_rows, binary_target=binary,
                                  parquet=join(staged.path, "synthetic.parquet"),
                                  markers=staged.markers, skip=done, sampler=sampler,
                                  storage_options=options, decode=plan.decode),
                show_progress=show_progress)
        missing = sorted(set(range(plan.partitions)) - staged.done())
        if missing:
            raise ReleaseError(
                f"{len(missing)} partition(s) the workers wrote (e.g. {missing[0]}) are not "
                f"in {staged.path} as this machine sees it: the workers must see the "
                "output path at the same absolute location")
        write_json(join(staged.path, "metadata.json"), metadata, options)
        privacy = metadata.get("privacy", {})
        staged.finish({
            "rows": plan.rows, "partitions": plan.partitions,
            "partition_rows": plan.partition_rows, "seed": plan.seed,
            "columns": with_ids([c.name for c in output_columns(schema, plan.decode)],
                                schema.ids),
            "dummy_columns": schema.d,
            "method": model.method,
            "privacy": {key: privacy.get(key) for key in (
                "epsilon", "delta", "mechanism", "accountant", "differentially_private")},
        })
