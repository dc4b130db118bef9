"""DPCopula-MLE (Li, Xiong & Jiang, EDBT 2014): DP marginals + subsample-and-aggregate correlation.

    split      ε = ε1 + ε2 with k = ε1/ε2 (default 8), as DPCopula-Kendall (``split_budget``)
    marginals  as DPCopula-Kendall: the m 1-way histograms, ε1/m each, Laplace or EFPA
    order      the rows put in a uniformly random order (:mod:`dp_dask.data.order`)
    blocks     l blocks of consecutive rows by their position g in that order: block t holds
               rows ⌊t·n/l⌋ ≤ g < ⌊(t+1)·n/l⌋ (:func:`block_edges`)
    estimate   per block, the correlation of its pseudo-copula data (:func:`block_correlations`)
    aggregate  each coefficient's mean over the blocks + Laplace of scale C(m,2)·2/(l·ε2)
    copula     the noisy matrix repaired by our NCM; sampling as DPCopula-Kendall (DPCopulaModel)

**Estimator.** In block t of n_t rows each attribute's values become pseudo-copula data
u = mid-rank/(n_t + 1) (ties, i.e. discrete values, get their mid-rank) and normal scores
Φ⁻¹(u); the block's estimate is the sample correlation of the normal scores. This is the
standard semiparametric pseudo-maximum-likelihood estimate of a Gaussian copula's correlation
(Genest, Ghoudi & Rivest 1995: the Gaussian likelihood of the rank-based pseudo-observations),
in its usual closed form, the normal-scores (van der Waerden) correlation; the exact maximiser
under a unit diagonal needs an iterative solve per block for no gain in this use. An attribute
constant in a block has no scores to correlate: its coefficients in that block are 0.

**Privacy** (neighbouring datasets, as everywhere in dp_dask: replace one row, n public).
Neighbours are data sets (multisets): a neighbour's file may list its rows in any order, so
blocks cut by position in the file are not a function of the data set (in a file sorted by an
attribute, a replaced row moves every row between its old and new place: rows (a, a mod 2),
a = 0..5, sorted by a, 3 blocks; replacing (0,0) by (6,0), which sorts last, changes all three
blocks and moves r̄ by 2.0, three times 2/l). So the rows are first put in an order π drawn
uniformly from all n! orders, independently of their values, of the file's order and of how
Dask cut it (:mod:`dp_dask.data.order`); a row's block is its position in π, and the blocks'
sizes depend on n alone. For neighbours D, D' (row x replaced by x'), pair each order π of D
with the order π' of D' that puts x' where π puts x: a bijection, so π' is uniform too, and
paired orders have the same blocks and differ in the rows of exactly one block t*. If the noisy
release M_π of paired orders satisfies P[M_π(D) ∈ E] ≤ e^ε2·P[M_π'(D') ∈ E], averaging over π
gives the same for the mechanism. Each block's estimates r_t ∈ [−1, 1]^C(m,2) are a function
of block t's rows alone, so of the released averages r̄ = (1/l)·Σ_t r_t each coefficient moves
by |r_t* − r'_t*|/l ≤ 2/l, and the C(m,2) of them by at most **C(m,2)·2/l in L1**: Laplace of
scale C(m,2)·2/(l·ε2) per coefficient is ε2-DP (the paper's Lap(C(m,2)·Λ/(l·ε2)), Λ = 2 the
diameter of [−1, 1]). The bound is attained (tests/test_dpcopula_mle.py). With the ε1-DP
histograms, basic composition gives (ε1 + ε2, 0)-DP.
OpenDP's vetted Laplace is discrete, so the statistic is made an integer first: every block
rounds its estimates to the grid 1/Q (Q = ``QUANTUM``) inside the worker, S = Σ_t round(Q·r_t)
has integer L1 sensitivity 2Q·C(m,2), and S + discrete Laplace of scale 2Q·C(m,2)/ε2, divided by
Q·l, is the mechanism above on the rounded estimates (rounding error ≤ 1/(2Q) per coefficient).

**Blocks l** (public: n, m and ε2; or the ``blocks`` option). For the average of l blocks of
B = n/l rows, per coefficient: the estimator's small-block bias is about ρ/B towards 0 (Monte
Carlo on Gaussian data: 0.5 to 1.4 × ρ/B for ρ ≤ 0.9, B ≤ 200); the Laplace variance is
2·(2·C(m,2)/(l·ε2))² = 8·(C(m,2)·B/(n·ε2))²; the sampling variance, about (1 − ρ²)²/n, does
not depend on B. Their sum is least at B⁴ = ρ²·(n·ε2)²/(8·C(m,2)²); with a reference ρ = 1/2,
B = √(n·ε2 / (4√2·C(m,2))), at least ``MIN_BLOCK_ROWS``, and l = ⌊n/B⌋ (:func:`block_count`).
On Adult (n = 45,222, m = 15, ε = 1, k = 8) that is B = 3, l = 15,074: the noise on each
coefficient (std 0.18) is larger than Kendall's τ (0.12), the bias too; the method needs
n·ε2/C(m,2) in the thousands to be competitive (docs/dpcopula.md).

The random order also makes good the paper's assumption (blocks of consecutive rows, "divide
D horizontally") of a row order unrelated to the values: in a file sorted by an attribute,
blocks by file position would make it nearly constant within blocks, its correlations too small.

**Dask.** Each partition is encoded to codes, and the codes are shuffled into the random
order (an out-of-core sort by iid keys: m small integers and an 8-byte key per row cross the
network, in each of the two passes). One pass counts the rows of each ordered partition (where
each block starts and ends); a second reads each ordered partition once and reduces, chunk →
combine → aggregate, its 1-way counts and, per task, the blocks that start in the partition
(the task also reads the codes of the following partitions its last block reaches into) to the
integer vector S. A task holds O(rows·m) for its partitions, independent of n; the driver
receives d + C(m,2) numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed
from scipy.special import ndtri

from dp_dask.cluster import compute
from dp_dask.copula.correlation import nearest_correlation
from dp_dask.data.counts import tree_sum, view_counts_from_codes
from dp_dask.data.encode import check_columns
from dp_dask.data.order import (
    codes_frame,
    frame_codes,
    order_record,
    order_seed,
    random_row_order,
)
from dp_dask.data.schema import Schema
from dp_dask.methods.dpcopula import (
    DEFAULT_RATIO,
    DPCopulaKendallSynthesizer,
    DPCopulaModel,
    noisy_histograms,
    pair_matrix,
    split_budget,
)
from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.split import BudgetPart
from dp_dask.timing import timed

MLE = "dpcopula-mle"
QUANTUM = 2**16  # Q: block estimates rounded to 1/Q before the (integer) noise
MIN_BLOCK_ROWS = 3  # fewer rows give a correlation of signs only
REFERENCE_RHO = 0.5  # the ρ the block rule balances bias against noise for
BLOCK_BATCH = 4096  # blocks estimated at once: O(4096·m²) memory


# --- blocks: public inputs only -----------------------------------------------------------------

def block_count(n_rows: int, m: int, epsilon2: float) -> int:
    """l of the module docstring's rule: a function of n, m and ε2 (all public)."""
    pairs = m * (m - 1) // 2
    if n_rows < 1 or pairs == 0:
        return 1
    rows = math.sqrt(REFERENCE_RHO * n_rows * epsilon2 / (math.sqrt(8) * pairs))
    return max(1, n_rows // max(MIN_BLOCK_ROWS, round(rows)))


def block_edges(n_rows: int, blocks: int) -> np.ndarray:
    """Block t = rows edges[t] ≤ g < edges[t+1] (global positions): ⌊n/l⌋ or ⌈n/l⌉ rows each."""
    return np.arange(blocks + 1, dtype=np.int64) * n_rows // blocks


def block_tasks(lengths: np.ndarray, edges: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(first partition, last partition, first block, end block) per task: the blocks whose first
    row lies in one partition, and the partitions their rows span."""
    ends = np.cumsum(lengths)
    first = np.searchsorted(ends, edges[:-1], side="right")  # the partition of each first row
    last = np.searchsorted(ends, edges[1:] - 1, side="right")  # ... and of each last row
    tasks = []
    for p in np.unique(first):
        k0, k1 = np.searchsorted(first, p), np.searchsorted(first, p, side="right")
        tasks.append((int(p), int(last[k1 - 1]), int(k0), int(k1)))
    return tasks


# --- per block: pseudo-copula data → correlation (on the workers) -------------------------------

def normal_scores(codes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(rows, m) normal scores Φ⁻¹(mid-rank/(n_t + 1)) ranked within each block, centred and
    scaled to unit norm per block and attribute (0 where the attribute is constant in the block).

    ``codes``: (m, rows) of consecutive blocks; ``edges``: their bounds, from 0 to rows.
    """
    sizes = np.diff(edges)
    starts = edges[:-1]
    block = np.repeat(np.arange(len(sizes)), sizes)
    ranks = pd.DataFrame(codes.T).groupby(block, sort=False).rank(method="average").to_numpy()
    scores = ndtri(ranks / (sizes[block] + 1)[:, None])
    centred = scores - (np.add.reduceat(scores, starts, axis=0) / sizes[:, None])[block]
    norm = np.sqrt(np.add.reduceat(centred**2, starts, axis=0))
    # decided on the codes, not the floats: a constant column's centred scores may be ±1 ulp
    constant = np.minimum.reduceat(codes, starts, axis=1) == np.maximum.reduceat(codes, starts,
                                                                                  axis=1)
    return centred / np.where(constant.T, np.inf, norm)[block]


def block_batches(codes: np.ndarray, edges: np.ndarray
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(block indices, their (blocks, C(m,2)) normal-scores correlations), a batch at a time.

    Blocks have two sizes (⌊n/l⌋, ⌈n/l⌉): those of one size are taken BLOCK_BATCH at a time and
    their rows' pair products summed row by row, all pairs and blocks of the batch at once (a
    batched matmul of such small matrices is slower); each block's result is a function of its
    own rows only (what the sensitivity argument needs). Pairs in attribute_pairs order.
    """
    scores = normal_scores(codes, edges)
    sizes = np.diff(edges)
    first, second = np.triu_indices(scores.shape[1], k=1)
    for size in np.unique(sizes):
        same = np.flatnonzero(sizes == size)
        for batch in np.array_split(same, -(-len(same) // BLOCK_BATCH)):
            sums = np.zeros((len(batch), len(first)))
            for offset in range(size):
                rows = scores[edges[batch] + offset]
                sums += rows[:, first] * rows[:, second]
            yield batch, np.clip(sums, -1.0, 1.0)


def block_correlations(codes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(blocks, C(m,2)) each block's normal-scores correlations (:func:`block_batches`)."""
    m = codes.shape[0]
    out = np.zeros((len(edges) - 1, m * (m - 1) // 2))
    for batch, correlations in block_batches(codes, edges):
        out[batch] = correlations
    return out


def block_sums(edges: np.ndarray, first_row: int, *codes: np.ndarray) -> np.ndarray:
    """Chunk step: S = Σ_t round(Q·r_t) (int64, C(m,2)) over the blocks of ``edges`` (relative to
    ``first_row`` of the first of the consecutive partitions ``codes``), a batch at a time."""
    rows = np.concatenate(codes, axis=1)[:, first_row : first_row + int(edges[-1])]
    m = rows.shape[0]
    total = np.zeros(m * (m - 1) // 2, dtype=np.int64)
    for _, correlations in block_batches(rows, edges):
        total += np.rint(QUANTUM * correlations).astype(np.int64).sum(axis=0)
    return total


def mle_graph(parts: list[Delayed], schema: Schema, lengths: np.ndarray, blocks: int, *,
              split_every: int = 8) -> Delayed:
    """Lazy (1-way counts, S) of the partitions ``parts`` (of :func:`codes_frame`, in their
    random order) of ``lengths`` rows: each partition's codes read once, feeding both
    reductions."""
    codes = [dask.delayed(frame_codes)(part) for part in parts]
    # the d 1-way counts: each attribute a view of its own (the d×d matrix's diagonal, without
    # the 2-way tables this method does not use)
    alone = tuple((a,) for a in range(schema.m))
    one_way = tree_sum([dask.delayed(view_counts_from_codes)(c, schema, alone) for c in codes],
                       split_every=split_every)
    edges = block_edges(int(np.sum(lengths)), blocks)
    starts = np.cumsum(lengths) - lengths
    pairs = schema.m * (schema.m - 1) // 2
    chunks = [dask.delayed(block_sums)(edges[k0 : k1 + 1] - edges[k0], int(edges[k0] - starts[p]),
                                       *codes[p : q + 1])
              for p, q, k0, k1 in block_tasks(lengths, edges)] if pairs and lengths.sum() else []
    sums = (tree_sum(chunks, split_every=split_every) if chunks
            else dask.delayed(np.zeros)(pairs, dtype=np.int64))
    return dask.delayed((one_way, sums))


def ordered_mle_graph(ordered: dd.DataFrame, schema: Schema, blocks: int | None,
                      epsilon2: float, *, show_progress: bool = False) -> tuple[Delayed, int]:
    """(lazy (1-way counts, S), l) of the rows of ``ordered`` (a :func:`codes_frame` in a random
    order) in their order: a first pass counts each partition's rows (which place each row's
    position), l comes from n by the public rule unless ``blocks`` is given."""
    parts = ordered.to_delayed()  # the second pass reads the very partitions the first counted
    lengths = np.array(compute(*[dask.delayed(len)(part) for part in parts],
                               show_progress=show_progress), dtype=np.int64)
    n_rows = int(lengths.sum())
    blocks = block_count(n_rows, schema.m, epsilon2) if blocks is None else int(blocks)
    if n_rows and blocks > n_rows:
        raise ValueError(f"blocks = {blocks} is more than the {n_rows} rows of the input")
    return mle_graph(parts, schema, lengths, blocks), blocks


# --- the method -----------------------------------------------------------------------------

def noisy_block_average(sums: np.ndarray, blocks: int, epsilon2: float, *, sampler: str,
                        rng: np.random.Generator | None) -> np.ndarray:
    """The C(m,2) block averages + Laplace of scale C(m,2)·2/(l·ε2) (one ε2-DP measurement on the
    integers S), clipped to [−1, 1]."""
    if not len(sums):
        return np.zeros(0)
    sensitivity = 2 * QUANTUM * len(sums)
    noisy = laplace_noise(sums, sensitivity / epsilon2, sensitivity=sensitivity,
                          sampler=sampler, rng=rng)
    return np.clip(noisy / (QUANTUM * blocks), -1.0, 1.0)


def dpcopula_mle(one_way: np.ndarray, sums: np.ndarray, schema: Schema, n_rows: int,
                 blocks: int, epsilon: float, *, ratio: float = DEFAULT_RATIO,
                 histogram_mechanism: str = "laplace", sampler: str = "opendp",
                 rng: np.random.Generator | None = None, row_order: str = "",
                 metadata: dict[str, Any] | None = None) -> DPCopulaModel:
    """DPCopula-MLE on exact 1-way counts and block sums S; the only step that reads them.
    ``row_order``: how the rows were ordered before the blocks were cut (recorded)."""
    epsilon1, epsilon2 = split_budget(epsilon, ratio, schema.m)
    histograms, marginals = noisy_histograms(one_way, schema, n_rows, epsilon1,
                                             mechanism=histogram_mechanism, sampler=sampler,
                                             rng=rng)
    averages = noisy_block_average(sums, blocks, epsilon2, sampler=sampler, rng=rng)
    correlation = nearest_correlation(pair_matrix(averages, schema.m))
    details = {"method": MLE, "epsilon1": epsilon1, "epsilon2": epsilon2, "k": ratio,
               **marginals,
               "blocks": blocks, "block_rows": [n_rows // blocks, -(-n_rows // blocks)],
               "row_order": row_order,
               "estimator": "per block of consecutive rows in that order, the correlation of "
                            "the normal scores of mid-ranks/(rows+1) (pseudo-MLE); mean over "
                            "blocks",
               "noisy_correlations": averages.tolist()}
    return DPCopulaModel(schema, n_rows, tuple(histograms), correlation,
                         {**(metadata or {}), "model": details}, method=MLE)


class DPCopulaMLESynthesizer(DPCopulaKendallSynthesizer):
    """DPCopula-MLE (``--method dpcopula-mle``): pure ε-DP, δ = 0 (``delta`` is
    stored as given, never spent).

    Extra parameters: ``k`` and ``histograms`` as DPCopula-Kendall; ``blocks`` l, the number
    of blocks of consecutive rows in a uniformly random order (default: the module docstring's
    rule, from n, m and ε2).
    """

    name: ClassVar[str] = MLE
    description: ClassVar[str] = ("DP marginals and the subsample-and-aggregate pseudo-MLE of "
                                  "the Gaussian copula correlation (Li, Xiong & Jiang 2014)")
    post_processing: ClassVar[str] = (
        "histograms projected onto {x >= 0, sum x = n}; averaged correlations clipped to "
        "[-1, 1] and repaired by the nearest correlation matrix")

    def __init__(self, schema: Schema | str | Path, *, blocks: int | None = None,
                 **options: Any) -> None:
        super().__init__(schema, **options)
        self.blocks = blocks
        self.blocks_: int | None = None  # l of the last fit

    def _prepare(self) -> None:
        self.blocks_ = None  # an earlier fit's l never enters this one's plan

    def _privacy_plan(self) -> dict[str, Any]:
        if self.blocks is not None and (isinstance(self.blocks, bool)
                                        or int(self.blocks) != self.blocks or self.blocks < 1):
            raise ValueError(f"blocks must be an integer >= 1, got {self.blocks!r}")
        return super()._privacy_plan()

    def _correlations_measured(self) -> BudgetPart:
        blocks = self.blocks_ if self.blocks_ is not None else self.blocks
        return BudgetPart(
            "block-averaged copula correlations", mechanism="Laplace",
            sensitivity_rule="2/l each",
            note="subsample and aggregate over blocks of consecutive rows in a uniformly random "
                 "order" + ("" if blocks is not None else
                            "; l from n, m and epsilon2 by the public rule of "
                            "dp_dask.methods.dpcopula_mle"))

    def _split_parameters(self) -> dict[str, float]:
        blocks = self.blocks_ if self.blocks_ is not None else self.blocks
        return {} if blocks is None else {"l": blocks}

    def _parameters(self) -> dict[str, Any]:
        return {**super()._parameters(), "blocks": self.blocks}

    def _row_order(self, codes: dd.DataFrame) -> dd.DataFrame:
        """The rows the blocks are cut from, in a uniformly random order (finding 1: never the
        input's own); its seed drawn here, on the driver, once per fit: retried tasks reuse it."""
        return random_row_order(codes, order_seed(self.noise_seed))

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        check_columns(ddf.columns, self.schema)
        ordered = self._row_order(codes_frame(ddf, self.schema))
        graph, self.blocks_ = ordered_mle_graph(
            ordered, self.schema, self.blocks, split_budget(self.epsilon, self.k,
                                                            self.schema.m)[1],
            show_progress=self.show_progress)
        return graph

    def _rows_counted(self, exact: tuple[np.ndarray, np.ndarray]) -> int:
        return int(exact[0][: self.schema.sizes[0]].sum())

    def _fit_counts(self, exact: tuple[np.ndarray, np.ndarray], n_rows: int,
                    metadata: dict[str, Any]) -> DPCopulaModel:
        one_way, sums = exact
        metadata = self._release_record(metadata, blocks=self.blocks_)
        with timed(self.timings_, "noise_copula"):
            return dpcopula_mle(one_way, sums, self.schema, n_rows, self.blocks_, self.epsilon,
                                ratio=self.k, histogram_mechanism=self.histograms,
                                sampler=self.noise_sampler, rng=self._noise_rng(),
                                row_order=order_record(self.noise_seed), metadata=metadata)
