"""The audit's trials: many releases of each neighbour with fresh noise, one statistic, a bound.

A :class:`~dp_dask.audit.scenarios.Scenario` gives two neighbouring data sets and a release
function (with a planted bug, :mod:`dp_dask.audit.plants`, the scenario's changed fields). What
a release publishes is flattened by :func:`published` into named numbers: every field it
releases. The trials are reduced to one number per release by a statistic chosen on a pilot
third of them, among

* the likelihood-ratio statistic of Gaussian measurements: the change a neighbour makes (a pair
  of releases with the same seed) over each number's noise variance on the pilot;
* the same with the pilot's mean change instead (where equal seeds move nothing alike:
  selections, thresholds, searches);
* each of the few numbers whose pilot means differ most, alone (a category's presence, a range's
  end),

the one (fitted on half of the pilot, judged on the other half) whose best thresholds would give
the largest bound on the rest with the pilot's proportions; it keeps those thresholds. The
remaining trials give the Clopper-Pearson lower bound on ε at δ
(:func:`dp_dask.privacy.audit.epsilon_lower_bounds`), valid whatever the statistic: any test on
the release is post-processing, and it is chosen on trials the bound does not use.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.audit.plants import Plant
from dp_dask.audit.scenarios import Scenario
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.audit import count_epsilons, epsilon_lower_bounds, tail_counts
from dp_dask.privacy.record import PrivacyRecord

AUDIT_DELTA = 0.05  # the δ the audit bounds ε at (few trials see only the curve's large-δ end)
ALPHA = 0.05  # the bound holds with probability >= 1 − ALPHA
PILOT_SHARE = 1 / 3  # trials that choose the statistic, its weights and thresholds
THRESHOLDS = 5  # thresholds kept from the pilot (Bonferroni over them and both directions)
QUANTILES = np.linspace(0.025, 0.975, 39)  # where on the pilot's scores they may lie
SINGLE_FEATURES = 3  # numbers tried alone: those whose pilot means differ most
REFERENCE_SEED = 2**31 - 1  # the seed of the pair of releases that give the direction
_VARIANCE_FLOOR = 1e-12
# a model's fields read apart (its schema as JSON, its metadata) or none of the statistic's
# business: the spanning tree and the dense joint are fitted to the noisy measurements
# (post-processing: hundreds of numbers that would only add noise to a linear statistic)
_MODEL_FIELDS_SKIPPED = ("schema", "metadata", "timings", "order", "parents", "joint")
# a record's fields that no data moves: when and with what it was made
_METADATA_SKIPPED = ("created", "versions", "timings")
# the model record's copy of the spanning tree (``parents``, skipped above): a few texts that
# flip with the noise would outweigh every noisy cell in the equal seeds' statistic
_MODEL_RECORD_SKIPPED = ("tree_parents",)


def published(release: Any) -> dict[str, np.ndarray]:
    """Every field a release publishes, as named numbers: each numeric array and number of the
    model (the noisy measurements by their marginal), its metadata (the privacy record, the
    tables chosen, a chosen max_rows, n) and its schema (a draft's: each category label, each
    edge, dtypes, formats, identifiers...). Text is one number per value: ``name=text`` is 1
    where released; a list of texts or numbers gives ``name∋item`` per item and its length, a
    list of numbers also its min and max. A field a release lacks reads 0 (:func:`features`)."""
    out: dict[str, np.ndarray] = {}

    def scalar(name: str, value: Any) -> None:
        if isinstance(value, bool | np.bool_):
            out[name] = np.array([float(value)])
        elif isinstance(value, int | float | np.integer | np.floating) and math.isfinite(value):
            out[name] = np.array([float(value)])
        else:  # text, None, an infinite number
            out[f"{name}={value}"] = np.ones(1)

    def add(name: str, value: Any) -> None:
        if isinstance(value, Measurement):  # by its marginal: selection may reorder them
            key = f"measurement{value.attributes}"
            key = next(f"{key}#{i}" for i in range(len(out) + 1) if f"{key}#{i}" not in out)
            out[f"{key}.measured"] = np.ones(1)
            add(key, value.values)
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = value.astype(np.float64).ravel()
        elif isinstance(value, np.ndarray):
            add(name, value.tolist())
        elif isinstance(value, dict):
            for key, item in value.items():
                add(f"{name}.{key}", item)
        elif isinstance(value, list | tuple):
            if all(not isinstance(item, dict | list | tuple | np.ndarray | Measurement)
                   for item in value):
                items(name, value)
            else:  # records: by name where they have one
                for i, item in enumerate(value):
                    label = item.get("name", i) if isinstance(item, dict) else i
                    add(f"{name}[{label}]", item)
        elif dataclasses.is_dataclass(value) and hasattr(value, "metadata"):
            # a model within the release (a unit-shaped release's row and unit models)
            out.update({f"{name}.{key}": item for key, item in published(value).items()})
        elif dataclasses.is_dataclass(value) or hasattr(value, "__dict__"):
            return  # a derived object (consistent marginals): post-processing of the above
        else:
            scalar(name, value)

    def items(name: str, values: list[Any] | tuple[Any, ...]) -> None:
        out[f"{name}.length"] = np.array([float(len(values))])
        numbers = [float(v) for v in values if isinstance(v, int | float | np.integer |
                                                            np.floating)
                   and not isinstance(v, bool) and math.isfinite(v)]
        if numbers:
            out[f"{name}.min"], out[f"{name}.max"] = np.array([min(numbers)]), np.array(
                [max(numbers)])
        for value in values:
            out[f"{name}∋{value}"] = np.ones(1)

    for f in dataclasses.fields(release):
        if f.name not in _MODEL_FIELDS_SKIPPED:
            add(f.name, getattr(release, f.name))
    metadata = getattr(release, "metadata", {})
    kept = {k: v for k, v in metadata.items() if k not in _METADATA_SKIPPED}
    if isinstance(kept.get("model"), dict):
        kept["model"] = {k: v for k, v in kept["model"].items()
                         if k not in _MODEL_RECORD_SKIPPED}
    add("metadata", kept)
    schema = getattr(release, "schema", None)
    if schema is not None:
        add("schema", schema if isinstance(schema, dict) else schema.to_json())
    return out


def feature_keys(releases: list[dict[str, np.ndarray]]) -> dict[str, tuple[int, ...]]:
    """The numbers the statistic may read, with their shapes: every name published by at least
    two of ``releases`` (a name seen once, a text of noisy numbers, tells nothing), in the shape
    it first had."""
    seen: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for release in releases:
        for key, value in release.items():
            seen[key] = seen.get(key, 0) + 1
            shapes.setdefault(key, value.shape)
    return {k: s for k, s in shapes.items() if seen[k] >= 2}


def features(release: dict[str, np.ndarray], keys: dict[str, tuple[int, ...]]) -> np.ndarray:
    """The numbers of ``keys``, in order: 0 where the release lacks one (or has it in another
    shape: selection may change what is published)."""
    parts = [release[k] if k in release and release[k].shape == s else np.zeros(s)
             for k, s in keys.items()]
    return np.concatenate(parts) if parts else np.zeros(0)


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
    statistic: str = ""  # the test chosen on the pilot

    @property
    def passed(self) -> bool:
        return not self.epsilon_lower_bound > self.claimed_epsilon

    def to_json(self) -> dict[str, Any]:
        bound = self.epsilon_lower_bound
        return {**dataclasses.asdict(self), "epsilon_lower_bound":
                bound if math.isfinite(bound) else None, "passed": self.passed}


def candidate_statistics(reference: tuple[np.ndarray, np.ndarray],
                         pilot: tuple[np.ndarray, np.ndarray], fit: tuple[np.ndarray, np.ndarray],
                         names: list[str]) -> list[tuple[str, np.ndarray, bool]]:
    """The statistics to choose among (the module docstring), by name: weights on the numbers
    (``names``, one per column), and whether the weights were fitted to ``fit``'s sides (the
    pilot's first half). The equal seeds' change is fitted to no side: its variance is the whole
    pilot's, pooled."""
    pooled = np.maximum(np.var(np.concatenate(pilot), axis=0), _VARIANCE_FLOOR)
    variance = np.maximum(np.var(np.concatenate(fit), axis=0), _VARIANCE_FLOOR)
    shift = fit[1].mean(axis=0) - fit[0].mean(axis=0)
    out = [("likelihood ratio, equal seeds' change", (reference[1] - reference[0]) / pooled,
            False), ("likelihood ratio, pilot's mean change", shift / variance, True)]
    standardized = np.abs(shift) / np.sqrt(variance)
    for j in np.argsort(-standardized, kind="stable")[:SINGLE_FEATURES]:
        if standardized[j] > 0:
            alone = np.zeros_like(shift)
            alone[j] = np.sign(shift[j])
            out.append((f"alone: {names[j]}", alone, True))
    return [(name, w, fitted) for name, w, fitted in out if np.any(w)]


def pilot_thresholds(scores_0: np.ndarray, scores_1: np.ndarray, delta: float, trials: int,
                     alpha: float, keep: int = THRESHOLDS) -> tuple[np.ndarray, float]:
    """The ``keep`` thresholds whose bound would be largest on ``trials`` draws per input with
    the pilot's proportions, at the final test's level, and that largest bound. Candidates: the
    pooled pilot's quantiles on a fixed grid (the pilot's own extreme values overfit its
    noise)."""
    candidates = np.unique(np.quantile(np.concatenate([scores_0, scores_1]), QUANTILES,
                                       method="inverted_cdf"))
    expected = [np.rint(tail_counts(s, candidates) * trials / s.size) for s in (scores_0, scores_1)]
    predicted = count_epsilons(expected[0], trials, expected[1], trials, delta,
                               alpha / (2 * keep)).reshape(2, -1).max(axis=0)
    order = np.argsort(predicted, kind="stable")[-keep:]
    return candidates[order], float(predicted[order[-1]])


def choose_statistic(reference: tuple[np.ndarray, np.ndarray],
                     pilot: tuple[np.ndarray, np.ndarray], names: list[str], delta: float,
                     trials: int, alpha: float) -> tuple[str, np.ndarray, np.ndarray]:
    """The candidate statistic (name, weights) that predicts the largest bound on ``trials``
    more draws per input, and its thresholds. The candidates are judged on the pilot's second
    half: judged on the draws that fitted them, weights fitted to the first half (the pilot's
    own mean change) would always look best (they fit its noise). The thresholds of the one
    chosen come from the whole pilot where its weights were fitted to no side."""
    half = max(1, len(pilot[0]) // 2)
    fit, judge = (pilot[0][:half], pilot[1][:half]), (pilot[0][half:], pilot[1][half:])
    best: tuple[str, np.ndarray, bool] = ("none", np.zeros(len(names)), True)
    best_bound = -math.inf
    for name, weights, fitted in candidate_statistics(reference, pilot, fit, names):
        _, bound = pilot_thresholds(judge[0] @ weights, judge[1] @ weights, delta, trials,
                                    alpha)
        if bound > best_bound:
            best, best_bound = (name, weights, fitted), bound
    name, weights, fitted = best
    scores = judge if fitted else pilot
    thresholds, _ = pilot_thresholds(scores[0] @ weights, scores[1] @ weights, delta, trials,
                                     alpha)
    return name, weights, thresholds


def audit(scenario: Scenario, trials: int, *, delta: float = AUDIT_DELTA, alpha: float = ALPHA,
          plant: Plant | None = None, seed: int = 0,
          progress: Callable[[str], None] | None = None) -> AuditResult:
    """ε̂ of ``scenario`` (with ``plant``'s bug: the claim stays the correct release's) from
    ``trials`` releases of each neighbour, with the noise seeds ``seed``, ``seed + 1``, ...
    (reproducible)."""
    start = time.perf_counter()
    release = (scenario if plant is None else plant.apply(scenario)).prepare()
    reference = [release(side, REFERENCE_SEED) for side in (0, 1)]
    correct = reference[0] if plant is None else scenario.prepare()(0, REFERENCE_SEED)
    ref = [published(r) for r in reference]
    outputs: list[list[dict[str, np.ndarray]]] = [[], []]
    for i in range(trials):
        for side in (0, 1):  # distinct seeds: the two samples are independent
            outputs[side].append(published(release(side, seed + 2 * i + side)))
        if progress and (i + 1) % max(1, trials // 4) == 0:
            progress(f"{scenario.name}{f' +{plant.name}' if plant else ''}: "
                     f"{i + 1}/{trials} trials")
    pilot = max(1, int(trials * PILOT_SHARE))
    # the statistic is chosen on the reference pair and the pilot alone: the bound's trials
    # are independent of it
    keys = feature_keys([*ref, *outputs[0][:pilot], *outputs[1][:pilot]])
    names = [f"{k}[{i}]" if math.prod(s) > 1 else k for k, s in keys.items()
             for i in range(math.prod(s))]
    values = [np.array([features(f, keys) for f in side]).reshape(trials, len(names))
              for side in outputs]
    name, weights, chosen = choose_statistic(
        (features(ref[0], keys), features(ref[1], keys)),
        (values[0][:pilot], values[1][:pilot]), names, delta, trials - pilot, alpha)
    scores = [v[pilot:] @ weights for v in values]
    bound = epsilon_lower_bounds(scores[0], scores[1], [delta], alpha=alpha,
                                 thresholds=chosen)[delta]
    cost = PrivacyRecord.from_metadata(correct.metadata["privacy"]).cost
    return AuditResult(scenario.name, scenario.method, scenario.notion,
                       scenario.claim(correct, delta), cost.epsilon, cost.delta, bound, delta,
                       alpha, trials,
                       round(time.perf_counter() - start, 1), plant and plant.name, name)
