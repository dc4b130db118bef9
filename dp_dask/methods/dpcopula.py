"""DPCopula-Kendall (Li, Xiong & Jiang, EDBT 2014): DP marginals + DP Kendall's τ, Gaussian copula.

    split     ε = ε1 + ε2 with k = ε1/ε2 (default 8)
    marginals every attribute's 1-way histogram, ε1/m each (pure DP): + Laplace, or EFPA
              (Ács et al. 2012, the papers' choice; dp_dask.privacy.efpa)
    tau       every pair's Kendall tau-a + Laplace, ε2/C(m,2) each (pure DP)
    copula    P̃ = sin(π/2·τ̃), repaired to a correlation matrix by our NCM
              (dp_dask.copula.correlation)
    sample    per output partition: y ~ N(0, P̃) in m dimensions, value j = F̃_j⁻¹(Φ(y_j)) on the
              attribute's public order (categories in schema order, bins in edge order)

Both statistics come from the exact d×d counts of the shared Dask reduction: a histogram is a
diagonal block, and Kendall's τ of a pair of discrete attributes is a function of their 2-way
contingency table (:func:`kendall_counts`), so τ is exact at any n without O(n²) work or sampling.
The releases compose by basic composition: (ε1 + ε2, 0)-DP.

Neighbouring datasets, as everywhere in dp_dask: replace one row, n public.

* A histogram's L1 sensitivity is 2 (one count −1, one +1); the m histograms concatenated have
  L1 sensitivity 2m, so Laplace b = 2m/ε1 per cell is ε1-DP for all of them. With EFPA each
  histogram is its own (ε1/m, 0)-DP release (ε1/(2m) to choose how many Fourier coefficients
  to keep, ε1/(2m) for their noise; sensitivities proved in dp_dask.privacy.efpa): ε1 in all.
* Kendall's tau-a, τ_a = S / C(n, 2) with S = (#concordant − #discordant pairs), moves by at most
  **4/n** (not the papers' 4/(n+1), which is for a dataset of n+1 rows under add/remove). Proof:
  S sums a term s(r, r') ∈ {−1, 0, +1} over unordered row pairs. Replacing row r by r* changes
  only the n − 1 terms that involve r: S' − S = Σ_{r'≠r} [s(r*, r') − s(r, r')], each bracket in
  [−2, 2], so |S' − S| ≤ 2(n − 1) and, n being public, |τ_a' − τ_a| ≤ 2(n − 1)/C(n, 2) = 4/n.
  The bound is attained (tests/test_dpcopula.py): n − 1 rows at (1, 1), r = (2, 2) concordant
  with all of them, r* = (2, 0) discordant with all of them.
  We therefore noise the integer S itself — the C(m,2) numerators concatenated, L1 sensitivity
  2(n − 1)·C(m,2), Laplace b = 2(n − 1)·C(m,2)/ε2 — with the project's OpenDP-checked discrete
  Laplace, and divide by the public C(n, 2): the same as Laplace of scale C(m,2)·(4/n)/ε2 on τ_a.

Why tau-a and not tau-b (what scipy reports by default): tau-b divides by √((n0−n1)(n0−n2)), which
depends on the data's ties, so its sensitivity is not 4/n (a public DPCopula implementation
calibrated for tau-a and computed tau-b). On discrete data ties shrink tau-a towards 0, and
sin(π/2·τ) then under-states the latent correlation: a known cost of the method on categorical
data, like its single coefficient per pair (benchmarks/SESSIONS.md, "DPCopula").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy.special import ndtr

from dp_dask.copula.correlation import nearest_correlation, psd_correlation_factor
from dp_dask.copula.model import project_to_total
from dp_dask.data.counts import attribute_pairs
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot
from dp_dask.model_io import model_schema, read_model_arrays, write_model_files
from dp_dask.privacy.accounting import BASIC_COMPOSITION
from dp_dask.privacy.efpa import efpa_histogram
from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.split import BudgetPart, BudgetSplit
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed

MODEL_FORMAT = 1
KENDALL = "dpcopula-kendall"
DEFAULT_RATIO = 8.0  # k = ε1/ε2 of the papers
HISTOGRAM_MECHANISMS = ("laplace", "efpa")  # EFPA: Ács et al. 2012, the papers' choice
HISTOGRAM_L1_SENSITIVITY = 2  # replace one row: one cell −1, one cell +1


def split_budget(epsilon: float, ratio: float = DEFAULT_RATIO,
                 m: int = 2) -> tuple[float, float]:
    """(ε1, ε2) with ε1 + ε2 = ε and ε1/ε2 = ratio: the marginals' and the τ's budgets.

    With m < 2 attributes there is no pair: all of ε goes to the histograms."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"k (the ratio epsilon1/epsilon2) must be a finite number > 0, "
                         f"got {ratio!r}")
    epsilon2 = epsilon / (1.0 + ratio) if m >= 2 else 0.0
    return epsilon - epsilon2, epsilon2


def kendall_counts(table: np.ndarray) -> tuple[int, int]:
    """(concordant, discordant) row pairs of a 2-way contingency table of two ordered attributes.

    A cell (i, j) is concordant with every cell (i' > i, j' > j) and discordant with every
    (i' > i, j' < j); 2-D cumulative sums give both sums for all cells at once: O(cells), not
    O(n²). Integer arithmetic throughout (int64 holds C(n, 2) up to n ≈ 4·10⁹).
    """
    t = np.asarray(table, dtype=np.int64)
    # below[i, j] = Σ_{i' > i} t[i', :j] (strictly lower rows, columns < j), and likewise above j
    lower_rows = np.cumsum(t[::-1], axis=0)[::-1]  # Σ_{i' >= i}
    lower_rows = np.vstack([lower_rows[1:], np.zeros((1, t.shape[1]), np.int64)])  # i' > i
    left = np.cumsum(lower_rows, axis=1) - lower_rows  # j' < j
    right = lower_rows.sum(axis=1, keepdims=True) - left - lower_rows  # j' > j
    return int((t * right).sum()), int((t * left).sum())


def kendall_tau_a(table: np.ndarray) -> float:
    """Kendall's tau-a, (concordant − discordant) / C(n, 2), of a contingency table."""
    concordant, discordant = kendall_counts(table)
    n = int(np.asarray(table).sum())
    return (concordant - discordant) / (n * (n - 1) / 2) if n > 1 else 0.0


def pair_tables(counts: np.ndarray, schema: Schema) -> list[np.ndarray]:
    """Every attribute pair's exact 2-way table, in dp_dask.data.counts.attribute_pairs order."""
    return [counts[rows, cols] for _, _, rows, cols in attribute_pairs(schema)]


def noisy_histograms(exact: np.ndarray, schema: Schema, n_rows: int, epsilon1: float, *,
                     mechanism: str = "laplace", sampler: str,
                     rng: np.random.Generator | None) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The m noisy histograms (ε1-DP in all) as probabilities on each domain, and what the
    mechanism chose (EFPA: the coefficients kept per attribute, themselves DP outputs).

    ``exact``: the d exact 1-way counts, attribute after attribute (the diagonal of the d×d
    counts). ``mechanism``: "laplace" (one measurement on all d counts) or "efpa" (one per
    attribute, ε1/m each). Post-processing: each histogram projected onto {x ≥ 0, Σx = n}
    (n public), as the copula method does: clip-and-normalise would take the clipped noise's
    mass from the large cells.
    """
    cells = [exact[offset : offset + size] for offset, size in zip(schema.offsets, schema.sizes)]
    details: dict[str, Any] = {"histograms": mechanism}
    if mechanism == "efpa":
        releases = [efpa_histogram(c, n_rows, epsilon1 / schema.m, sampler=sampler, rng=rng)
                    for c in cells]
        noisy = [r.histogram for r in releases]
        details["efpa_coefficients_kept"] = [r.kappa for r in releases]
    elif mechanism == "laplace":
        sensitivity = HISTOGRAM_L1_SENSITIVITY * schema.m
        flat = laplace_noise(exact, sensitivity / epsilon1, sensitivity=sensitivity,
                             sampler=sampler, rng=rng)
        noisy = np.split(flat, np.cumsum(schema.sizes)[:-1])
    else:
        raise ValueError(f"unknown histogram mechanism {mechanism!r}; expected one of "
                         f"{HISTOGRAM_MECHANISMS}")
    total = max(n_rows, 1)
    return [project_to_total(h, total) / total for h in noisy], details


def noisy_kendall_tau(counts: np.ndarray, schema: Schema, n_rows: int, epsilon2: float, *,
                      sampler: str, rng: np.random.Generator | None) -> np.ndarray:
    """Every pair's tau-a + Laplace (one ε2-DP measurement on the integer numerators S),
    clipped to [−1, 1]: a C(m,2) vector. n ≤ 1 has no pairs of rows: τ = 0, nothing released."""
    tables = pair_tables(counts, schema)
    if not tables or n_rows < 2:
        return np.zeros(len(tables))
    numerators = np.array([c - d for c, d in map(kendall_counts, tables)], dtype=np.int64)
    sensitivity = 2 * (n_rows - 1) * len(tables)
    noisy = laplace_noise(numerators, sensitivity / epsilon2, sensitivity=sensitivity,
                          sampler=sampler, rng=rng)
    return np.clip(noisy / (n_rows * (n_rows - 1) / 2), -1.0, 1.0)


def pair_matrix(pairs: np.ndarray, m: int) -> np.ndarray:
    """The m×m symmetric matrix of pairwise coefficients (unit diagonal) from the pair vector."""
    matrix = np.eye(m)
    rows, cols = np.triu_indices(m, k=1)  # the order of attribute_pairs
    matrix[rows, cols] = matrix[cols, rows] = pairs
    return matrix


def dpcopula_kendall(counts: np.ndarray, schema: Schema, n_rows: int, epsilon: float, *,
                     ratio: float = DEFAULT_RATIO, histogram_mechanism: str = "laplace",
                     sampler: str = "opendp",
                     rng: np.random.Generator | None = None,
                     metadata: dict[str, Any] | None = None) -> DPCopulaModel:
    """DPCopula-Kendall on exact d×d counts; the only step that reads them (returns noisy ones)."""
    epsilon1, epsilon2 = split_budget(epsilon, ratio, schema.m)
    histograms, marginals = noisy_histograms(np.diagonal(counts), schema, n_rows, epsilon1,
                                             mechanism=histogram_mechanism, sampler=sampler,
                                             rng=rng)
    tau = noisy_kendall_tau(counts, schema, n_rows, epsilon2, sampler=sampler, rng=rng)
    correlation = nearest_correlation(pair_matrix(np.sin(np.pi / 2 * tau), schema.m))
    details = {"method": KENDALL, "epsilon1": epsilon1, "epsilon2": epsilon2, "k": ratio,
               **marginals,
               "tau": "tau-a, (concordant - discordant)/C(n,2), from the exact 2-way tables",
               "noisy_tau": tau.tolist()}
    return DPCopulaModel(schema, n_rows, tuple(histograms), correlation,
                         {**(metadata or {}), "model": details}, method=KENDALL)


@dataclass(frozen=True)
class DPCopulaModel:
    """Noisy marginals (probabilities per attribute) and the m×m copula correlation."""

    schema: Schema
    n_rows: int
    histograms: tuple[np.ndarray, ...]
    correlation: np.ndarray  # m×m, a correlation matrix (NCM-repaired)
    metadata: dict[str, Any] = field(default_factory=dict)
    method: str = KENDALL

    def sampler(self) -> DPCopulaSampler:
        return DPCopulaSampler(self.schema, psd_correlation_factor(self.correlation),
                               tuple(np.cumsum(h) for h in self.histograms))

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """``<path>/model.npz`` (histograms, correlation) and ``<path>/model.json``."""
        document = {"format": MODEL_FORMAT, "method": self.method, "n_rows": self.n_rows,
                    "schema": self.schema.to_json(), "metadata": self.metadata}
        return write_model_files(path, document, {
            "correlation": self.correlation,
            **{f"histogram_{a}": h for a, h in enumerate(self.histograms)}}, storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> DPCopulaModel:
        """A saved model, checked: format, schema hash, array shapes, no NaN (else ModelError)."""
        schema = model_schema(path, document, MODEL_FORMAT)
        shapes = {f"histogram_{a}": (s,) for a, s in enumerate(schema.sizes.tolist())}
        arrays = read_model_arrays(path, shapes | {"correlation": (schema.m, schema.m)},
                                   storage_options)
        histograms = tuple(arrays[f"histogram_{a}"] for a in range(schema.m))
        return cls(schema, int(document["n_rows"]), histograms, arrays["correlation"],
                   document["metadata"], method=document["method"])


@dataclass(frozen=True)
class DPCopulaSampler:
    """Draws one output partition: m-dimensional Gaussian, then each marginal's inverse CDF."""

    schema: Schema
    factor: np.ndarray  # m×m lower Cholesky factor of the correlation
    cdfs: tuple[np.ndarray, ...]  # per attribute, the noisy CDF on its public order

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition."""
        rng = np.random.default_rng(seed)
        codes = copula_codes(rng, rows, self.factor, self.cdfs)
        return one_hot(codes, self.schema), codes


def copula_codes(rng: np.random.Generator, rows: int, factor: np.ndarray,
                 cdfs: tuple[np.ndarray, ...]) -> np.ndarray:
    """(rows, len(cdfs)) int16 codes: y ~ N(0, L·Lᵀ) (``factor`` L), then value j = F_j⁻¹(Φ(y_j))
    on each attribute's public order (``cdfs``: their noisy CDFs)."""
    uniform = ndtr(rng.standard_normal((rows, len(cdfs))) @ factor.T)
    codes = np.empty((rows, len(cdfs)), dtype=np.int16)
    for a, cdf in enumerate(cdfs):
        # F⁻¹(u) = the first value whose CDF exceeds u; min() guards cdf[-1] < 1 by rounding
        codes[:, a] = np.minimum(np.searchsorted(cdf, uniform[:, a], side="right"),
                                 len(cdf) - 1)
    return codes


class DPCopulaKendallSynthesizer(Synthesizer):
    """DPCopula-Kendall (``--method dpcopula-kendall``): pure ε-DP, δ = 0 (``delta`` is
    stored as given, never spent).

    Extra parameters: ``k`` = ε1/ε2, the marginals' budget over the correlations' (default 8, as
    in the papers); ``histograms``: the marginals' mechanism, "laplace" (default) or "efpa".
    """

    name: ClassVar[str] = KENDALL
    description: ClassVar[str] = ("DP marginals and Kendall's tau, Gaussian copula "
                                  "(Li, Xiong & Jiang 2014)")
    post_processing: ClassVar[str] = (
        "histograms projected onto {x >= 0, sum x = n}; tau clipped to [-1, 1], "
        "P = sin(pi/2 tau) repaired by the nearest correlation matrix")

    def __init__(self, schema: Schema | str | Path, *, k: float = DEFAULT_RATIO,
                 histograms: str = "laplace", **common: Any) -> None:
        super().__init__(schema, **common)
        self.k = k
        self.histograms = histograms

    def _privacy_plan(self) -> dict[str, Any]:
        if self.histograms not in HISTOGRAM_MECHANISMS:
            raise ValueError(f"unknown histogram mechanism {self.histograms!r}; expected one of "
                             f"{HISTOGRAM_MECHANISMS}")
        return {"epsilon": self.epsilon, "delta": 0.0, "mechanism": "laplace",
                "accountant": BASIC_COMPOSITION, "rho": None}

    def _histogram_mechanism(self, epsilon1: float) -> str:
        """The marginals' mechanism and its budget parts, for the release record."""
        share = epsilon1 / self.schema.m
        if self.histograms == "efpa":
            return (f"EFPA (Acs, Castelluccia & Chen 2012) per histogram, epsilon1/m = "
                    f"{share:.6g} each: {share / 2:.6g} to choose the Fourier coefficients kept "
                    f"(report noisy max, score sensitivity sqrt(2)), {share / 2:.6g} for their "
                    f"Laplace noise (L1 sensitivity of the kept coefficients)")
        return f"Laplace, L1 sensitivity 2 each, epsilon1/m = {share:.6g} each"

    def _budget_split(self, epsilon1: float, epsilon2: float) -> BudgetSplit:
        """The split: ε1 to the m histograms, ε2 to the C(m, 2) correlations, k = ε1/ε2."""
        m = self.schema.m
        share = epsilon1 / m
        if self.histograms == "efpa":
            histograms = BudgetPart(
                "histograms", count=m, symbol="epsilon1", epsilon=epsilon1, epsilon_each=share,
                mechanism="EFPA (Acs, Castelluccia & Chen 2012)", rule="epsilon1/m",
                parts=(BudgetPart("Fourier coefficients kept, chosen", epsilon_each=share / 2,
                                  mechanism="report noisy max", norm="score",
                                  sensitivity_rule="sqrt(2)"),
                       BudgetPart("kept coefficients' noise", epsilon_each=share / 2,
                                  mechanism="Laplace", norm="L1",
                                  sensitivity_rule="of the kept coefficients")))
        else:
            histograms = BudgetPart("histograms", count=m, symbol="epsilon1", epsilon=epsilon1,
                                    epsilon_each=share, mechanism="Laplace", norm="L1",
                                    sensitivity=2.0, rule="epsilon1/m")
        pairs = m * (m - 1) // 2
        correlations = replace(self._correlations_measured(), count=pairs, symbol="epsilon2",
                               epsilon=epsilon2, rule="epsilon2/C(m,2)",
                               epsilon_each=epsilon2 / pairs if pairs else None)
        return BudgetSplit((histograms, correlations), BASIC_COMPOSITION, self.epsilon, 0.0,
                           {"k = epsilon1/epsilon2": self.k, **self._split_parameters()})

    def _correlations_measured(self) -> BudgetPart:
        """What ε2 buys, for the budget split: the coefficients and their noise's sensitivity."""
        return BudgetPart("Kendall tau-a coefficients", mechanism="Laplace",
                          sensitivity_rule="4/n each")

    def _split_parameters(self) -> dict[str, float]:
        """The budget split's parameters beside k (DPCopula-MLE's l)."""
        return {}

    def _parameters(self) -> dict[str, Any]:
        return {"k": self.k, "histograms": self.histograms}

    def _release_record(self, metadata: dict[str, Any], **privacy: Any) -> dict[str, Any]:
        """``metadata`` with the method, its parameters and the privacy record (ε, δ = 0,
        mechanism, accountant, budget split, ``privacy``'s extra fields)."""
        plan = self._privacy_plan()
        epsilon1, epsilon2 = split_budget(self.epsilon, self.k, self.schema.m)
        return metadata | {
            "method": f"{self.name}: {self.description}",
            "parameters": self._parameters(),
            "privacy": self._privacy_record(
                delta=0.0, mechanism="laplace", accountant=plan["accountant"], rho=None,
                epsilon1=epsilon1, epsilon2=epsilon2, k=self.k,
                histogram_mechanism=self._histogram_mechanism(epsilon1),
                split=self._budget_split(epsilon1, epsilon2), post_processing=self.post_processing,
                **privacy),
        }

    def _noise_rng(self) -> np.random.Generator | None:
        return None if self.noise_seed is None else np.random.default_rng(self.noise_seed)

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> DPCopulaModel:
        metadata = self._release_record(metadata)
        with timed(self.timings_, "noise_copula"):
            return dpcopula_kendall(exact, self.schema, n_rows, self.epsilon, ratio=self.k,
                                    histogram_mechanism=self.histograms,
                                    sampler=self.noise_sampler, rng=self._noise_rng(),
                                    metadata=metadata)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> DPCopulaModel:
        return DPCopulaModel.from_files(path, document, storage_options)
