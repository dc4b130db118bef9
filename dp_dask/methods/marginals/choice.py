"""The public rule that picks a release's model (issue 68): the 1-/2-way tables (``pairs``) or
the dense joint fitted to every triple (:mod:`.joint`), by the error each is expected to give on
the 1-, 2- and 3-way counting queries at the release's noise.

Its inputs are public: the schema's sizes, the one-shot ρ and each measurement's share of it
(:func:`~.plan.budget_shares`, :func:`~.joint.triple_shares`), the notion's sensitivity, the
accountant, the config and n̂ (the exact n where it is public, else the noisy n the 1-way
histograms give). It reads no count; choosing is post-processing and charges nothing.

    noise     a k-way query's answer summed from each measurement over a superset of its
              attributes has variance σ²·cells_M/cells_S; the model's answer is taken as their
              inverse-variance mean (the generalized least squares estimate both fits
              approximate), its expected error √(2/π) times its standard deviation
    bias      a 3-way query no measured table covers (``pairs``): its answer is the product of
              two tables over their shared attribute (noise of both), off by the 3-way structure
              no pair carries, which is the data's and not public: the rule takes it as
              ``pairs_three_way_bias`` of the query's mean count n̂/cells (a prior measured on
              public tables, docs/model-choice.md)
    1-way     on the joint, the 1-way histograms (drawn at ``pairs``' share before the choice)
              are measured again with the share of the triples' ρ (of ONE_WAY_GRID) that gives
              the joint the smallest expected mean relative error over Q1, Q2, Q3: the triples
              alone leave its 1-way counts noisier than ``pairs``' (about 1.2 × at any noise)
    choose    per family (Q1, Q2, Q3), the mean expected error over its queries; the joint
              where the weighted mean over the families of its error relative to ``pairs``'
              (at that share; Q1 weighing ``one_way_weight``, 2, Q2 and Q3 1 each) is below 1,
              ``pairs`` otherwise (a tie keeps ``pairs``, the cautious choice: its release is
              the one released before the rule). Q1 weighing double, the joint is taken only
              where its 3-way lead pays for twice its 1-way loss: not at ε = 0.5 on the planted
              tables, where it lost Q1 to pairs (docs/model-choice.md). The weight moves no
              budget: a larger 1-way share (the one minimising the weighted error, 0.2–0.3)
              measured worse on every family, the joint's sampled Q1 being more its rows'
              rounding than the histograms' noise at ε ≥ 1
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.data.schema import Schema
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.privacy.accounting import gaussian_sigma

FAMILIES = ("Q1", "Q2", "Q3")
MODELS = ("pairs", "joint")
# E|X| of a centred Gaussian of standard deviation 1
ABSOLUTE_MEAN = math.sqrt(2.0 / math.pi)
# the joint's second 1-way measurement: the shares of the triples' ρ the rule tries (public)
ONE_WAY_GRID = tuple(np.round(np.arange(0.0, 0.51, 0.05), 2).tolist())

Clique = tuple[int, ...]


def expected_errors(sizes: np.ndarray, measured: dict[Clique, float], n_hat: float,
                    three_way_bias: float) -> dict[str, float]:
    """Each family's mean expected |error| per query (counts) of a model fitted to the
    ``measured`` tables (clique → the σ of its cells; several measurements of one clique
    already merged), n̂ rows: see the module's docstring. Public inputs only."""
    sizes = np.asarray(sizes, dtype=np.float64)
    m = len(sizes)
    variances = residual_variances(sizes, measured, max_order=3)
    errors = {}
    for k, family in zip((1, 2, 3), FAMILIES):
        total, queries = 0.0, 0.0
        for subset in itertools.combinations(range(m), k):
            query_cells = float(np.prod(sizes[list(subset)]))
            # a residual no table measures is the model's guess: the data's, not noise
            bias = 0.0 if math.isfinite(variances[subset]) else (
                three_way_bias * n_hat / query_cells)
            error = ABSOLUTE_MEAN * math.sqrt(query_variance(sizes, variances, subset)) + bias
            total += query_cells * error
            queries += query_cells
        errors[family] = total / queries
    return errors


def query_variance(sizes: np.ndarray, variances: dict[Clique, float], subset: Clique) -> float:
    """The noise variance of one cell of the marginal over ``subset``, estimated from the
    residuals' estimates (:func:`residual_variances`): a cell is Σ over R ⊆ subset of the
    residual R's component along the cell, with weight ∏_{R} (s−1)/s · ∏_{subset∖R} 1/s²;
    the residuals no table measures add no noise (their error is the model's bias)."""
    return float(sum(
        variances[r] * np.prod([(sizes[a] - 1) / sizes[a] for a in r])
        * np.prod([sizes[a]**-2.0 for a in subset if a not in r])
        for j in range(len(subset) + 1) for r in itertools.combinations(subset, j)
        if math.isfinite(variances[r])))


def residual_variances(sizes: np.ndarray, measured: dict[Clique, float],
                       max_order: int) -> dict[Clique, float]:
    """The variance of each residual of at most ``max_order`` attributes (ResidualPlanner,
    Xiao et al. 2023: a marginal over M of cell variance σ² measures each residual R ⊆ M, in
    an orthonormal basis, with variance σ²·∏_{M∖R} sizes) after the inverse-variance mean of
    every table over a superset; inf where none is measured."""
    m = len(sizes)
    variances = {}
    for k in range(max_order + 1):
        for residual in itertools.combinations(range(m), k):
            precision = sum(1.0 / (sigma**2 * np.prod([sizes[a] for a in clique
                                                       if a not in residual]))
                            for clique, sigma in measured.items()
                            if set(residual) <= set(clique))
            variances[residual] = 1.0 / precision if precision > 0 else math.inf
    return variances


@dataclass(frozen=True)
class ModelChoice:
    """The rule's outcome: ``model`` ("pairs" or "joint"), each model's expected error by
    family, the joint's second 1-way share of the triples' ρ (0: none), the families' weights
    and the inputs."""

    model: str
    expected: dict[str, dict[str, float]]
    one_way_share: float
    n_hat: int
    rho: float
    sensitivity: float
    weights: dict[str, float]

    @property
    def dense(self) -> bool:
        return self.model == "joint"

    def record(self, config: MarginalsConfig) -> dict[str, Any]:
        """The privacy record's ``model_choice``: the rule, its inputs and its outcome."""
        rule = ("the dense joint where the weighted mean over Q1, Q2, Q3 of its expected error "
                "relative to pairs' is below 1, at the second 1-way share minimising the "
                "unweighted mean (expected errors from public sizes, rho, the sensitivity and "
                "the noisy n; "
                f"pairs' 3-way bias taken as {config.pairs_three_way_bias:g} of a query's mean "
                "count n/cells)")
        if config.cliques == "joint":
            rule = "cliques='joint': the dense joint wherever it fits (expected errors recorded)"
        return {
            "rule": rule,
            "chosen": self.model, "n": self.n_hat, "rho": self.rho,
            "sensitivity": self.sensitivity,
            "expected_error": {model: {f: round(e, 4) for f, e in errors.items()}
                               for model, errors in self.expected.items()},
            "family_weights": self.weights,
            "joint_relative_error": round(weighted_ratio(self.expected, self.weights), 4),
            "joint_one_way_share": self.one_way_share}


def family_weights(config: MarginalsConfig = DEFAULTS) -> dict[str, float]:
    """The rule's weight of each family: Q1 ``one_way_weight``, Q2 and Q3 1."""
    return {"Q1": config.one_way_weight, "Q2": 1.0, "Q3": 1.0}


def weighted_ratio(expected: dict[str, dict[str, float]], weights: dict[str, float]) -> float:
    """The weighted mean over the families of the joint's expected error over ``pairs``'."""
    return sum(weights[f] * expected["joint"][f] / expected["pairs"][f]
               for f in FAMILIES) / sum(weights.values())


def merged_sigma(*sigmas: float) -> float:
    """The σ of the inverse-variance mean of measurements of σ ``sigmas``."""
    return 1.0 / math.sqrt(sum(1.0 / s**2 for s in sigmas))


def choose_model(schema: Schema, *, rho: float, one_way_shares: np.ndarray,
                 pair_shares: np.ndarray, triple_shares: np.ndarray, triples_rho: float,
                 sensitivity: float, accountant: str, n_hat: int,
                 config: MarginalsConfig = DEFAULTS) -> ModelChoice:
    """The rule (module docstring): ``rho`` the one-shot ρ, of which the 1-way histograms take
    ``one_way_shares`` and the pairs (all of them, in :func:`~.plan.measured_queries`' order)
    ``pair_shares``; on the joint ``triples_rho`` split by ``triple_shares`` instead of the
    pairs', less the second 1-way share. Public inputs only."""
    m, sizes, bias = schema.m, schema.sizes, config.pairs_three_way_bias

    def sigma(share: float) -> float:
        return gaussian_sigma(share, sensitivity, accountant)

    one_way = {(a,): sigma(rho * s) for a, s in enumerate(one_way_shares)}
    pairs = dict(zip(itertools.combinations(range(m), 2), (sigma(rho * s) for s in pair_shares)))
    expected_pairs = expected_errors(sizes, one_way | pairs, n_hat, bias)
    triples = list(itertools.combinations(range(m), 3))
    histogram_weights = np.asarray(one_way_shares) / np.sum(one_way_shares)

    def joint(share: float) -> dict[str, float]:
        again = {(a,): merged_sigma(one_way[(a,)], sigma(triples_rho * share * w))
                 for a, w in enumerate(histogram_weights)} if share > 0 else one_way
        measured = again | {t: sigma(triples_rho * (1 - share) * s)
                            for t, s in zip(triples, triple_shares)}
        return expected_errors(sizes, measured, n_hat, bias)

    weights, equal = family_weights(config), dict.fromkeys(FAMILIES, 1.0)
    candidates = {share: {"pairs": expected_pairs, "joint": joint(share)}
                  for share in ONE_WAY_GRID}
    share = min(candidates, key=lambda s: (weighted_ratio(candidates[s], equal), s))
    expected = candidates[share]
    forced = config.cliques == "joint"  # the joint wherever it fits: its errors still recorded
    model = "joint" if forced or weighted_ratio(expected, weights) < 1.0 else "pairs"
    return ModelChoice(model, expected, share if model == "joint" else 0.0, int(n_hat), rho,
                       sensitivity, weights)
