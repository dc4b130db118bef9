"""Driver-side math of the binary Gaussian copula (Asghar et al., "Differentially private release
of high-dimensional datasets using the Gaussian copula").

A binary column a is modelled as X_a = 1[Y_a > Φ⁻¹(1 - p_a)] with (Y_1, ..., Y_d) standard normal
with correlation matrix R. Its pairwise entries ρ_ab solve Φ2(Φ⁻¹(p_a), Φ⁻¹(p_b); ρ) = p_ab, the
noisy pairwise matrix is repaired to the nearest correlation matrix, and sampling uses a Cholesky
factor of it. Everything here is plain numpy/scipy on small (d×d) or flat (one entry per pair)
arrays.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import sparse
from scipy.linalg import blas
from scipy.special import ndtr, ndtri, owens_t

# Marginals are kept this far from 0 and 1 so that Φ⁻¹ stays finite.
P_CLIP = 1e-9
# Largest |ρ| returned by latent_correlation: ±1 exactly would make the correlation singular.
RHO_MAX = 1.0 - 1e-9
# |Φ2(ρ) - p_ab| below this times the size of the terms of the Owen's T formula is at its
# rounding level, so a further Newton step would only chase noise.
_RESIDUAL_FLOOR = 1e-15
# The closed-form start is kept off the flat ends of Φ2 (|ρ| → 1), where Newton steps are poor.
_START_MAX = 0.97
# Steps at most this long are in Newton's asymptotic regime, where the error estimate holds.
_SMALL_STEP = 1e-5
_TWO_PI = 2.0 * np.pi
# Newton's method in nearest_correlation: the CG solve stops at a residual below
# min(_CG_RTOL, ‖∇θ‖) relative to ‖∇θ‖ (an inexact Newton step that keeps quadratic convergence,
# Qi & Sun 2006), or after _CG_MAX_ITER products; the Armijo line search asks for
# _ARMIJO times the predicted decrease and halves the step at most _MAX_HALVINGS times.
_CG_RTOL = 1e-2
_CG_MAX_ITER = 200
_ARMIJO = 1e-4
_MAX_HALVINGS = 40
# Rounding allowance of the Armijo test, in units of d·eps·(‖X‖² + Σ|y|).
_ROUNDING_SLACK = 10.0
# Smallest preconditioner entry diag(V) (V has entries in [0, 1]).
_PRECONDITIONER_FLOOR = 1e-8
# Correlations that differ by at most this count as equal in a group (the nearest correlation
# matrix keeps exact symmetries to ~1e-13); members' sorted rows are keyed in steps of
# _KEY_STEP (on wide5000, keys of row sums at 1e-6 put 6 other categories with the 2,031).
GROUP_TOLERANCE = 1e-9
_KEY_STEP = 1e-7


def _bvn_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray, ph: np.ndarray,
             pk: np.ndarray) -> np.ndarray:
    """Φ2(h, k; ρ) for arrays of one shape, given ph = Φ(h), pk = Φ(k) (latent_correlation
    already knows them)."""
    s = np.sqrt(np.maximum((1.0 - rho) * (1.0 + rho), 0.0))
    # β = ½ when hk < 0 or (hk = 0 and h + k < 0), i.e. when min(h, k) < 0 ≤ max(h, k).
    beta = 0.5 * ((np.minimum(h, k) < 0) & (np.maximum(h, k) >= 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (0.5 * (ph + pk) - owens_t(h, (k - rho * h) / (h * s))
               - owens_t(k, (h - rho * k) / (k * s)))
    out -= beta
    # The general formula divides by h, k and s; the few entries where one is 0 take their
    # limits instead (kept out of the common path, which latent_correlation calls repeatedly).
    special = (h == 0) | (k == 0) | (s == 0)
    if special.any():
        out[special] = _bvn_cdf_limits(h[special], k[special], rho[special], ph[special],
                                       pk[special], s[special], beta[special])
    return np.clip(out, 0.0, 1.0)


def _bvn_cdf_limits(h: np.ndarray, k: np.ndarray, rho: np.ndarray, ph: np.ndarray,
                    pk: np.ndarray, s: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Φ2 where h = 0, k = 0 or |ρ| ≥ 1 (s = 0), by the exact limits."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # As h → 0+, a_h → sign(k)·∞ and T(h, a_h) → sign(k)/4, consistent with β (which
        # treats h = 0 like h > 0); likewise for k = 0.
        t_h = np.where(h == 0, 0.25 * np.sign(k), owens_t(h, (k - rho * h) / (h * s)))
        t_k = np.where(k == 0, 0.25 * np.sign(h), owens_t(k, (h - rho * k) / (k * s)))
    out = 0.5 * (ph + pk) - t_h - t_k - beta
    out = np.where((h == 0) & (k == 0), 0.25 + np.arcsin(np.clip(rho, -1.0, 1.0)) / _TWO_PI, out)
    out = np.where((s == 0) & (rho > 0), np.minimum(ph, pk), out)
    return np.where((s == 0) & (rho < 0), np.maximum(ph + pk - 1.0, 0.0), out)


def bvn_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Bivariate standard normal CDF Φ2(h, k; ρ) = P(X ≤ h, Y ≤ k), broadcasting.

    Owen's T formula, Φ2 = ½Φ(h) + ½Φ(k) - T(h, a_h) - T(k, a_k) - β, exact limits at h = 0,
    k = 0 and |ρ| = 1 (|ρ| > 1 is treated as ±1). h and k must be finite.
    """
    h, k, rho = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (h, k, rho)))
    shape = h.shape
    h, k, rho = (x.ravel() for x in (h, k, rho))
    return _bvn_cdf(h, k, rho, ndtr(h), ndtr(k)).reshape(shape)


def _bvn_pdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """φ2(h, k; ρ) for |ρ| < 1, given s2 = 1 - ρ²."""
    # h² - 2ρhk + k² = (h - ρk)² + (1 - ρ²)k²: a sum of squares, accurate near |ρ| = 1.
    return np.exp(-0.5 * ((h - rho * k) ** 2 / s2 + k**2)) / (_TWO_PI * np.sqrt(s2))


def bvn_pdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Bivariate standard normal density φ2(h, k; ρ), which is also ∂Φ2(h, k; ρ)/∂ρ.

    At |ρ| = 1 the limit is returned: 0 off the line h = ρk, +inf on it.
    """
    h, k, rho = (np.asarray(x, dtype=np.float64) for x in (h, k, rho))
    s2 = np.maximum((1.0 - rho) * (1.0 + rho), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _bvn_pdf(h, k, rho, s2)
    return np.where(s2 == 0, np.where(h == rho * k, np.inf, 0.0), out)


def _initial_rho(p_a: np.ndarray, p_b: np.ndarray, p_ab: np.ndarray) -> np.ndarray:
    """Bonett & Price (2005) closed-form tetrachoric approximation cos(π / (1 + ω^c)).

    Often within a few hundredths of the root (less so for rare marginals), which saves Newton
    steps, each of which costs two Owen's T evaluations per pair.
    """
    p10, p01 = p_a - p_ab, p_b - p_ab
    p00 = np.maximum(1.0 - p_a - p_b + p_ab, 0.0)  # rounding can push it just below 0
    p_min = np.minimum(np.minimum(p_a, 1.0 - p_a), np.minimum(p_b, 1.0 - p_b))
    c = 0.5 * (1.0 - np.abs(p_a - p_b) / 5.0 - (0.5 - p_min) ** 2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        omega = (p_ab * p00) / (p10 * p01)
        return np.cos(np.pi / (1.0 + omega**c))


def latent_correlation(p_a: np.ndarray, p_b: np.ndarray, p_ab: np.ndarray, *,
                       tol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """Latent (tetrachoric) correlations ρ with Φ2(Φ⁻¹(p_a), Φ⁻¹(p_b); ρ) = p_ab, elementwise.

    p_a, p_b are clipped into [1e-9, 1 - 1e-9] and p_ab into its Fréchet bounds
    [max(0, p_a + p_b - 1), min(p_a, p_b)]; a p_ab on a bound maps to ±(1 - 1e-9), so every ρ
    lies in [-(1 - 1e-9), 1 - 1e-9]. Solved by a safeguarded Newton method: steps use the
    derivative φ2 (applied to the logit of Φ2 within its bounds, with Halley's second-order
    correction), each entry keeps a bracket (Φ2 increases in ρ), and a step leaving it is
    replaced by bisection. An entry stops when its error in ρ is below ``tol``
    (the step, or the error predicted after a small step) or its residual is at the rounding
    level of Φ2, where ρ is as determined as floating point allows; only the unconverged
    entries are iterated.
    """
    p_a, p_b, p_ab = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (p_a, p_b, p_ab)))
    shape = p_a.shape
    p_a, p_b, p_ab = (x.ravel() for x in (p_a, p_b, p_ab))
    if not (np.isfinite(p_a).all() and np.isfinite(p_b).all() and np.isfinite(p_ab).all()):
        raise ValueError("latent_correlation needs finite probabilities")
    p_a = np.clip(p_a, P_CLIP, 1.0 - P_CLIP)
    p_b = np.clip(p_b, P_CLIP, 1.0 - P_CLIP)
    lower = np.maximum(p_a + p_b - 1.0, 0.0)
    upper = np.minimum(p_a, p_b)
    # p_ab on or beyond a Fréchet bound (common: a noisy count clamped at 0) is clipped to it,
    # which means ρ = ±RHO_MAX with no iteration.
    rho = np.where(p_ab >= upper, RHO_MAX, -RHO_MAX)
    active = np.flatnonzero((p_ab > lower) & (p_ab < upper))
    pa, pb, target, lower, upper = (x[active] for x in (p_a, p_b, p_ab, lower, upper))
    h, k = ndtri(pa), ndtri(pb)
    # Newton runs on g(ρ) = log(Φ2 - lower) - log(upper - Φ2), the logit of Φ2 within its
    # Fréchet bounds: Φ2 approaches them like exp(-c/(1 ∓ ρ)), so g is far closer to linear
    # than Φ2 and needs fewer steps (each costs two Owen's T evaluations per pair).
    g_target = np.log((target - lower) / (upper - target))
    # The terms of the Owen's T formula are O(1) unless h, k < 0, where all are at most
    # max(p_a, p_b); its rounding error scales with them.
    floor = _RESIDUAL_FLOOR * np.where((h < 0) & (k < 0), np.maximum(pa, pb), 1.0)
    r = np.clip(_initial_rho(pa, pb, target), -_START_MAX, _START_MAX)
    lo, hi = np.full(active.size, -RHO_MAX), np.full(active.size, RHO_MAX)
    for _ in range(max_iter):
        if active.size == 0:
            break
        cdf = _bvn_cdf(h, k, r, pa, pb)
        f = cdf - target
        lo = np.where(f < 0, r, lo)
        hi = np.where(f > 0, r, hi)
        s2 = (1.0 - r) * (1.0 + r)
        pdf = _bvn_pdf(h, k, r, s2)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            above, below = cdf - lower, upper - cdf
            ab = above * below
            # g' = φ2 (upper - lower) / (above·below)
            newton = (g_target - np.log(above / below)) * ab / (pdf * (upper - lower))
            # g''/(2g') in closed form (∂log φ2/∂ρ plus the logit's term), so Halley's
            # correction and the error estimate cost no further special-function evaluation.
            curvature = 0.5 * (r / s2 + (h - r * k) * (k - r * h) / s2**2
                               + pdf * (above - below) / ab)
            t = newton * curvature
            step = np.where(np.abs(t) < 0.5, newton / (1.0 + t), newton)
            r_new = r + step
            # After a small step the remaining error is about curvature·step² (Newton's, which
            # bounds Halley's): accepting on it saves the evaluation that would only confirm.
            small = (np.abs(step) <= _SMALL_STEP) & (np.abs(curvature) * step**2 <= tol)
        # `not inside` also catches a NaN/inf step (Φ2 flat or at a bound in floating point).
        inside = (r_new > lo) & (r_new < hi)
        at_floor = np.abs(f) <= floor
        r_new = np.where(at_floor, r, np.where(inside, r_new, 0.5 * (lo + hi)))
        done = at_floor | (inside & small) | (np.abs(r_new - r) <= tol) | (hi - lo <= tol)
        rho[active[done]] = r_new[done]
        keep = np.flatnonzero(~done)
        active, h, k, pa, pb, target, lower, upper, g_target, floor, r, lo, hi = (
            x[keep] for x in (active, h, k, pa, pb, target, lower, upper, g_target, floor, r_new,
                              lo, hi))
    if active.size:
        warnings.warn(f"latent_correlation: {active.size} entries did not converge in "
                      f"{max_iter} iterations", RuntimeWarning, stacklevel=2)
        rho[active] = r
    return rho.reshape(shape)


def _unit_diagonal(a: np.ndarray) -> np.ndarray:
    """D^-½ A D^-½ with D = diag(A), symmetrised against rounding."""
    scale = 1.0 / np.sqrt(np.diag(a))
    out = a * scale[:, None] * scale[None, :]
    out = 0.5 * (out + out.T)
    np.fill_diagonal(out, 1.0)
    return out


class _GeneralizedHessian:
    """An element V of Clarke's generalized Jacobian of y ↦ diag((G + diag y)₊) at an
    eigendecomposition G + diag y = P diag(λ) Pᵀ (Qi & Sun 2006, section 3).

    V h = diag(P (Ω ∘ (Pᵀ diag(h) P)) Pᵀ) with Ω = 1 on (λ_i > 0, λ_j > 0), 0 on
    (λ_i ≤ 0, λ_j ≤ 0) and λ_i / (λ_i - λ_j) across. Only the smaller of the two eigenvector
    blocks is multiplied: with the positive block as the small one, V h = q(h); with the
    non-positive one, Ω is replaced by 1 - Ω and V h = h - q(h) (since P Pᵀ = I). A product costs
    two GEMMs of d × d × min(r, d - r) instead of three of d × d × d.
    """

    def __init__(self, w: np.ndarray, p: np.ndarray, extra: np.ndarray | None = None) -> None:
        d = w.size
        # ``extra``: a diagonal added to V (the groups' zero-sum eigenvalues, see Symmetry)
        self.extra = np.zeros(d) if extra is None else extra
        s = int(np.searchsorted(w, 0.0, side="right"))  # eigh's ascending order: λ ≤ 0 first
        across = w[s:, None] / (w[s:, None] - w[None, :s])  # Ω between the blocks, r × s
        self.complement = d - s > s
        self.p = p
        if self.complement:  # small block: λ ≤ 0
            small, self.large = slice(0, s), slice(s, d)
            self.weight = 1.0 - across.T
        else:
            small, self.large = slice(s, d), slice(0, s)
            self.weight = across
        self.small = np.ascontiguousarray(p[:, small])
        # diag(V) for the preconditioner (Borsdorf & Higham 2010): with Q = P ∘ P,
        # V_ii = (Σ_small Q_ik)² + 2 Σ Q_ik Ω_kl Q_il over small k, large l.
        q_small = self.small**2
        diagonal = q_small.sum(axis=1) ** 2 + 2.0 * np.einsum(
            "ij,ij->i", q_small @ self.weight, p[:, self.large] ** 2)
        self.diagonal = (1.0 - diagonal if self.complement else diagonal) + self.extra

    def __call__(self, h: np.ndarray) -> np.ndarray:
        m = (self.small * h[:, None]).T @ self.p  # Pₛᵀ diag(h) P: [M_ss, M_sl] in eigh's order
        m[:, self.large] *= 2.0 * self.weight
        q = np.einsum("ij,ij->i", self.small @ m, self.p)
        return (h - q if self.complement else q) + self.extra * h


def _conjugate_gradient(hessian: _GeneralizedHessian, rhs: np.ndarray, rtol: float,
                        max_iter: int) -> np.ndarray:
    """Approximate solution of (V + εI) x = rhs by CG with diag(V + εI) as preconditioner."""
    # V is only positive semidefinite; Qi & Sun's small shift keeps CG well defined.
    shift = 1e-10 * max(1.0, float(np.abs(hessian.diagonal).max(initial=0.0)))
    precondition = 1.0 / np.maximum(hessian.diagonal + shift, _PRECONDITIONER_FLOOR)
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = precondition * r
    direction = z.copy()
    rz = r @ z
    target = rtol * np.linalg.norm(rhs)
    for _ in range(max_iter):
        vd = hessian(direction) + shift * direction
        curvature = direction @ vd
        if curvature <= 0:
            break
        step = rz / curvature
        x += step * direction
        r -= step * vd
        if np.linalg.norm(r) <= target:
            break
        z = precondition * r
        rz, rz_old = r @ z, rz
        direction = z + (rz / rz_old) * direction
    # A first product with no positive curvature (V ≈ 0 in floating point) leaves x = 0: the
    # preconditioned gradient step still descends.
    return x if x.any() else rhs * precondition


def _shifted_eigh(g: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigendecomposition of G + diag(y) (ascending eigenvalues, eigenvectors)."""
    r = g.copy()
    r[np.diag_indices_from(r)] += y
    return np.linalg.eigh(r)


def _diagonal_of_positive_part(w: np.ndarray, p: np.ndarray) -> np.ndarray:
    """diag(P diag(λ₊) Pᵀ) without forming the matrix."""
    s = int(np.searchsorted(w, 0.0, side="right"))
    return (p[:, s:] ** 2) @ w[s:]


def nearest_correlation(a: np.ndarray, *, tol: float = 1e-7, max_iter: int = 1000,
                        eig_floor: float = 0.0, symmetry: Symmetry | None = None) -> np.ndarray:
    """Nearest correlation matrix in Frobenius norm, eigenvalues ≥ ``eig_floor``.

    Qi & Sun's (2006) quadratically convergent semismooth Newton method on the dual, with
    Borsdorf & Higham's (2010) diagonal preconditioner. Writing X = δI + Z (δ = eig_floor),
    the problem is the nearest Z ⪰ 0 to G = A - δI with diag(Z) = (1 - δ)·1; its dual
    θ(y) = ½‖(G + diag y)₊‖² - (1 - δ)Σy is convex and once differentiable with
    ∇θ(y) = diag((G + diag y)₊) - (1 - δ), and the minimiser gives X = δI + (G + diag y)₊. Each
    Newton step is one ``eigh``, the step solved inexactly by preconditioned CG on a generalized
    Hessian (each product two GEMMs with the eigenvectors) and an Armijo line search. It
    stops when ‖diag(X) - 1‖ ≤ tol·‖X‖ for the PSD iterate X (Higham's criterion, as the
    alternating projections used before); X is returned, rescaled to an exact unit diagonal, so
    the result is PSD up to rounding. A correlation matrix already valid is returned (up to
    rounding) after one ``eigh``. ``max_iter`` bounds the Newton steps.

    Hand-written because no maintained Python library offers the Newton method: statsmodels'
    ``corr_nearest`` is alternating projections and runs until no eigenvalue is below 1e-15
    (measured at over 13 minutes for d ≈ 700). It replaced Anderson-accelerated alternating
    projections (~34 ``eigh`` at d = 2,000) with ~6-8 Newton steps.

    With ``symmetry`` (exchangeable groups of ``a``, :meth:`Symmetry.of`) the same method runs
    on the reduced matrix: the solution is unique, hence treats a group alike too, so y is
    constant on each group and every ``eigh`` is of the reduced size; a group's zero-sum
    eigenvalue enters θ, its gradient and the Hessian n - 1 times (the extra diagonal). On
    wide5000, d = 5,054 becomes 3,024.
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"nearest_correlation needs a square matrix, got shape {a.shape}")
    if not 0.0 <= eig_floor < 1.0:
        raise ValueError(f"eig_floor must lie in [0, 1), got {eig_floor}")
    g = 0.5 * (a + a.T)
    g[np.diag_indices_from(g)] -= eig_floor
    target = 1.0 - eig_floor
    symmetry = symmetry or Symmetry(len(g))
    reduced, anti, diagonal = symmetry.reduce(g)
    ungrouped = len(reduced) - len(anti)
    repeats = symmetry.multiplicity[ungrouped:] - 1.0  # n - 1 per group
    multiplicity = symmetry.multiplicity

    def square(w: np.ndarray, lam: np.ndarray, shift: float = 0.0) -> float:
        """‖(G + diag y)₊ + shift·I‖² over all d, from the reduced eigenvalues."""
        positive, lam_positive = np.maximum(w, 0.0) + shift, np.maximum(lam, 0.0) + shift
        return positive @ positive + repeats @ lam_positive**2

    # Start from G with its diagonal set to the target: A itself for a unit-diagonal A.
    y = target - diagonal
    w, p = _shifted_eigh(reduced, y)
    lam = anti + y[ungrouped:]
    for _ in range(max_iter):
        gradient = _diagonal_of_positive_part(w, p) - multiplicity * target
        gradient[ungrouped:] += repeats * np.maximum(lam, 0.0)
        norm = np.sqrt((gradient**2 / multiplicity).sum())  # the gradient's in all d coordinates
        if norm <= tol * np.sqrt(square(w, lam, eig_floor)):
            break
        dual = 0.5 * square(w, lam) - target * (multiplicity @ y)
        # θ is a difference of terms of size ‖X‖² and Σ|y|: near the solution Newton's decrease
        # falls below their rounding error, so the Armijo test allows for it.
        slack = _ROUNDING_SLACK * symmetry.d * np.finfo(float).eps * (
            square(w, lam) + target * (multiplicity @ np.abs(y)))
        extra = np.concatenate([np.zeros(ungrouped), repeats * (lam > 0)])
        hessian = _GeneralizedHessian(w, p, extra)
        step = _conjugate_gradient(hessian, -gradient, min(_CG_RTOL, norm), _CG_MAX_ITER)
        slope = gradient @ step
        length = 1.0
        for _ in range(_MAX_HALVINGS):
            y_new = y + length * step
            w, p = _shifted_eigh(reduced, y_new)
            lam = anti + y_new[ungrouped:]
            if (0.5 * square(w, lam) - target * (multiplicity @ y_new)
                    <= dual + _ARMIJO * length * slope + slack):
                break
            length *= 0.5
        y = y_new
    else:
        warnings.warn(f"nearest_correlation did not converge to tol={tol} in {max_iter} "
                      "iterations", RuntimeWarning, stacklevel=2)
    # (G + diag y)₊ on the reduced space, from whichever eigenvector block is smaller.
    s = int(np.searchsorted(w, 0.0, side="right"))
    if s < w.size - s:
        x = reduced - (p[:, :s] * w[:s]) @ p[:, :s].T
        x[np.diag_indices_from(x)] += y
    else:
        x = (p[:, s:] * w[s:]) @ p[:, s:].T
    x = symmetry.expand(x, np.maximum(lam, 0.0))
    x[np.diag_indices_from(x)] += eig_floor
    return _unit_diagonal(x)


def psd_correlation_factor(a: np.ndarray, *, eig_floor: float = 1e-6,
                           symmetry: Symmetry | None = None) -> np.ndarray:
    """Lower Cholesky factor L (L Lᵀ = C) of a positive definite correlation matrix C near ``a``.

    Eigenvalues of the symmetric ``a`` are raised to at least ``eig_floor`` times the largest
    one and the unit diagonal is restored (D^-½ A D^-½), which keeps C positive definite with a
    condition number of about 1/eig_floor, so the Cholesky factorisation always succeeds. A
    positive definite ``a`` whose eigenvalues are already above the floor is returned unchanged.
    With ``symmetry`` (exchangeable groups of ``a``) the eigenvalues come from the reduced
    matrix: flooring them commutes with the reduction, so the factor is the same.
    """
    if eig_floor <= 0:
        raise ValueError("eig_floor must be positive for the Cholesky factor to exist")
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"psd_correlation_factor needs a square matrix, got shape {a.shape}")
    a = 0.5 * (a + a.T)
    symmetry = symmetry or Symmetry(len(a))
    reduced, anti, _ = symmetry.reduce(a)
    w, v = np.linalg.eigh(reduced)
    floor = eig_floor * max(w[-1], anti.max(initial=-np.inf), 1.0)
    if min(w[0], anti.min(initial=np.inf)) < floor:
        a = _unit_diagonal(symmetry.expand((v * np.maximum(w, floor)) @ v.T,
                                           np.maximum(anti, floor)))
    return np.linalg.cholesky(a)


def times_lower_factor(normals: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """``normals @ factor.T`` for a lower triangular factor, computed in place in ``normals``
    (C-ordered float32): BLAS strmm on its transposed, Fortran-ordered view. Half the flops of
    the GEMM; on one core 1.8–1.9× faster at d = 674 and 2,000, and no second array."""
    out = blas.strmm(1.0, factor.astype(np.float32, copy=False), normals.T, side=0, lower=1,
                     trans_a=0, overwrite_b=1)
    return out.T


def exchangeable_groups(block: np.ndarray, tol: float = GROUP_TOLERANCE) -> list[np.ndarray]:
    """Groups of at least two categories that a correlation block treats alike: one correlation
    r between any two members, and for each category outside, one correlation with all members
    (each up to ``tol``).

    Many rare categories of a wide attribute are such a group: shrinkage sets their noise-sized
    dependence to zero (every cross-attribute ρ below 1e-12), and the nearest correlation matrix,
    being unique, keeps the symmetry (shape wide5000: 2,031 of 5,000 categories, equal to 3e-13).
    """
    # Members' rows are equal up to order: candidates share their sorted row, quantised far
    # above rounding (a member whose row falls across a step lands in a smaller group: still
    # exact). Each candidate group is then verified.
    keys = np.round(np.sort(block, axis=1) / _KEY_STEP)
    _, labels, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    by_label = np.argsort(labels.ravel(), kind="stable")
    groups = []
    for members in np.split(by_label, np.cumsum(counts)[:-1]):
        if len(members) < 2:
            continue
        inner = block[np.ix_(members, members)][~np.eye(len(members), dtype=bool)]
        outside = np.delete(block[:, members], members, axis=0)
        if np.ptp(inner) <= tol and (len(outside) == 0 or np.ptp(outside, axis=1).max() <= tol):
            groups.append(members)
    return groups


@dataclass(frozen=True)
class Symmetry:
    """Exchangeable groups of a symmetric d × d matrix, and the two kinds of subspace they give.

    A matrix that treats a group's n members alike (one value between any two of them, one value
    between each other index and all of them) maps the vectors on the group that sum to zero to
    themselves, times one eigenvalue (the members' diagonal minus their inner value), and keeps
    the space spanned by the orthonormal columns of B (a unit vector per ungrouped index, each
    group's indicator / √n) as the reduced matrix R = Bᵀ A B. So its eigenvalues are R's and each
    group's zero-sum one n - 1 times: an ``eigh`` of d - Σ(n - 1) instead of d. No groups: R = A.
    """

    d: int
    groups: tuple[np.ndarray, ...] = ()

    @classmethod
    def of(cls, a: np.ndarray, tol: float = GROUP_TOLERANCE) -> Symmetry:
        return cls(len(a), tuple(exchangeable_groups(a, tol)))

    @cached_property
    def ungrouped(self) -> np.ndarray:
        grouped = np.concatenate(self.groups) if self.groups else np.empty(0, dtype=int)
        return np.setdiff1d(np.arange(self.d), grouped)

    @cached_property
    def multiplicity(self) -> np.ndarray:
        """How many of the d indices each reduced coordinate stands for."""
        return np.concatenate([np.ones(len(self.ungrouped)),
                               [float(len(g)) for g in self.groups]])

    @cached_property
    def _basis_t(self) -> sparse.csr_matrix:
        """Bᵀ, (reduced size) × d."""
        k = len(self.ungrouped)
        rows = np.concatenate([np.arange(k)] + [np.full(len(g), k + i)
                                                for i, g in enumerate(self.groups)])
        columns = np.concatenate([self.ungrouped, *self.groups])
        values = np.concatenate([np.ones(k)] + [np.full(len(g), len(g) ** -0.5)
                                                for g in self.groups])
        return sparse.csr_matrix((values, (rows, columns)), shape=(k + len(self.groups), self.d))

    def reduce(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """R = Bᵀ A B, each group's zero-sum eigenvalue, and A's diagonal in reduced coordinates
        (a group's mean). A is averaged over each group on the way: exact for an invariant A."""
        if not self.groups:
            return a, np.empty(0), np.diag(a).copy()
        bt = self._basis_t
        r = np.asarray(bt @ np.asarray(bt @ a).T)
        r = 0.5 * (r + r.T)
        member_diagonal = np.array([np.diag(a)[g].mean() for g in self.groups])
        sizes = self.multiplicity[len(self.ungrouped):]
        inner = (np.diag(r)[len(self.ungrouped):] - member_diagonal) / (sizes - 1)
        diagonal = np.concatenate([np.diag(a)[self.ungrouped], member_diagonal])
        return r, member_diagonal - inner, diagonal

    def expand(self, reduced: np.ndarray, anti: np.ndarray) -> np.ndarray:
        """The d × d matrix B R Bᵀ + Σ anti_k·(I - 11ᵀ/n) on each group k."""
        if not self.groups:
            return reduced
        bt = self._basis_t
        out = np.asarray(bt.T @ np.asarray(bt.T @ reduced).T)
        for value, g in zip(anti, self.groups):
            out[np.ix_(g, g)] -= value / len(g)
            out[g, g] += value
        return out

    def eigenvalues(self, a: np.ndarray) -> np.ndarray:
        """All d eigenvalues of an invariant ``a``, ascending."""
        reduced, anti, _ = self.reduce(np.asarray(a, dtype=np.float64))
        repeats = (self.multiplicity[len(self.ungrouped):] - 1).astype(int)
        return np.sort(np.concatenate([np.linalg.eigvalsh(reduced), np.repeat(anti, repeats)]))
