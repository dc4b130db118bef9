"""EFPA: a DP histogram through lossy Fourier compression (Ács, Castelluccia & Chen, ICDM 2012).

    transform  y = F·x, F the orthonormal real DFT of the N cells (:func:`real_fourier`)
    select     κ, how many leading coefficients to keep, by the exponential mechanism (ε_s)
    perturb    the kept coefficients 1 .. κ−1 + Laplace (ε_p); coefficient 0 is public
    invert     x̃ = Fᵀ·(ỹ_0, ỹ_1, …, ỹ_{κ−1}, 0, …, 0), then the caller's projection onto n

The DPCopula papers' choice for the marginals (``histograms="efpa"`` of dp_dask.methods.dpcopula).
A smooth histogram has its energy in few low frequencies: dropping the rest costs little, and the
noise, spread back over the N cells by the inverse transform, is that of κ − 1 numbers, not N.

**Choices** (each also in the code where it is made):

* *Basis.* y holds, in this order, the DC term X_0, then √2·Re X_f and √2·Im X_f for each
  frequency f with both (1 ≤ f < N/2), then X_{N/2} for even N, where X = ``numpy.fft.rfft(x,
  norm="ortho")``. F is orthogonal (Parseval with the conjugate half of the spectrum folded in),
  so ‖F·v‖₂ = ‖v‖₂ and Fᵀ inverts it. Paper: the unitary DFT; the same space in real coordinates.
* *Candidates.* Whole frequencies, as the paper (and the authors' code) keep "the first k
  coefficients": κ ∈ {1, 3, 5, …} (DC, then a cos/sin pair per frequency) up to N.
* *Coefficient 0 is not noised.* y_0 = Σx/√N = n/√N, and n is public (our neighbouring notion),
  so it costs nothing and carries no noise; the paper noises it (its n is private).
* *Noise on real and imaginary parts.* The authors' code perturbs each kept coefficient's modulus
  and keeps its phase, which releases the exact phase; we noise both real coordinates.
* *Budget.* ε_s = ε_p = ε/2, the even split of the authors' reference implementation.
* *Selection mechanism.* OpenDP's ``make_noisy_max`` (report noisy max with exponential noise,
  i.e. permute-and-flip, McKenna & Sheldon 2020) at the exponential mechanism's scale 2Δu/ε_s:
  ε_s-DP like the paper's exponential mechanism, and never less accurate. ``sampler="numpy"``
  draws the same exponential noise from a seeded generator (tests and research only).

**Sensitivities** (replace one row, n public: the histogram moves by v = e_b − e_a, one cell −1
and another +1, ‖v‖₁ = 2, ‖v‖₂ = √2). Let w = F·v, so w_0 = 0 and ‖w‖₂ = √2.

* Perturbation, L1 of the κ − 1 noised coefficients (:func:`perturbation_sensitivity`):
  Δ₁(κ) = max_{a≠b} Σ_{i=1}^{κ−1} |F_{i,b} − F_{i,a}|, which depends on N and κ alone (public).
  It is computed exactly for N ≤ ``EXACT_CELLS`` (every pair of cells; the maximising pair
  attains it). Above, the bound min(√2·√(κ−1), 2√2·(κ−1)/√N): Cauchy–Schwarz gives
  Σ_{i<κ}|w_i| ≤ √(κ−1)·‖w‖₂, and every entry of rows 1 .. N−1 of F lies in [−√(2/N), √(2/N)],
  so each |w_i| ≤ 2√(2/N). (The paper's √κ·Δ₂ is the first bound, with the DC term.)
  Laplace of scale Δ₁(κ)/ε_p per coefficient is then ε_p-DP.
* Selection, the score u(κ) = −(‖(y_κ, …, y_{N−1})‖₂ + √(2(κ−1))·Δ₁(κ)/ε_p): the error the
  paper minimises, the energy dropped plus the expected norm of the kept coefficients' noise
  (κ − 1 Laplace draws of scale b have E‖·‖₂² = 2(κ−1)b²). Only the first term reads the data,
  and by the triangle inequality it moves by at most ‖(w_κ, …)‖₂ ≤ ‖w‖₂ = √2: Δu = √2 for
  every candidate, the L∞ distance OpenDP's noisy max is calibrated to.

Selection then perturbation is sequential: (ε_s + ε_p, 0) = (ε, 0)-DP per histogram.

**Floating point in the scores.** Δu bounds the exact scores; computed ones differ from them, and
neighbours' computed scores differed by up to √2 + 7·10⁻¹⁰ (n ~ 10⁶, tests/test_efpa.py). So the
selection is calibrated to Δu + 2E, E a bound on |computed u(κ) − u(κ)| that depends only on N,
the public n and the public noise terms (:func:`score_error`), with the scores' coefficients
computed by explicit sums (:func:`fourier_by_sums`), whose error, unlike the FFT's, is bounded
here (the perturbation rounds the same coefficients). u = 2⁻⁵³; x ≥ 0, Σx = n, ‖x‖₂ ≤ n.

* The table cos, sin(2πr/N), r = 0 .. N − 1: the angle is rounded 3 times from 2π·r/N < 2π
  (< 19u) and numpy's cos/sin are within 4 ulp (≤ 4u for values in [−1, 1], its SIMD paths
  included): each entry within 23u, taken as α = 32u.
* Each coefficient is s·Σ_j t_j·x_j, s = 1/√N or √(2/N) (rounded twice), t the table's entries:
  the dot product's rounding is ≤ γ_N·Σ|t_j|x_j ≤ γ_N(1 + α)n in any summation order (Higham,
  Thm. 3.5; FMA only removes roundings), the table's ≤ α·n, the scaling's ≤ 3u·s·n: each
  coordinate within e = √(2/N)·n·(N + 40)·u·1.02 (:func:`coefficient_error`), all N of them
  within √2·n·(N + 40)·u·1.02 in ℓ2, which bounds the change of every tail norm.
* The tail norms (squares, suffix sums of non-negative terms, square root): relative error
  ≤ γ_{N+2}, of a norm ≤ ‖y‖₂ ≤ n(1 + 10⁻³); then the noise term c(κ) added (one rounding of
  u·(n + c)) and negated (exact). c(κ) is computed alike for both neighbours.

In all E ≤ u·(2.5·(N + 40)·n + max c): about 10⁻⁷ at n = 10⁶, N = 100, against Δu = √2.

**Integers for OpenDP.** OpenDP's vetted Laplace is discrete, so the kept coefficients are
rounded to the grid 1/Q (Q = ``QUANTUM``) first, as dp_dask.methods.dpcopula_mle does: rounding
moves each neighbour's coordinate by < 1/2 and their difference by < 1, so round(Q·y) has integer
L1 sensitivity ⌈Q·Δ₁(κ)⌉ + κ − 1, and that is what the discrete Laplace is calibrated to
(an extra ≤ (κ − 1)/(Q·Δ₁) of noise, under 10⁻³ for Q = 2¹⁶). The y rounded are the computed
ones, each within e of the exact ("Floating point", above), so Δ₁ is taken as Δ₁ + 2(κ − 1)·e.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from dp_dask.privacy.noise import _check_map, _check_sampler, _opendp, laplace_noise

QUANTUM = 2**16  # Q: coefficients rounded to 1/Q before the (integer) noise
EXACT_CELLS = 256  # Δ₁ by every pair of cells up to here: O(N³) work, ~0.1 s at 256
SCORE_SENSITIVITY = math.sqrt(2.0)  # Δu: the dropped energy's norm moves by at most ‖w‖₂ = √2
SELECTION_SHARE = 0.5  # ε_s = ε/2, ε_p = ε/2


def real_fourier(x: np.ndarray) -> np.ndarray:
    """y = F·x in the module docstring's orthonormal real coordinates (length N)."""
    x = np.asarray(x, dtype=np.float64)
    size = len(x)
    spectrum = np.fft.rfft(x, norm="ortho")
    interior = spectrum[1 : (size + 1) // 2]  # frequencies with a cos and a sin
    pairs = np.sqrt(2.0) * np.column_stack([interior.real, interior.imag]).ravel()
    nyquist = [spectrum[size // 2].real] if size % 2 == 0 and size > 1 else []
    return np.concatenate([[spectrum[0].real], pairs, nyquist])


def inverse_real_fourier(y: np.ndarray) -> np.ndarray:
    """x = Fᵀ·y, the inverse of :func:`real_fourier`."""
    y = np.asarray(y, dtype=np.float64)
    size = len(y)
    spectrum = np.zeros(size // 2 + 1, dtype=np.complex128)
    spectrum[0] = y[0]
    interior = y[1 : 1 + 2 * ((size - 1) // 2)].reshape(-1, 2) / np.sqrt(2.0)
    spectrum[1 : 1 + len(interior)] = interior[:, 0] + 1j * interior[:, 1]
    if size % 2 == 0 and size > 1:
        spectrum[size // 2] = y[-1]
    return np.fft.irfft(spectrum, n=size, norm="ortho")


def candidates(size: int) -> np.ndarray:
    """κ for keeping frequencies 0 .. j, j = 0, 1, …: 1, 3, 5, …, then N."""
    return np.unique(np.minimum(1 + 2 * np.arange(size // 2 + 1), size))


@functools.lru_cache(maxsize=64)
def _sensitivities(size: int, exact_cells: int = EXACT_CELLS) -> tuple[float, ...]:
    """Δ₁(κ) for κ = 1 .. N (index κ − 1), exactly up to ``exact_cells`` cells, above by the
    bound (module docstring)."""
    kept = np.arange(size)  # κ − 1 noised coefficients
    if size > exact_cells:
        bound = np.minimum(np.sqrt(2.0 * kept), 2.0 * np.sqrt(2.0) * kept / math.sqrt(size))
        return tuple(bound.tolist())
    basis = np.stack([real_fourier(e) for e in np.eye(size)], axis=1)[1:]  # rows 1 .. N−1
    worst = np.zeros(size)
    for a in range(size):  # cumulative L1 of F·(e_b − e_a) over rows 1 .. κ−1, worst b
        moved = np.cumsum(np.abs(basis - basis[:, a, None]), axis=0).max(axis=1)
        worst[1:] = np.maximum(worst[1:], moved)
    return tuple(worst.tolist())


def perturbation_sensitivity(size: int, kappa: int) -> float:
    """Δ₁(κ): the L1 sensitivity of the noised coefficients 1 .. κ−1 of an N-cell histogram."""
    if not 1 <= kappa <= size:
        raise ValueError(f"kappa must be in 1 .. {size}, got {kappa!r}")
    return _sensitivities(size)[kappa - 1]


def coefficient_error(size: int, n_rows: int) -> float:
    """A bound on each coefficient's error in :func:`fourier_by_sums` for a histogram of
    ``n_rows`` rows in ``size`` cells: √(2/N)·n·(N + 40)·u·1.02 (module docstring)."""
    return math.sqrt(2.0 / size) * n_rows * (size + 40) * 2.0**-53 * 1.02


def integer_sensitivity(size: int, kappa: int, n_rows: int) -> int:
    """L1 sensitivity of round(Q·y) on coefficients 1 .. κ−1, y from :func:`fourier_by_sums`:
    each computed coefficient within e of the exact, rounding adds < 1 per coefficient."""
    moved = perturbation_sensitivity(size, kappa) + 2 * (kappa - 1) * coefficient_error(
        size, n_rows)
    return math.ceil(QUANTUM * moved) + kappa - 1


def fourier_by_sums(x: np.ndarray) -> np.ndarray:
    """:func:`real_fourier` by explicit sums over a table of cos and sin(2πr/N): O(N²), but
    with the error bound of the module docstring ("Floating point"), which the FFT lacks."""
    x = np.asarray(x, dtype=np.float64)
    size = len(x)
    angles = 2.0 * np.pi * np.arange(size) / size
    cos, sin = np.cos(angles), np.sin(angles)
    cells = np.arange(size)
    sums = []  # Σ_j cos(2πfj/N)·x_j and Σ_j sin(2πfj/N)·x_j for f = 0 .. N/2
    block = max(1, 2**22 // max(size, 1))
    for start in range(0, size // 2 + 1, block):
        index = np.outer(np.arange(start, min(start + block, size // 2 + 1)), cells) % size
        sums.append(np.stack([cos[index] @ x, sin[index] @ x], axis=1))
    parts = np.concatenate(sums)
    interior = parts[1 : (size + 1) // 2] * np.array([1.0, -1.0])  # Im X_f = −Σ sin·x
    nyquist = [parts[size // 2, 0] / math.sqrt(size)] if size % 2 == 0 and size > 1 else []
    return np.concatenate([[parts[0, 0] / math.sqrt(size)],
                           math.sqrt(2.0 / size) * interior.ravel(), nyquist])


def scores(y: np.ndarray, epsilon_p: float) -> np.ndarray:
    """u(κ) for each candidate κ: −(energy dropped + expected noise norm of the kept)."""
    size = len(y)
    kappas = candidates(size)
    tail = np.sqrt(np.maximum(np.cumsum((y**2)[::-1])[::-1], 0.0))  # ‖y_i..‖₂ at index i
    dropped = np.append(tail, 0.0)[kappas]
    return -(dropped + noise_terms(size, epsilon_p))


def noise_terms(size: int, epsilon_p: float) -> np.ndarray:
    """The scores' public part: each candidate's expected noise norm √(2(κ−1))·Δ₁(κ)/ε_p."""
    return np.array([math.sqrt(2.0 * (k - 1)) * perturbation_sensitivity(size, k) / epsilon_p
                     for k in candidates(size)])


def score_error(size: int, n_rows: int, epsilon_p: float) -> float:
    """E: a bound on |u(κ) as :func:`scores` computes it from :func:`fourier_by_sums` − u(κ)|
    for every histogram of ``n_rows`` rows in ``size`` cells (module docstring)."""
    return 2.0**-53 * (2.5 * (size + 40) * n_rows + float(noise_terms(size, epsilon_p).max()))


def select(utility: np.ndarray, epsilon_s: float, sensitivity: float, *, sampler: str,
           rng: np.random.Generator | None) -> int:
    """Index of the chosen candidate: report noisy max (exponential noise, scale 2Δ/ε_s) over
    scores that move by at most ``sensitivity`` as computed (Δu + 2E)."""
    _check_sampler(sampler, rng)
    scale = 2.0 * sensitivity / epsilon_s
    if sampler == "numpy":
        return int(np.argmax(utility + rng.exponential(scale, size=len(utility))))
    dp = _opendp()
    space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float))
    meas = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=scale)
    _check_map(meas.map(sensitivity), epsilon_s, "epsilon (selection)")
    return int(meas([float(u) for u in utility]))


@dataclass(frozen=True)
class EFPAResult:
    """A noisy histogram (float, not yet projected) and the κ the mechanism chose."""

    histogram: np.ndarray
    kappa: int


def efpa_histogram(counts: np.ndarray, n_rows: int, epsilon: float, *,
                   sampler: str = "opendp",
                   rng: np.random.Generator | None = None) -> EFPAResult:
    """One histogram of ``n_rows`` (public) rows through EFPA: (ε, 0)-DP, ε/2 to choose κ and
    ε/2 to perturb. ``counts``: the exact histogram."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    y = fourier_by_sums(counts)
    size = len(y)
    epsilon_s = SELECTION_SHARE * epsilon
    epsilon_p = epsilon - epsilon_s
    if int(np.sum(counts)) != n_rows:
        raise ValueError("the histogram's total is not the n given")
    # the scores from the bounded sums, the selection calibrated to them as computed
    sensitivity = math.nextafter(SCORE_SENSITIVITY + 2 * score_error(size, n_rows, epsilon_p),
                                 math.inf)
    utility = scores(y, epsilon_p)
    kappa = int(candidates(size)[select(utility, epsilon_s, sensitivity, sampler=sampler,
                                        rng=rng)])
    kept = np.zeros(size)
    kept[0] = n_rows / math.sqrt(size)  # y_0 from the public n, not from the counts
    if kappa > 1:
        sensitivity = integer_sensitivity(size, kappa, n_rows)
        noisy = laplace_noise(np.rint(QUANTUM * y[1:kappa]).astype(np.int64),
                              sensitivity / epsilon_p, sensitivity=sensitivity,
                              sampler=sampler, rng=rng)
        kept[1:kappa] = noisy / QUANTUM
    return EFPAResult(inverse_real_fourier(kept), kappa)
