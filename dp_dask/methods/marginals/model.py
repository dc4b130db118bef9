"""The marginals method's models: the noisy measurements, their consistent marginals and
the spanning tree (:class:`~.fitted.FittedMarginals`) with their samplers, saved and loaded;
a dense-joint release's (:class:`JointModel`) samples its fitted joint instead."""


from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from dp_dask.data.constraints import forbidden_cells
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.values import cell_spans
from dp_dask.methods.marginals.conditioned import ConditionedSampler, condition_classes
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.methods.marginals.fitted import FittedMarginals
from dp_dask.methods.marginals.joint import (
    JointSampler,
    estimate_joint,
    forbidden_joint,
    joint_marginals,
    joint_steps,
)
from dp_dask.methods.marginals.plan import FINE_SHARE, measured_queries, shares_text
from dp_dask.methods.marginals.sampler import MarginalSampler
from dp_dask.model_io import ModelError, model_schema, read_model_arrays, write_model_files
from dp_dask.postprocess.consistency import (
    Marginals,
    Measurement,
    consistent_fine,
    consistent_marginals,
    fine_bin_sums,
)
from dp_dask.postprocess.reweight import (
    check_iterations,
    iterations_for,
)
from dp_dask.postprocess.tree import implied_tables, spanning_tree

# 2: the noisy measurements themselves are saved, for the sampler's weight fit.
MODEL_FORMAT = 2
METHOD = "marginals"


class MarginalModel(FittedMarginals):
    """The fitted marginals (:class:`~.fitted.FittedMarginals`) as a release's model: the
    samplers that draw its rows, its files."""

    method: ClassVar[str] = "marginals"

    def sampler(self) -> MarginalSampler | JointSampler:
        return MarginalSampler(self, fit_iterations=int(self.metadata["model"]["fit_iterations"]),
                               config=self.config)

    def conditioned_sampler(self, where: str | None, balance: str | None,
                            decode: str = "uniform") -> ConditionedSampler | JointSampler:
        """The sampler of this model conditioned on ``where`` (None: no condition) and, with
        ``balance``, one class per code of that attribute the condition leaves possible
        (:func:`~.conditioned.condition_classes`): the conditioned estimates'
        (:mod:`.conditioned`)."""
        condition, classes, index = condition_classes(self, where, balance, decode)
        return ConditionedSampler(self.sampler(), condition, classes, index)

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """``<path>/model.npz`` (measurements, consistent marginals, tree) and
        ``<path>/model.json``."""
        arrays = {f"one_way_{a}": v for a, v in enumerate(self.marginals.one_way)}
        arrays |= {f"two_way_{a}_{b}": t for (a, b), t in self.marginals.two_way.items()}
        arrays |= {f"measured_{k}": m.values for k, m in enumerate(self.measurements)}
        arrays |= {f"fine_{a}": v for a, v in self.fine.items()}
        arrays |= {"joint": self.joint} if self.joint is not None else {}
        document = {"format": MODEL_FORMAT, "method": METHOD, "n_rows": self.n_rows,
                    "schema": self.schema.to_json(), "metadata": self.metadata,
                    "measurements": [{"attributes": list(m.attributes), "sigma": m.sigma}
                                     for m in self.measurements],
                    # absent without fine grids: such models' files stay as they were
                    **({"fine": sorted(self.fine)} if self.fine else {}),
                    **({"joint": True} if self.joint is not None else {})}
        return write_model_files(path, document,
                                 {"order": self.order, "parents": self.parents, **arrays},
                                 storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        """A saved model, checked: format, schema hash, array shapes, no NaN (else ModelError)."""
        schema = model_schema(path, document, MODEL_FORMAT)
        sizes = schema.sizes.tolist()
        queries = [tuple(q["attributes"]) for q in document["measurements"]]
        # the one-shot pairs or a dense joint's triples, then the adaptive rounds' marginals
        rest = queries[schema.m:]
        dense = bool(document.get("joint"))  # its 2-way tables the joint's, every pair
        pairs = ([(i, j) for i in range(schema.m) for j in range(i + 1, schema.m)] if dense
                 else [q for q in rest if len(q) == 2])
        if queries[:schema.m] != measured_queries(schema, []) or len(set(rest)) != len(rest) or any(
                len(q) < 2 or list(q) != sorted(set(q)) or q[0] < 0 or q[-1] >= schema.m
                for q in rest):
            raise ModelError(f"model {path}/model.json: its measurements are not those of its "
                             "schema: fit again")
        shapes = {f"one_way_{a}": (s,) for a, s in enumerate(sizes)}
        shapes |= {f"two_way_{i}_{j}": (sizes[i], sizes[j]) for i, j in pairs}
        shapes |= {f"measured_{k}": (int(np.prod(schema.sizes[list(q)])),)
                   for k, q in enumerate(queries)}
        grids = [int(a) for a in document.get("fine", [])]
        if not set(grids) <= set(schema.fine_grids):
            raise ModelError(f"model {path}/model.json: fine histograms of attributes without a "
                             "fine grid in its schema: fit again")
        shapes |= {f"fine_{a}": (len(schema.attributes[a].fine) - 1,) for a in grids}
        shapes |= {"joint": tuple(sizes)} if dense else {}
        arrays = read_model_arrays(path, shapes | {"order": (schema.m,),
                                                   "parents": (schema.m,)}, storage_options)
        one_way = tuple(arrays[f"one_way_{a}"] for a in range(schema.m))
        two_way = {(i, j): arrays[f"two_way_{i}_{j}"] for i, j in pairs}
        measurements = tuple(Measurement(q, arrays[f"measured_{k}"], float(m["sigma"]))
                             for k, (q, m) in enumerate(zip(queries, document["measurements"])))
        return (JointModel if dense else cls)(
            schema, int(document["n_rows"]), Marginals(one_way, two_way), arrays["order"],
            arrays["parents"], measurements, document["metadata"],
            {a: arrays[f"fine_{a}"] for a in grids}, arrays["joint"] if dense else None)


class JointModel(MarginalModel):
    """A dense-joint release's model (:mod:`.joint`): the fitted joint (``joint``), its 1-/2-way
    tables and their tree; its rows are drawn from the joint, restricted to a condition's
    classes where there is one. Saved and loaded as :class:`MarginalModel`, the joint beside."""

    def sampler(self) -> JointSampler:
        return JointSampler(self.schema, self.joint, self.fine)

    def conditioned_sampler(self, where: str | None, balance: str | None,
                            decode: str = "uniform") -> JointSampler:
        condition, classes, index = condition_classes(self, where, balance, decode)
        return self.sampler().conditioned(condition, classes, index)


def fit_marginals(measurements: list[Measurement], schema: Schema, n_rows: int,
                  metadata: dict[str, Any] | None = None, *,
                  fit_iterations: int | None = None,
                  fine: dict[int, Measurement] | None = None,
                  fine_share: float = FINE_SHARE,
                  config: MarginalsConfig = DEFAULTS) -> MarginalModel:
    """Post-processing of the measurements: consistent marginals and their spanning tree.

    Two passes: tables shrunk towards independence give a first tree; the tables that tree
    implies are a closer target, so the second pass shrinks towards them, pulls likely empty
    cells to zero, and refits the tree. ``fit_iterations`` is recorded for the sampler (the
    mirror-descent steps of each estimate's weight fit; 0: none; None: by the measurements'
    noise, :func:`~dp_dask.postprocess.reweight.iterations_for`). ``fine``: the noisy fine
    histograms by attribute, each made consistent with its attribute's consistent 1-way
    marginal (:func:`~dp_dask.postprocess.consistency.consistent_fine`), measured with
    ``fine_share`` of ρ (recorded, as are ``config``'s shares).
    """
    if check_iterations(fit_iterations) is None:
        fit_iterations = iterations_for((m.sigma for m in measurements), config.reweight)
    # the schema's constraints are public: their cells are zero before consistency, and after
    measurements = [replace(m, values=structural_zeros(schema, m.attributes, m.values))
                    for m in measurements]
    fine = fine or {}
    layouts = {a: fine_layout(schema.attributes[a]) for a in fine}
    # A fine histogram's bin sums measure its attribute's histogram too.
    sums = {a: fine_bin_sums(measured, layouts[a].first, layouts[a].measured.start,
                             schema.sizes[a]) for a, measured in fine.items()}
    first = consistent_marginals(measurements, schema.sizes, n_rows, extra=sums,
                                 config=config.consistency)
    prior = implied_tables(first, *spanning_tree(first, schema.m))
    marginals = consistent_marginals(measurements, schema.sizes, n_rows, prior, empty_cells=True,
                                     extra=sums, config=config.consistency)
    marginals = Marginals(
        tuple(structural_zeros(schema, (a,), v) for a, v in enumerate(marginals.one_way)),
        {pair: structural_zeros(schema, pair, t) for pair, t in marginals.two_way.items()})
    order, parents = spanning_tree(marginals, schema.m)
    sigmas = {"one_way": [m.sigma for m in measurements if len(m.attributes) == 1],
              "two_way": [m.sigma for m in measurements if len(m.attributes) == 2]}
    if any(len(m.attributes) == 3 for m in measurements):  # the adaptive rounds'
        sigmas["three_way"] = [m.sigma for m in measurements if len(m.attributes) == 3]
    consistent = project_fine(schema, fine, marginals)
    tree = "tables" in (metadata or {}).get("privacy", {})  # the tree plan's shares
    details = {"method": METHOD,
               "budget_shares": shares_text(tree, fine_share if fine else None, config),
               "noise_sigma": sigmas | ({"fine": {schema.names[a]: m.sigma
                                                  for a, m in fine.items()}} if fine else {}),
               "fit_iterations": fit_iterations,
               "tree_parents": {schema.names[a]: (schema.names[p] if p >= 0 else None)
                                for a, p in enumerate(parents.tolist())}}
    return MarginalModel(schema, n_rows, marginals, order, parents, tuple(measurements),
                         {**(metadata or {}), "model": details}, consistent)


def fit_joint_model(measured: list[Measurement], fine: dict[int, Measurement], schema: Schema,
                    n_rows: int, metadata: dict[str, Any], *, config: MarginalsConfig = DEFAULTS,
                    one_way_share: float = 0.0) -> JointModel:
    """Post-processing of a dense-joint release's measurements (the 1-way histograms, their
    second draw at ``one_way_share`` of the triples' ρ merged in, then every triple): the joint
    fitted to them (:func:`~.joint.estimate_joint`, the schema's structural zeros held at 0), its
    1-/2-way tables and their spanning tree, each ``fine`` histogram made consistent with the
    joint's histogram of its attribute."""
    steps = joint_steps(int(np.prod(schema.sizes)), len(measured), config)
    joint = estimate_joint(schema.sizes, measured, n_rows, forbidden=forbidden_joint(schema),
                           iterations=steps)
    marginals = joint_marginals(joint)
    order, parents = spanning_tree(marginals, schema.m)
    details = {"method": METHOD,
               "budget_shares": f"{config.one_way_share:g} of rho to the histograms, the rest "
               + (f"{one_way_share:g} to the histograms again, the rest " if one_way_share else "")
               + f"to every triple, each in proportion to cells^{config.cells_exponent:.4g}",
               "noise_sigma": {"one_way": [m.sigma for m in measured[:schema.m]],
                               "three_way": [m.sigma for m in measured[schema.m:]]}
               | ({"fine": {schema.names[a]: m.sigma for a, m in fine.items()}} if fine else {}),
               "joint": {"cells": int(joint.size), "iterations": steps},
               "fit_iterations": 0,
               "tree_parents": {schema.names[a]: (schema.names[p] if p >= 0 else None)
                                for a, p in enumerate(parents.tolist())}}
    return JointModel(schema, n_rows, marginals, order, parents, tuple(measured),
                      {**metadata, "model": details}, project_fine(schema, fine, marginals),
                      joint)


def project_fine(schema: Schema, fine: dict[int, Measurement],
                 marginals: Marginals) -> dict[int, np.ndarray]:
    """Each noisy fine histogram (by attribute) made consistent with its attribute's consistent
    1-way marginal, an end bin its cells can not resolve leaning on a decaying tail
    (:func:`~dp_dask.postprocess.consistency.consistent_fine`)."""
    layouts = {a: fine_layout(schema.attributes[a]) for a in fine}
    return {a: consistent_fine(m.values, layouts[a].first, layouts[a].measured.start,
                               marginals.one_way[a], m.sigma,
                               cell_spans(schema.attributes[a], layouts[a].edges))
            for a, m in fine.items()}


def structural_zeros(schema: Schema, clique: tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """``values`` (a table over ``clique``, flat or not) with the cells the schema's constraints
    rule out set to 0 (:func:`~dp_dask.data.constraints.forbidden_cells`): as they are without
    constraints."""
    forbidden = forbidden_cells(schema.constraints, schema.attributes, clique)
    return values if forbidden is None else np.where(forbidden.reshape(values.shape), 0.0, values)
