"""Bayesian networks for Tabular-DDP: where the network comes from, and what it implies for noise.

Tabular-DDP (Maughan & Near) calibrates the noise of a chunk of column histograms to the chunk's
*dependent sensitivity* DS = Σ ρᵢⱼ over the edges (Xᵢ, Xⱼ) of a Bayesian network, with

    ρᵢⱼ = max over dⱼ, dᵢ₁, dᵢ₂ of log( Pr[Xᵢ=dᵢ₁, Xⱼ=dⱼ] / Pr[Xᵢ=dᵢ₂, Xⱼ=dⱼ] ).

The formula is not symmetric in i and j, but an edge's direction is not identifiable from data
(Markov-equivalent networks orient edges differently), so :func:`edge_rho` takes the larger of
the two orientations: never less noise than either reading of the paper.

Zero probabilities make ρ infinite. Every edge's pair table is therefore smoothed, before ρ, by
mixing it with the uniform table: P̃ = (1 − λ)·P + λ/cells, with λ (``smoothing``) public, fixed
before any data is read. Every cell is then at least λ/cells, so ρ ≤ log(1 + (1 − λ)·cells/λ).
The DDP claim is about the smoothed network. λ = 0 is allowed; a zero cell then gives ρ = ∞,
and the release falls back to plain DP (dp_dask.stats).

Sources (each gives edges and each edge's pair table Pr[Xᵢ, Xⱼ]):

* :func:`network_from_json`: a public network (edge list + CPTs), pair tables by exact
  inference in pgmpy;
* :func:`network_from_sample`: a public sample file; structure per chunk by pgmpy's hill climbing
  on BIC, CPTs with add-one (Dirichlet) pseudo-counts, pair tables by inference;
* :func:`network_from_tables`: our own DP noisy 2-way tables (post-processing): a Chow–Liu tree
  per chunk (dp_dask.postprocess.tree.spanning_tree) on the consistent noisy tables. pgmpy's
  estimators read rows, and all we hold are tables; a maximum-information tree needs only
  pairwise tables.

pgmpy is an optional dependency (``pip install dp-dask[ddp]``), imported only by the first two.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.data.encode import encode_partition
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema
from dp_dask.postprocess.consistency import Measurement, consistent_marginals
from dp_dask.postprocess.tree import spanning_tree

DEFAULT_SMOOTHING = 0.01
# Hill climbing over a chunk: BIC for discrete data, as in the paper's use of learned networks.
STRUCTURE_SCORE = "bic-d"
# Add-one (Laplace) pseudo-counts when fitting CPTs to a public sample: no empty parent state.
SAMPLE_PSEUDO_COUNTS = 1


class NetworkError(ValueError):
    """A network file or public sample that does not fit the schema."""


@dataclass(frozen=True)
class Network:
    """The part of a Bayesian network that ρ needs: its edges (attribute indices, parent first)
    and each edge's pair table Pr[X_parent, X_child] (|A_parent|×|A_child|, summing to 1)."""

    edges: tuple[tuple[int, int], ...]
    joints: dict[tuple[int, int], np.ndarray] = field(repr=False)
    source: str

    def describe(self, schema: Schema) -> list[list[str]]:
        return [[schema.names[p], schema.names[c]] for p, c in self.edges]


def chunks(m: int, k: int) -> list[list[int]]:
    """The paper's split: consecutive columns, chunks of k (the last may be smaller)."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"--k must be a positive integer, got {k!r}")
    return [list(range(start, min(start + k, m))) for start in range(0, m, k)]


def smooth(joint: np.ndarray, smoothing: float) -> np.ndarray:
    """(1 − λ)·P + λ/cells of a pair table normalised to sum 1."""
    if not 0 <= smoothing < 1:
        raise ValueError(f"the smoothing λ must lie in [0, 1), got {smoothing!r}")
    joint = np.asarray(joint, dtype=np.float64)
    total = joint.sum()
    if not (np.isfinite(joint).all() and (joint >= 0).all() and total > 0):
        raise NetworkError("a pair table must be finite, non-negative and not all zero")
    return (1 - smoothing) * joint / total + smoothing / joint.size


def _rho_one_way(joint: np.ndarray) -> float:
    """max over columns j of log(max_i P[i, j] / min_i P[i, j])."""
    with np.errstate(divide="ignore"):
        ratios = np.log(joint.max(axis=0)) - np.log(joint.min(axis=0))
    return float(np.max(ratios))


def edge_rho(joint: np.ndarray, smoothing: float = DEFAULT_SMOOTHING) -> float:
    """ρ of an edge from its pair table Pr[Xᵢ, Xⱼ] (smoothed first), the larger orientation."""
    table = smooth(joint, smoothing)
    return max(_rho_one_way(table), _rho_one_way(table.T))


def dependent_sensitivity(network: Network, chunk: Sequence[int],
                          smoothing: float = DEFAULT_SMOOTHING) -> tuple[float, dict[str, float]]:
    """DS = Σ ρ over the network's edges with both ends in ``chunk``, and each edge's ρ."""
    inside = set(chunk)
    rhos = {f"{p}->{c}": edge_rho(network.joints[(p, c)], smoothing)
            for p, c in network.edges if p in inside and c in inside}
    return math.fsum(rhos.values()), rhos


# --- sources --------------------------------------------------------------------------------


def _pgmpy() -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # pgmpy's own deprecation notices at import
            warnings.simplefilter("ignore", FutureWarning)
            from pgmpy.causal_discovery import HillClimbSearch
            from pgmpy.estimators import BayesianEstimator
            from pgmpy.factors.discrete import TabularCPD
            from pgmpy.inference import VariableElimination
            from pgmpy.models import DiscreteBayesianNetwork
    except ImportError as exc:
        raise NetworkError("a public network or public sample needs pgmpy: "
                           "pip install 'dp-dask[ddp]'") from exc
    return {"HillClimbSearch": HillClimbSearch, "BayesianEstimator": BayesianEstimator,
            "TabularCPD": TabularCPD, "VariableElimination": VariableElimination,
            "DiscreteBayesianNetwork": DiscreteBayesianNetwork}


def _pair_joints(model: Any, edges: Sequence[tuple[int, int]],
                 pg: dict[str, Any]) -> dict[tuple[int, int], np.ndarray]:
    """Pr[X_parent, X_child] of each edge by exact inference (variable elimination)."""
    inference = pg["VariableElimination"](model)
    joints = {}
    for p, c in edges:
        factor = inference.query([p, c], joint=True, show_progress=False)
        order = [factor.variables.index(p), factor.variables.index(c)]
        table = np.transpose(factor.values, order)
        # states are the attributes' codes; put the table in code order
        rows = np.argsort(factor.state_names[p])
        cols = np.argsort(factor.state_names[c])
        joints[(p, c)] = table[np.ix_(rows, cols)]
    return joints


def network_from_json(path: str | Path, schema: Schema) -> Network:
    """A public network: ``{"edges": [[parent, child], ...], "cpds": {column: {"parents":
    [...], "values": [[...]]}}}``, columns by name. ``values`` is the CPT in pgmpy's layout: one
    row per state of the column (in the schema's label order), one column per combination of the
    parents' states (the last parent varying fastest). Every column of an edge needs a CPT."""
    pg = _pgmpy()
    path = Path(path)
    try:
        document = json.loads(path.read_text())
        edges = [(str(p), str(c)) for p, c in document["edges"]]
        cpds = document["cpds"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NetworkError(f"network {path}: not a JSON object with 'edges' (pairs of column "
                           f"names) and 'cpds' ({exc})") from None
    index = {name: a for a, name in enumerate(schema.names)}
    for name in {n for edge in edges for n in edge} | set(cpds):
        if name not in index:
            raise NetworkError(f"network {path}: column {name!r} is not in schema "
                               f"{schema.name!r}")
    model = pg["DiscreteBayesianNetwork"]([(index[p], index[c]) for p, c in edges])
    for name, spec in cpds.items():
        a = index[name]
        parents = [index[p] for p in spec.get("parents", [])]
        expected = model.get_parents(a) if a in model.nodes() else []
        if sorted(parents) != sorted(expected):
            raise NetworkError(f"network {path}: the CPT of {name!r} names parents "
                               f"{spec.get('parents', [])}, the edges give "
                               f"{[schema.names[p] for p in expected]}")
        model.add_node(a)
        try:
            model.add_cpds(pg["TabularCPD"](
                a, int(schema.sizes[a]), np.asarray(spec["values"], dtype=np.float64),
                evidence=parents or None,
                evidence_card=[int(schema.sizes[p]) for p in parents] or None,
                state_names={b: list(range(int(schema.sizes[b]))) for b in [a, *parents]}))
        except (KeyError, ValueError) as exc:
            raise NetworkError(f"network {path}: the CPT of {name!r}: {exc}") from None
    try:
        model.check_model()
    except ValueError as exc:
        raise NetworkError(f"network {path}: {exc}") from None
    edges_ix = tuple((index[p], index[c]) for p, c in edges)
    return Network(edges_ix, _pair_joints(model, edges_ix, pg), f"public network {path}")


def network_from_sample(path: str | Path, schema: Schema,
                        column_chunks: Sequence[Sequence[int]]) -> Network:
    """A network learned from a public sample: per chunk, a DAG by hill climbing on BIC and
    CPTs with add-one pseudo-counts (pgmpy); edges only within chunks, as the method uses them.

    The sample is public, so it is read whole on the driver and encoded by the schema's rules.
    """
    pg = _pgmpy()
    import pandas as pd

    frame = read_table(path, schema).compute()
    if len(frame) == 0:
        raise NetworkError(f"public sample {path} has no rows")
    codes = encode_partition(frame, schema)
    data = pd.DataFrame({a: codes[a].astype(np.int64) for a in range(schema.m)})
    states = {a: list(range(int(schema.sizes[a]))) for a in range(schema.m)}
    edges: list[tuple[int, int]] = []
    joints: dict[tuple[int, int], np.ndarray] = {}
    for chunk in column_chunks:
        # pgmpy treats integer columns as continuous: hand it the codes as categories
        part = data[list(chunk)].astype("category")
        with warnings.catch_warnings():  # pgmpy 1.1 announces renames for 1.3 (pinned < 1.3)
            warnings.simplefilter("ignore", FutureWarning)
            search = pg["HillClimbSearch"](scoring_method=STRUCTURE_SCORE, return_type="dag",
                                           show_progress=False).fit(part)
            chunk_edges = [(int(p), int(c)) for p, c in search.causal_graph_.edges()]
            model = pg["DiscreteBayesianNetwork"](chunk_edges)
            model.add_nodes_from(chunk)
            estimator = pg["BayesianEstimator"](model, data[list(chunk)],
                                                state_names={a: states[a] for a in chunk})
            model.add_cpds(*estimator.get_parameters(prior_type="dirichlet",
                                                     pseudo_counts=SAMPLE_PSEUDO_COUNTS))
        edges += chunk_edges
        joints |= _pair_joints(model, chunk_edges, pg)
    return Network(tuple(edges), joints, f"learned from public sample {path} (pgmpy hill "
                   f"climbing, {STRUCTURE_SCORE}; CPTs with {SAMPLE_PSEUDO_COUNTS} pseudo-count)")


def network_from_tables(measurements: Sequence[Measurement], schema: Schema, n_rows: int,
                        column_chunks: Sequence[Sequence[int]]) -> Network:
    """Per chunk, the Chow–Liu tree of the consistent noisy tables (post-processing of DP
    measurements: each chunk's 1-way histograms and its within-chunk 2-way tables).

    Each tree edge's pair table is the consistent noisy table of that pair, over n.
    """
    edges: list[tuple[int, int]] = []
    joints: dict[tuple[int, int], np.ndarray] = {}
    for chunk in column_chunks:
        if len(chunk) < 2:
            continue
        local = {a: i for i, a in enumerate(chunk)}
        mine = [Measurement(tuple(local[a] for a in m.attributes), m.values, m.sigma)
                for m in measurements if all(a in local for a in m.attributes)]
        marginals = consistent_marginals(mine, schema.sizes[list(chunk)], n_rows)
        order, parents = spanning_tree(marginals, len(chunk))
        for child in order[1:]:
            parent = int(parents[child])
            edges.append((chunk[parent], chunk[int(child)]))
            joints[edges[-1]] = marginals.table(parent, int(child)) / n_rows
    return Network(tuple(edges), joints, "Chow–Liu tree per chunk of consistent DP noisy "
                   "2-way tables (post-processing)")
