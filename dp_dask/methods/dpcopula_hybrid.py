"""DPCopula-Hybrid (Li, Xiong & Jiang, EDBT 2014): DPCopula-Kendall per stratum of small domains.

    strata    the joint values of the small-domain attributes (domain ≤ ``small_domain`` values,
              public): P = Π sizes cells; each row falls in one stratum
    split     ε = ε0 + ε1 + ε2: ε0 = ``counts_share``·ε, then (ε1, ε2) by k = ε1/ε2 (default 8)
    counts    the P stratum counts + Laplace b0 = 2/ε0, projected and rounded to integers n̂_p
              summing to n (n public)
    caps      N_p = ⌊n̂_p − c·b0⌋ (c = ``cap_margin``, default 2): public after the counts
    marginals every stratum's histogram of every large-domain attribute (all of its rows),
              one Laplace measurement, b = 2k/ε1 per cell (k large-domain attributes)
    tau       in stratum p with N_p ≥ N_min, Kendall's tau-a numerators S_p of every pair of
              large-domain attributes on the *capped subset* (the stratum's first N_p rows in
              a uniformly random row order, :mod:`dp_dask.data.order`: N_p of its rows drawn
              uniformly) + Laplace b_p = 2·C(k,2)·2(N_p − 1)/ε2; τ_p = S̃_p/C(N_p, 2)
    copula    per stratum P̃_p = NCM(sin(π/2·τ_p)); strata under N_min: independent marginals
    sample    per output partition: each stratum gets its n̂_p/n share of the rows, its small-
              domain values fixed, its large-domain values y ~ N(0, P̃_p), F̃_p⁻¹(Φ(y))

**Privacy** (replace one row, n public; the full proof in docs/privacy.md, "DPCopula-Hybrid").
(1) The P stratum counts have L1 sensitivity 2: ε0-DP. Everything after is chosen from their
noisy release and public inputs (the caps, which strata get a copula: adaptive composition).
(2) The per-stratum histograms, concatenated, have L1 sensitivity 2k: a replaced row leaves one
cell of each of its k histograms (in its old stratum) and enters one (in its new stratum),
whether or not the stratum changes. ε1-DP. (3) The rows are put in an order π drawn uniformly
from all n! orders, independently of their values, of the file's order and of how Dask cut it
(neighbours are multisets, listed in any order: by file position, D in one order and D' in the
reverse would have unrelated capped subsets). Pair each order π of D with the order π' of D'
that puts the replacement x' where π puts the replaced x: a bijection, so π' is uniform too,
and paired orders differ in one position g. Let T_p be the first min(n_p, N_p) rows of stratum
p by position in π. Replacing the row at position g moves at most two strata: its old one p and its
new one q (p = q possible). In p, g leaves: if g ∉ T_p nothing changes; else T_p loses g and, when
n_p > N_p, gains the next row of p: one row of T_p replaced by another (or one removed). In q, g
enters: if it is not among q's first N_q rows nothing changes; else it pushes out T_q's last row
when n_q ≥ N_q (one row replaced), or is added when n_q < N_q. If p = q, one row of T_p changes
value. A substitution in a set of ≤ N rows moves each pair's S by ≤ 2(N − 1), an addition or
removal by ≤ N − 1. So each stratum's C(k,2) numerators move by ≤ C(k,2)·2(N_p − 1) in L1, at most
two strata move, and noise of scale b_p = 2·C(k,2)·2(N_p − 1)/ε2 costs ε2/2 per moved stratum:
ε2 in all, for every paired (π, π'); averaging over π, for the mechanism. The
true n_p is never used for a noise scale; when n_p < N_p the subset is smaller than the divisor
C(N_p, 2) and τ_p shrinks towards 0 (c = 2 makes that rare: P(Laplace < −2·b0) = e⁻²/2, about).
Basic composition: (ε0 + ε1 + ε2, 0)-DP.

**Dask.** Each partition is encoded to codes, shuffled into the random order (an out-of-core
sort by iid keys, in each pass). A first pass counts each stratum's rows in each ordered
partition (exact counts, to the driver only), which gives each partition its per-stratum
offset; the counts are noised and the caps set on the driver; a second pass ranks each ordered
partition's rows within their strata and reduces the per-stratum histograms (all rows) and the
pair tables of the rows below the caps, O(P·Σ sizes + E·Σ pair cells) per task (E strata with a
copula), independent of n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.checks import MAX_TABLE_CELLS
from dp_dask.cluster import compute
from dp_dask.copula.correlation import nearest_correlation, psd_correlation_factor
from dp_dask.copula.model import project_to_total
from dp_dask.data.counts import tree_sum
from dp_dask.data.encode import check_columns
from dp_dask.data.io import Location
from dp_dask.data.order import (
    codes_frame,
    frame_codes,
    order_record,
    order_seed,
    random_row_order,
)
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot
from dp_dask.methods.dpcopula import (
    DEFAULT_RATIO,
    HISTOGRAM_L1_SENSITIVITY,
    copula_codes,
    kendall_counts,
    pair_matrix,
    split_budget,
)
from dp_dask.methods.dpview import integer_table
from dp_dask.model_io import model_schema, read_model_arrays, write_model_files
from dp_dask.privacy.accounting import BASIC_COMPOSITION
from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.split import BudgetPart, BudgetSplit
from dp_dask.synthesizer import EmptyInputError, Synthesizer
from dp_dask.timing import timed

MODEL_FORMAT = 1
HYBRID = "dpcopula-hybrid"
DEFAULT_SMALL_DOMAIN = 10  # the paper's "small domain": at most this many values
DEFAULT_MAX_PARTITIONS = 1024  # strata (cells of the small attributes' joint domain)
DEFAULT_COUNTS_SHARE = 0.1  # ε0/ε
DEFAULT_CAP_MARGIN = 2.0  # c in N_p = ⌊n̂_p − c·b0⌋
TAU_NOISE_TARGET = 0.5  # default N_min: a stratum's τ noise std at most this (docs/dpcopula.md)


# --- strata: public inputs only ------------------------------------------------------------------

@dataclass(frozen=True)
class Strata:
    """The small-domain attributes (``small``), whose joint values are the strata, and the
    large-domain ones (``large``) each stratum's copula models; all from the public schema."""

    small: tuple[int, ...]
    large: tuple[int, ...]
    shape: tuple[int, ...]  # the small attributes' domain sizes

    @classmethod
    def of(cls, schema: Schema, small_domain: int,
           max_partitions: int = DEFAULT_MAX_PARTITIONS) -> Strata:
        """The strata of ``schema``; a ValueError (before any budget is spent) when there is no
        small-domain attribute, no large-domain one, a single stratum, or too many."""
        sizes = schema.sizes.tolist()
        small = tuple(a for a, s in enumerate(sizes) if s <= small_domain)
        large = tuple(a for a, s in enumerate(sizes) if s > small_domain)
        shape = tuple(sizes[a] for a in small)
        where = f"dpcopula-hybrid with small_domain = {small_domain}"
        if not small:
            raise ValueError(f"{where}: no attribute has at most {small_domain} values, so "
                             "there is nothing to partition on; raise small_domain or use "
                             "dpcopula-kendall")
        if not large:
            raise ValueError(f"{where}: every attribute has at most {small_domain} values, "
                             "leaving no large-domain attribute to model; lower small_domain "
                             "or use dpcopula-kendall")
        cells = math.prod(shape)
        if cells < 2:
            raise ValueError(f"{where}: the small-domain attributes "
                             f"{[schema.names[a] for a in small]} have one joint value: a single "
                             "partition; use dpcopula-kendall")
        if cells > max_partitions:
            raise ValueError(f"{where}: the small-domain attributes "
                             f"{[schema.names[a] for a in small]} have {cells:,} joint values, "
                             f"more than max_partitions = {max_partitions:,}; lower small_domain "
                             "or raise max_partitions")
        pair_cells = sum(sizes[a] * sizes[b] for i, a in enumerate(large) for b in large[i + 1:])
        if cells * pair_cells > MAX_TABLE_CELLS:
            raise ValueError(f"{where}: {cells:,} strata × {pair_cells:,} pair-table cells "
                             f"exceed the limit of {MAX_TABLE_CELLS:,} counts per task; lower "
                             "max_partitions or use coarser bins")
        return cls(small, large, shape)

    @property
    def cells(self) -> int:
        return math.prod(self.shape)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The large-domain attribute pairs (schema indices), in dpcopula's pair order."""
        return [(a, b) for i, a in enumerate(self.large) for b in self.large[i + 1:]]

    def index(self, codes: np.ndarray) -> np.ndarray:
        """Each row's stratum, from its (m, rows) codes."""
        return np.ravel_multi_index(tuple(codes[a].astype(np.intp) for a in self.small),
                                    self.shape)

    def values(self) -> np.ndarray:
        """(P, small) the small-domain codes of every stratum."""
        return np.stack(np.unravel_index(np.arange(self.cells), self.shape), axis=1)


def stratum_caps(counts: np.ndarray, scale: float, margin: float) -> np.ndarray:
    """N_p = ⌊n̂_p − c·b0⌋, at least 0, from the released counts (public)."""
    return np.maximum(np.floor(counts - margin * scale), 0).astype(np.int64)


def default_min_rows(pairs: int, epsilon2: float) -> int:
    """N_min: the least N_p for which a stratum's τ noise std, √2·b_p/C(N_p,2) ≈ 8√2·C(k,2)/
    (ε2·N_p), is at most TAU_NOISE_TARGET; below it, the copula would be mostly noise."""
    if pairs == 0:
        return 2
    return max(2, math.ceil(8 * math.sqrt(2) * pairs / (epsilon2 * TAU_NOISE_TARGET)))


# --- the two passes (on the workers) ------------------------------------------------------------

def partition_strata(frame: pd.DataFrame, strata: Strata) -> np.ndarray:
    """Pass 1: the rows of each stratum in one partition (P,) of a :func:`codes_frame`."""
    return np.bincount(strata.index(frame_codes(frame)), minlength=strata.cells)


def ranks_within(keys: np.ndarray) -> np.ndarray:
    """Each row's rank among the earlier rows with its key (0 for the first)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    ranks = np.empty(len(keys), dtype=np.int64)
    ranks[order] = np.arange(len(keys)) - np.searchsorted(ordered, ordered, side="left")
    return ranks


def capped_counts(codes: np.ndarray, schema: Schema, strata: Strata, offsets: np.ndarray,
                  caps: np.ndarray, copula: np.ndarray) -> np.ndarray:
    """Pass 2 chunk on one partition's (m, rows) codes: the per-stratum histograms of the large
    attributes, (P, Σ sizes) flattened, then for each large pair the (E, size_a, size_b) tables
    of the rows whose rank in their stratum (``offsets``: the stratum's rows in earlier
    partitions) is below its cap, in the E strata with a copula (``copula``: their index in
    0..E−1, or −1)."""
    wide = codes.astype(np.intp)
    stratum = strata.index(codes)
    cells = strata.cells
    parts = [np.bincount(stratum * int(schema.sizes[a]) + wide[a],
                         minlength=cells * int(schema.sizes[a])).reshape(cells, -1)
             for a in strata.large]
    out = [np.concatenate(parts, axis=1).ravel()]
    kept = (offsets[stratum] + ranks_within(stratum) < caps[stratum]) & (copula[stratum] >= 0)
    chosen = copula[stratum[kept]]
    held = int(copula.max()) + 1
    for a, b in strata.pairs:
        size_a, size_b = int(schema.sizes[a]), int(schema.sizes[b])
        keys = (chosen * size_a + wide[a][kept]) * size_b + wide[b][kept]
        out.append(np.bincount(keys, minlength=held * size_a * size_b))
    return np.concatenate(out).astype(np.int64)


def partition_capped_counts(frame: pd.DataFrame, schema: Schema, strata: Strata,
                            offsets: np.ndarray, caps: np.ndarray,
                            copula: np.ndarray) -> np.ndarray:
    """Pass 2 chunk on a partition of a :func:`codes_frame`."""
    return capped_counts(frame_codes(frame), schema, strata, offsets, caps, copula)


def stratum_rows(parts: list[Delayed], strata: Strata, *,
                 show_progress: bool = False) -> np.ndarray:
    """Pass 1 on the partitions ``parts`` of a :func:`codes_frame` (in their random order):
    (partitions, P) each stratum's rows in each partition, exact (to the driver only)."""
    counts = compute(*[dask.delayed(partition_strata)(part, strata) for part in parts],
                     show_progress=show_progress)
    return np.array(counts, dtype=np.int64).reshape(len(parts), strata.cells)


def capped_graph(parts: list[Delayed], per_part: np.ndarray, schema: Schema, strata: Strata,
                 caps: np.ndarray, copula: np.ndarray) -> Delayed:
    """Pass 2, lazily, on the very partitions pass 1 counted (``per_part``): the tree sum of
    :func:`capped_counts`, each stratum's capped subset being its first N_p rows in their
    order."""
    offsets = np.cumsum(per_part, axis=0) - per_part
    return tree_sum([dask.delayed(partition_capped_counts)(part, schema, strata, offsets[i],
                                                           caps, copula)
                     for i, part in enumerate(parts)])


def split_counts(vector: np.ndarray, schema: Schema, strata: Strata,
                 held: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(P, Σ sizes) histograms and each pair's (E, size_a, size_b) tables of a pass-2 vector."""
    width = int(sum(schema.sizes[a] for a in strata.large))
    position = strata.cells * width
    tables = []
    for a, b in strata.pairs:
        shape = (held, int(schema.sizes[a]), int(schema.sizes[b]))
        tables.append(vector[position : position + math.prod(shape)].reshape(shape))
        position += math.prod(shape)
    return vector[: strata.cells * width].reshape(strata.cells, width), tables


# --- noise (on the driver) ----------------------------------------------------------------------

def noisy_stratum_counts(exact: np.ndarray, n_rows: int, epsilon0: float, *, sampler: str,
                         rng: np.random.Generator | None) -> np.ndarray:
    """The P stratum counts + Laplace 2/ε0 (ε0-DP), as integers ≥ 0 summing to n."""
    noisy = laplace_noise(exact, HISTOGRAM_L1_SENSITIVITY / epsilon0,
                          sensitivity=HISTOGRAM_L1_SENSITIVITY, sampler=sampler, rng=rng)
    return integer_table(noisy, n_rows)


def noisy_stratum_histograms(exact: np.ndarray, counts: np.ndarray, schema: Schema,
                             strata: Strata, epsilon1: float, *, sampler: str,
                             rng: np.random.Generator | None) -> list[np.ndarray]:
    """Per large attribute, (P, size) probabilities: one ε1-DP Laplace measurement on all
    strata's histograms (L1 sensitivity 2k), each projected onto {x ≥ 0, Σx = n̂_p}; a stratum
    with n̂_p = 0 (no rows drawn) gets a uniform histogram."""
    sensitivity = HISTOGRAM_L1_SENSITIVITY * len(strata.large)
    noisy = laplace_noise(exact.ravel(), sensitivity / epsilon1, sensitivity=sensitivity,
                          sampler=sampler, rng=rng).reshape(exact.shape)
    edges = np.cumsum([int(schema.sizes[a]) for a in strata.large])[:-1]
    histograms = []
    for block in np.split(noisy, edges, axis=1):
        probabilities = np.full(block.shape, 1.0 / block.shape[1])
        for p in np.flatnonzero(counts):
            probabilities[p] = project_to_total(block[p], counts[p]) / counts[p]
        histograms.append(probabilities)
    return histograms


def noisy_stratum_tau(tables: list[np.ndarray], caps: np.ndarray, epsilon2: float, *,
                      sampler: str, rng: np.random.Generator | None) -> np.ndarray:
    """(E, C(k,2)) τ of the E strata with a copula: per stratum, its numerators on the capped
    subset + Laplace b_p = 2·C(k,2)·2(N_p − 1)/ε2 (ε2/2 each; at most two strata move), divided
    by C(N_p, 2), clipped to [−1, 1]. ``caps``: those strata's N_p."""
    tau = np.zeros((len(caps), len(tables)))
    if not tables:
        return tau
    for e, cap in enumerate(caps.tolist()):
        numerators = np.array([c - d for c, d in (kendall_counts(t[e]) for t in tables)],
                              dtype=np.int64)
        sensitivity = 2 * (cap - 1) * len(tables)
        noisy = laplace_noise(numerators, 2 * sensitivity / epsilon2, sensitivity=sensitivity,
                              sampler=sampler, rng=rng)
        tau[e] = np.clip(noisy / (cap * (cap - 1) / 2), -1.0, 1.0)
    return tau


# --- the model and its sampler ------------------------------------------------------------------

@dataclass(frozen=True)
class HybridModel:
    """Per stratum: its noisy count, its large attributes' histograms and copula correlation."""

    schema: Schema
    n_rows: int
    small: tuple[int, ...]
    counts: np.ndarray  # (P,) noisy stratum counts, integers summing to n
    histograms: tuple[np.ndarray, ...]  # per large attribute, (P, size) probabilities
    correlations: np.ndarray  # (P, k, k); the identity for strata without a copula
    metadata: dict[str, Any] = field(default_factory=dict)
    method: str = HYBRID

    @property
    def strata(self) -> Strata:
        large = tuple(a for a in range(self.schema.m) if a not in self.small)
        return Strata(self.small, large, tuple(int(self.schema.sizes[a]) for a in self.small))

    def sampler(self) -> HybridSampler:
        factors = np.stack([psd_correlation_factor(c) for c in self.correlations])
        return HybridSampler(self.schema, self.strata, self.counts / self.counts.sum(), factors,
                             tuple(np.cumsum(h, axis=1) for h in self.histograms))

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """``<path>/model.npz`` (counts, histograms, correlations) and ``<path>/model.json``."""
        document = {"format": MODEL_FORMAT, "method": self.method, "n_rows": self.n_rows,
                    "small_attributes": list(self.small),
                    "schema": self.schema.to_json(), "metadata": self.metadata}
        return write_model_files(path, document, {
            "counts": self.counts, "correlations": self.correlations,
            **{f"histogram_{a}": h for a, h in enumerate(self.histograms)}}, storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> HybridModel:
        """A saved model, checked: format, schema hash, array shapes, no NaN (else ModelError)."""
        schema = model_schema(path, document, MODEL_FORMAT)
        small = tuple(int(a) for a in document["small_attributes"])
        cells = math.prod(int(schema.sizes[a]) for a in small)
        large = [a for a in range(schema.m) if a not in small]
        shapes = {f"histogram_{i}": (cells, int(schema.sizes[a])) for i, a in enumerate(large)}
        arrays = read_model_arrays(path, shapes | {
            "counts": (cells,), "correlations": (cells, len(large), len(large))}, storage_options)
        return cls(schema, int(document["n_rows"]), small, arrays["counts"],
                   tuple(arrays[f"histogram_{i}"] for i in range(len(large))),
                   arrays["correlations"], document["metadata"], method=document["method"])


@dataclass(frozen=True)
class HybridSampler:
    """Draws one output partition: rows per stratum by its share, then the stratum's copula."""

    schema: Schema
    strata: Strata
    shares: np.ndarray  # (P,) n̂_p/n
    factors: np.ndarray  # (P, k, k) lower Cholesky factors
    cdfs: tuple[np.ndarray, ...]  # per large attribute, (P, size) noisy CDFs

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition. Stratum p
        gets ⌊rows·share_p⌋ rows plus a multinomial share of the remainder (expected rows·share_p;
        exactly n̂_p when one partition draws n rows); the rows are shuffled."""
        rng = np.random.default_rng(seed)
        expected = rows * self.shares
        counts = np.floor(expected).astype(np.int64)
        rest, fractions = rows - int(counts.sum()), expected - counts
        if rest:
            counts += rng.multinomial(rest, fractions / fractions.sum())
        codes = np.empty((rows, self.schema.m), dtype=np.int16)
        values = self.strata.values()
        large = list(self.strata.large)
        start = 0
        for p in np.flatnonzero(counts):
            stop = start + int(counts[p])
            codes[start:stop, list(self.strata.small)] = values[p]
            codes[start:stop, large] = copula_codes(rng, stop - start, self.factors[p],
                                                    tuple(cdf[p] for cdf in self.cdfs))
            start = stop
        codes = codes[rng.permutation(rows)]
        return one_hot(codes, self.schema), codes


# --- the method -----------------------------------------------------------------------------

def split_hybrid_budget(epsilon: float, counts_share: float, ratio: float,
                        large: int) -> tuple[float, float, float]:
    """(ε0, ε1, ε2), summing to ε: ε0 = counts_share·ε to the stratum counts, the rest split as
    DPCopula-Kendall's (``split_budget``: ε1/ε2 = ratio; all to ε1 with one large attribute)."""
    if not (math.isfinite(counts_share) and 0 < counts_share < 1):
        raise ValueError(f"counts_share must be a number in (0, 1), got {counts_share!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    epsilon0 = counts_share * epsilon
    return (epsilon0, *split_budget(epsilon - epsilon0, ratio, large))


class DPCopulaHybridSynthesizer(Synthesizer):
    """DPCopula-Hybrid (``--method dpcopula-hybrid``): pure ε-DP, δ = 0 (``delta`` is
    stored as given, never spent).

    Extra parameters (all public): ``small_domain``, the largest domain of an attribute that
    partitions the rows (default 10); ``max_partitions``, the most strata allowed (default
    1024); ``counts_share`` = ε0/ε (default 0.1); ``k`` = ε1/ε2 (default 8); ``cap_margin`` c
    (default 2); ``min_rows`` N_min, the least cap N_p with a copula of its own (default: the
    rule of :func:`default_min_rows`).
    """

    name: ClassVar[str] = HYBRID
    description: ClassVar[str] = ("DPCopula-Kendall per stratum of the small-domain attributes, "
                                  "noisy stratum counts (Li, Xiong & Jiang 2014)")
    post_processing: ClassVar[str] = (
        "stratum counts projected onto {x >= 0, sum x = n} and rounded (largest remainder); "
        "each stratum's histograms projected onto {x >= 0, sum x = its noisy count}; tau "
        "clipped to [-1, 1], P = sin(pi/2 tau) repaired by the nearest correlation matrix")

    def __init__(self, schema: Schema | str | Path, *, small_domain: int = DEFAULT_SMALL_DOMAIN,
                 max_partitions: int = DEFAULT_MAX_PARTITIONS,
                 counts_share: float = DEFAULT_COUNTS_SHARE, k: float = DEFAULT_RATIO,
                 cap_margin: float = DEFAULT_CAP_MARGIN, min_rows: int | None = None,
                 **common: Any) -> None:
        super().__init__(schema, **common)
        self.small_domain = small_domain
        self.max_partitions = max_partitions
        self.counts_share = counts_share
        self.k = k
        self.cap_margin = cap_margin
        self.min_rows = min_rows
        self._fit_state: dict[str, Any] = {}  # pass 1's released counts, for pass 2 and the fit

    def _strata(self) -> Strata:
        for name in ("small_domain", "max_partitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        return Strata.of(self.schema, int(self.small_domain), int(self.max_partitions))

    def _budget(self) -> tuple[float, float, float]:
        return split_hybrid_budget(self.epsilon, self.counts_share, self.k,
                                   len(self._strata().large))

    def _min_rows(self, epsilon2: float) -> int:
        pairs = len(self._strata().pairs)
        if self.min_rows is None:
            return default_min_rows(pairs, epsilon2)
        if isinstance(self.min_rows, bool) or int(self.min_rows) != self.min_rows \
                or self.min_rows < 2:
            raise ValueError(f"min_rows must be an integer >= 2, got {self.min_rows!r}")
        return int(self.min_rows)

    def _privacy_plan(self) -> dict[str, Any]:
        if not (math.isfinite(self.cap_margin) and self.cap_margin >= 0):
            raise ValueError(f"cap_margin must be a finite number >= 0, got {self.cap_margin!r}")
        epsilon0, epsilon1, epsilon2 = self._budget()
        self._min_rows(epsilon2)
        return {"epsilon": self.epsilon, "delta": 0.0, "mechanism": "laplace",
                "accountant": BASIC_COMPOSITION, "rho": None}

    def _budget_split(self, epsilon0: float, epsilon1: float, epsilon2: float) -> BudgetSplit:
        """The split: ε0 to the stratum counts, ε1 to every stratum's histograms, ε2 to the
        Kendall numerators of the strata with a copula."""
        strata = self._strata()
        large = len(strata.large)
        return BudgetSplit((
            BudgetPart("stratum counts", count=strata.cells, symbol="epsilon0",
                       epsilon=epsilon0, mechanism="Laplace", norm="L1",
                       sensitivity=float(HISTOGRAM_L1_SENSITIVITY)),
            BudgetPart("histograms of every stratum", count=large, symbol="epsilon1",
                       epsilon=epsilon1, mechanism="Laplace, one measurement", norm="L1",
                       sensitivity=float(HISTOGRAM_L1_SENSITIVITY * large)),
            BudgetPart("pairs' Kendall tau-a numerators in each stratum with a copula",
                       count=len(strata.pairs), symbol="epsilon2", epsilon=epsilon2,
                       mechanism="Laplace", norm="L1",
                       sensitivity_rule="2(N_p - 1)·C(k,2) per stratum",
                       note="on its first N_p rows in a uniformly random order; at most two "
                            "strata move: epsilon2/2 each")),
            BASIC_COMPOSITION, self.epsilon, 0.0,
            {"counts_share": self.counts_share, "k = epsilon1/epsilon2": self.k})

    def _parameters(self) -> dict[str, Any]:
        return {"small_domain": self.small_domain, "max_partitions": self.max_partitions,
                "counts_share": self.counts_share, "k": self.k, "cap_margin": self.cap_margin,
                "min_rows": self.min_rows}

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        """Pass 1 (stratum rows per partition), the ε0 counts and the caps on the driver, then
        the lazy pass 2."""
        check_columns(ddf.columns, self.schema)
        strata = self._strata()
        epsilon0, _, epsilon2 = self._budget()
        # the seed is drawn here, on the driver, once per fit: retried tasks reuse it; pass 2
        # must read the very partitions pass 1 counted
        parts = random_row_order(codes_frame(ddf, self.schema),
                                 order_seed(self.noise_seed)).to_delayed()
        per_part = stratum_rows(parts, strata, show_progress=self.show_progress)
        totals = per_part.sum(axis=0)
        n_rows = int(totals.sum())
        if n_rows == 0:
            raise EmptyInputError("the input has no rows; nothing to release")
        rng = None if self.noise_seed is None else np.random.default_rng(self.noise_seed)
        with timed(self.timings_, "noise_counts"):
            counts = noisy_stratum_counts(totals, n_rows, epsilon0,
                                          sampler=self.noise_sampler, rng=rng)
        caps = stratum_caps(counts, HISTOGRAM_L1_SENSITIVITY / epsilon0, self.cap_margin)
        with_copula = np.flatnonzero(caps >= self._min_rows(epsilon2)) if strata.pairs \
            else np.zeros(0, dtype=np.int64)
        copula = np.full(strata.cells, -1, dtype=np.int64)
        copula[with_copula] = np.arange(len(with_copula))
        self._fit_state = {"rng": rng, "counts": counts, "caps": caps, "with_copula": with_copula}
        return capped_graph(parts, per_part, self.schema, strata, caps, copula)

    def _rows_counted(self, exact: np.ndarray) -> int:
        strata = self._strata()
        histograms, _ = split_counts(exact, self.schema, strata, 0)
        return int(histograms[:, : self.schema.sizes[strata.large[0]]].sum())

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> HybridModel:
        strata = self._strata()
        epsilon0, epsilon1, epsilon2 = self._budget()
        state, self._fit_state = self._fit_state, {}
        counts, caps, with_copula, rng = (state[key] for key in ("counts", "caps",
                                                                "with_copula", "rng"))
        histograms_exact, tables = split_counts(exact, self.schema, strata, len(with_copula))
        with timed(self.timings_, "noise_copula"):
            histograms = noisy_stratum_histograms(histograms_exact, counts, self.schema, strata,
                                                  epsilon1, sampler=self.noise_sampler, rng=rng)
            tau = noisy_stratum_tau(tables, caps[with_copula], epsilon2,
                                    sampler=self.noise_sampler, rng=rng)
            k = len(strata.large)
            correlations = np.repeat(np.eye(k)[None], strata.cells, axis=0)
            for e, p in enumerate(with_copula.tolist()):
                correlations[p] = nearest_correlation(pair_matrix(np.sin(np.pi / 2 * tau[e]), k))
        min_rows = self._min_rows(epsilon2)
        plan = self._privacy_plan()
        metadata |= {
            "method": f"{self.name}: {self.description}",
            "parameters": self._parameters(),
            "privacy": self._privacy_record(
                delta=0.0, mechanism="laplace", accountant=plan["accountant"], rho=None,
                epsilon0=epsilon0, epsilon1=epsilon1, epsilon2=epsilon2, k=self.k,
                split=self._budget_split(epsilon0, epsilon1, epsilon2),
                post_processing=self.post_processing),
            "model": {
                "method": HYBRID, "epsilon0": epsilon0, "epsilon1": epsilon1,
                "epsilon2": epsilon2,
                "small_attributes": [self.schema.names[a] for a in strata.small],
                "large_attributes": [self.schema.names[a] for a in strata.large],
                "strata": strata.cells, "min_rows": min_rows,
                "strata_with_copula": len(with_copula),
                "noisy_counts": counts.tolist(), "caps": caps.tolist(),
                "row_order": order_record(self.noise_seed),
                "without_copula": "independent marginals (identity correlation)"},
        }
        return HybridModel(self.schema, n_rows, strata.small, counts, tuple(histograms),
                           correlations, metadata)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> HybridModel:
        return HybridModel.from_files(path, document, storage_options)
