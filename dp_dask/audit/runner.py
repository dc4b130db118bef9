"""The audit's trials: many releases of each neighbour with fresh noise, one statistic, a bound.

A :class:`~dp_dask.audit.scenarios.Scenario` gives two neighbouring data sets and a release
function. Each neighbour's exact reduction is computed once, through the method's real count
graph, and every trial calls the method's real ``_fit_counts`` with a fresh noise seed (or, where
the mechanism's randomness lives inside the reduction, reruns the count graph per trial). What
the release publishes (its noisy statistics, flattened by :func:`published`) is reduced to one
number: a linear statistic whose direction is the change a neighbour makes (a pair of releases
with the same seed) weighted by the inverse noise variance measured on a pilot third of the
trials; the pilot also chooses a few thresholds. The remaining trials give the Clopper-Pearson
lower bound on ε at δ (:func:`dp_dask.privacy.audit.epsilon_lower_bounds`), valid whatever the
statistic: any test on the release is post-processing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.audit.scenarios import Scenario
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.audit import count_epsilons, epsilon_lower_bounds, tail_counts

AUDIT_DELTA = 0.05  # the δ the audit bounds ε at (few trials see only the curve's large-δ end)
ALPHA = 0.05  # the bound holds with probability >= 1 − ALPHA
PILOT_SHARE = 1 / 3  # trials that choose the statistic's weights and thresholds
THRESHOLDS = 5  # thresholds kept from the pilot (Bonferroni over them and both directions)
QUANTILES = np.linspace(0.025, 0.975, 39)  # where on the pilot's scores they may lie
REFERENCE_SEED = 2**31 - 1  # the seed of the pair of releases that give the direction
_VARIANCE_FLOOR = 1e-12
# a model's fields that are not noisy statistics (the marginals' tree is derived from them)
_NOT_STATISTICS = ("schema", "metadata", "timings", "order", "parents")


def published(release: Any) -> dict[str, np.ndarray]:
    """The numbers a release publishes, by name: every numeric array of the model (or stats
    release) and its noisy measurements; the numeric bin edges of its (public) schema."""
    out: dict[str, np.ndarray] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, Measurement):  # by its marginal: selection may reorder them
            key = f"measurement{value.attributes}"
            add(next(f"{key}#{i}" for i in range(len(out) + 1) if f"{key}#{i}" not in out),
                value.values)
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = value.astype(np.float64).ravel()
        elif isinstance(value, tuple | list):
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                add(f"{name}[{key}]", item)

    for f in dataclasses.fields(release):
        if f.name not in _NOT_STATISTICS:
            add(f.name, getattr(release, f.name))
    model = release.metadata.get("model", {})
    if "noisy_correlations" in model:
        add("noisy_correlations", np.asarray(model["noisy_correlations"]))
    for a in release.schema.attributes:  # public, unless a schema was drawn from the data
        finite = [e for e in a.edges or () if np.isfinite(e)]
        if finite:
            add(f"edges[{a.name}]", np.array([len(finite), min(finite), max(finite)]))
    return out


def _flat(features: dict[str, np.ndarray], keys: list[str],
          default: dict[str, np.ndarray]) -> np.ndarray:
    """The numbers of ``keys``, in order; ``default``'s where a release lacks one."""
    found = [features.get(k, default[k]) for k in keys]
    return np.concatenate([f if f.shape == default[k].shape else default[k]
                           for k, f in zip(keys, found)]) if keys else np.zeros(0)


def common_keys(*features: dict[str, np.ndarray]) -> list[str]:
    """Names published, with one shape, by every release (selection may change what is)."""
    first = features[0]
    return [k for k in first if all(k in f and f[k].shape == first[k].shape for f in features)]


@dataclass
class AuditResult:
    """One scenario's audit: ε̂ (the lower bound at ``delta``, confidence 1 − ``alpha``) beside
    the ε the release claims at that δ."""

    name: str
    method: str
    notion: str
    claimed_epsilon: float  # the release's ε(δ) curve at the audit's δ
    release_epsilon: float
    release_delta: float
    epsilon_lower_bound: float
    delta: float
    alpha: float
    trials: int
    seconds: float
    plant: str | None = None

    @property
    def passed(self) -> bool:
        return not self.epsilon_lower_bound > self.claimed_epsilon

    def to_json(self) -> dict[str, Any]:
        bound = self.epsilon_lower_bound
        return {**dataclasses.asdict(self), "epsilon_lower_bound":
                bound if math.isfinite(bound) else None, "passed": self.passed}


def _statistic(reference: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
               pilot: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Weights of the linear statistic: the neighbour's change over the noise variance."""
    change = reference[1] - reference[0]
    variance = np.var(np.concatenate(pilot), axis=0)
    if not np.any(change):  # no change under equal seeds: the pilot's mean difference
        change = pilot[1].mean(axis=0) - pilot[0].mean(axis=0)
    return change / np.maximum(variance, _VARIANCE_FLOOR)


def pilot_thresholds(scores_0: np.ndarray, scores_1: np.ndarray, delta: float, trials: int,
                     alpha: float, keep: int = THRESHOLDS) -> np.ndarray:
    """The ``keep`` thresholds whose bound would be largest on ``trials`` draws per input with
    the pilot's proportions, at the final test's level. Candidates: the pooled pilot's
    quantiles on a fixed grid (the pilot's own extreme values overfit its noise)."""
    candidates = np.unique(np.quantile(np.concatenate([scores_0, scores_1]), QUANTILES,
                                       method="inverted_cdf"))
    expected = [np.rint(tail_counts(s, candidates) * trials / s.size) for s in (scores_0, scores_1)]
    predicted = count_epsilons(expected[0], trials, expected[1], trials, delta,
                               alpha / (2 * keep)).reshape(2, -1).max(axis=0)
    return candidates[np.argsort(predicted, kind="stable")[-keep:]]


def audit(scenario: Scenario, trials: int, *, delta: float = AUDIT_DELTA, alpha: float = ALPHA,
          plant: str | None = None, seed: int = 0,
          progress: Callable[[str], None] | None = None) -> AuditResult:
    """ε̂ of ``scenario`` from ``trials`` releases of each neighbour, with the noise seeds
    ``seed``, ``seed + 1``, ... (reproducible)."""
    start = time.perf_counter()
    release = scenario.prepare()
    reference = [release(side, REFERENCE_SEED) for side in (0, 1)]
    ref = [published(r) for r in reference]
    outputs: list[list[dict[str, np.ndarray]]] = [[], []]
    for i in range(trials):
        for side in (0, 1):  # distinct seeds: the two samples are independent
            outputs[side].append(published(release(side, seed + 2 * i + side)))
        if progress and (i + 1) % max(1, trials // 4) == 0:
            progress(f"{scenario.name}: {i + 1}/{trials} trials")
    pilot = max(1, int(trials * PILOT_SHARE))
    # the statistic is chosen on the reference pair and the pilot alone: the bound's trials
    # are independent of it
    keys = common_keys(*ref, *outputs[0][:pilot], *outputs[1][:pilot])
    values = [np.array([_flat(f, keys, ref[0]) for f in side]) for side in outputs]
    weights = _statistic((_flat(ref[0], keys, ref[0]), _flat(ref[1], keys, ref[0])),
                         (values[0][:pilot], values[1][:pilot]))
    scores = [v @ weights for v in values]
    chosen = pilot_thresholds(scores[0][:pilot], scores[1][:pilot], delta, trials - pilot, alpha)
    bound = epsilon_lower_bounds(scores[0][pilot:], scores[1][pilot:], [delta], alpha=alpha,
                                 thresholds=chosen)[delta]
    privacy = reference[0].metadata["privacy"]
    return AuditResult(scenario.name, scenario.method, scenario.notion,
                       scenario.claim(reference[0], delta), float(privacy["epsilon"]),
                       float(privacy.get("delta", 0.0)), bound, delta, alpha, trials,
                       round(time.perf_counter() - start, 1), plant)
