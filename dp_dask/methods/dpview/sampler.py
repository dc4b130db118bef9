"""DPView's synthesis: records linked view by view along the chain (DPView+: paired through
the upper cross views), one output partition at a time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot, round_to_total
from dp_dask.methods.dpview.config import DPViewConfig, View
from dp_dask.methods.dpview.consistency import as_blocks, propagate
from dp_dask.postprocess.consistency import ratio_or_zero
from dp_dask.postprocess.rowupdate import round_rows


def _indicator(groups: np.ndarray, size: int) -> csr_matrix:
    """(size, len(groups)) 0/1 matrix: row g sums the rows of a plan whose group is g."""
    return csr_matrix((np.ones(len(groups)), (groups, np.arange(len(groups)))),
                      shape=(size, len(groups)))


def pairing_plan(block: np.ndarray, left: np.ndarray, counts: np.ndarray, right: np.ndarray,
                 upper: np.ndarray, config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """A plan (pairs, R) over the (block, left value) pairs that hold records — ``block``,
    ``left`` and ``counts`` (their records) per pair — whose rows sum to ``counts``, whose
    block sums are ``right`` (blocks, R), the counts of the blocks' new cells, and whose sums
    over blocks are as close to ``upper`` (L, R) as those allow.

    Iterative proportional fitting of the three margins, ending on the rows. Only pairs that
    hold records are kept (at most the partition's rows), and sums over pairs are sparse
    products (scipy), so the plan costs (pairs)·R cells, not |S|·|uᵢ|. ``config.plan_rounds``
    rounds at most, or until the block sums miss by ``config.plan_tol``. Cells of ``upper`` get
    ``config.plan_floor`` so that a (block, value) that uᵢ says nothing about can still be
    paired (uᵢ and the records disagree only through noise and rounding).
    """
    target = upper.astype(np.float64) + config.plan_floor
    by_block, by_left = _indicator(block, len(right)), _indicator(left, len(upper))
    plan = np.ones((len(block), right.shape[1]))
    for _ in range(config.plan_rounds):
        plan *= ratio_or_zero(target, by_left @ plan)[left]
        plan *= ratio_or_zero(right, by_block @ plan)[block]
        plan *= ratio_or_zero(counts, plan.sum(axis=1))[:, None]
        if np.abs(by_block @ plan - right).max() <= config.plan_tol:
            break
    return plan


def _rank_in_groups(sorted_keys: np.ndarray) -> np.ndarray:
    """Each element's position within its run of equal keys (``sorted_keys`` sorted)."""
    return np.arange(len(sorted_keys)) - np.searchsorted(sorted_keys, sorted_keys, side="left")


def paired_cells(keys: np.ndarray, left: np.ndarray, blocks: np.ndarray, upper: np.ndarray,
                 rng: np.random.Generator, config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """DPView+'s matching: each record's column of ``blocks`` (blocks, R), the new cell it gets.

    Every block b gives its ``blocks[b]`` cells to its records (``keys == b``) as in
    :func:`link_views`, so the view is reproduced exactly; which record gets which cell follows
    ``upper`` (L, R), the table of the records' left values (``left``) against the new cells,
    through :func:`pairing_plan`. The plan's rows are made integer by largest remainder (each
    (block, left value) asks for as many cells as it has records); asks that a cell can meet
    are met, in random order, and the records left over take the block's cells left over at
    random. Numpy only, O(rows log rows + pairs·R) per round of the plan.
    """
    rows, width = len(keys), blocks.shape[1]
    occupied = np.flatnonzero(blocks.sum(axis=1))
    block = np.searchsorted(occupied, keys)  # the occupied blocks, renumbered 0..k-1
    supply = blocks[occupied]
    pairs, pair = np.unique(block * len(upper) + left, return_inverse=True)
    counts = np.bincount(pair, minlength=len(pairs))
    plan = pairing_plan(pairs // len(upper), pairs % len(upper), counts, supply, upper, config)
    asks = round_rows(plan, counts)
    by_pair = np.lexsort((rng.random(rows), pair))
    wanted = np.empty(rows, dtype=np.int64)
    wanted[by_pair] = np.repeat(np.tile(np.arange(width), len(asks)), asks.ravel())
    group = block * width + wanted  # (block, asked cell)
    by_group = np.lexsort((rng.random(rows), group))
    met = _rank_in_groups(group[by_group]) < supply.ravel()[group[by_group]]
    cells = np.empty(rows, dtype=np.int64)
    cells[by_group[met]] = wanted[by_group[met]]
    spare = supply.ravel() - np.minimum(np.bincount(group, minlength=supply.size),
                                        supply.ravel())
    unmet = by_group[~met]
    unmet = unmet[np.lexsort((rng.random(len(unmet)), block[unmet]))]
    cells[unmet] = np.repeat(np.arange(supply.size), spare) % width  # block by block
    return cells


def link_views(tables: list[np.ndarray], views: tuple[View, ...], sizes: np.ndarray,
               rng: np.random.Generator,
               filters: dict[int, tuple[View, np.ndarray]] | None = None,
               config: DPViewConfig = DPViewConfig()) -> np.ndarray:
    """Codes (rows, m) whose every view's table equals ``tables`` (chain-consistent integers).

    View by view along the chain: the records are sorted by their values of the attributes the
    view shares with them (random order within a block), and the view's cells, repeated by their
    counts in the same block order, deal out its new attributes. ``filters`` (DPView+) maps a
    view's chain position to an upper view and its integer table: there the cells of each block
    go to its records by :func:`paired_cells` instead. Numpy only: O(rows log rows) per view, no
    Python object per row.
    """
    rows = int(tables[0].sum())
    codes = np.zeros((rows, len(sizes)), dtype=np.int64)
    present: set[int] = set()
    for t, (view, table) in enumerate(zip(views, tables)):
        shared = tuple(a for a in view if a in present)
        new = tuple(a for a in view if a not in present)
        blocks = as_blocks(table, view, shared)
        keys = (np.ravel_multi_index(tuple(codes[:, a] for a in shared),
                                     tuple(int(sizes[a]) for a in shared))
                if shared else np.zeros(rows, dtype=np.intp))
        if not np.array_equal(np.bincount(keys, minlength=len(blocks)), blocks.sum(axis=1)):
            raise ValueError(f"view {view} does not agree with the views before it on {shared}")
        if not new:  # a base view inside the cross view before it: nothing left to deal
            continue
        if filters and t in filters:
            upper, upper_table = filters[t]
            old = tuple(a for a in upper if a in present)
            if tuple(a for a in upper if a not in present) != new or not old:
                raise ValueError(f"upper view {upper} does not pair {new} with attributes "
                                 f"already linked")
            left = np.ravel_multi_index(tuple(codes[:, a] for a in old),
                                        tuple(int(sizes[a]) for a in old))
            cells = paired_cells(keys, left, blocks, as_blocks(upper_table, upper, old), rng,
                                 config)
            rows_of = np.arange(rows)
        else:
            rows_of = np.lexsort((rng.random(rows), keys))
            cells = np.repeat(np.tile(np.arange(blocks.shape[1]), len(blocks)), blocks.ravel())
        for a, values in zip(new, np.unravel_index(cells, tuple(int(sizes[a]) for a in new))):
            codes[rows_of, a] = values
        present |= set(new)
    return codes[rng.permutation(rows)]


@dataclass(frozen=True)
class DPViewSampler:
    """Draws one output partition: the tables scaled to its rows, then linked."""

    schema: Schema
    views: tuple[View, ...]
    tables: tuple[np.ndarray, ...]
    upper: tuple[View | None, ...] = ()
    upper_tables: tuple[np.ndarray | None, ...] = ()
    config: DPViewConfig = DPViewConfig()

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition."""
        rng = np.random.default_rng(seed)
        scaled = propagate(list(self.tables), self.views, rows)
        # upper view i filters the linking of base view i + 1, at chain position 2i + 2
        filters = {2 * i + 2: (view, round_to_total(table.ravel(), rows).reshape(table.shape))
                   for i, (view, table) in enumerate(zip(self.upper, self.upper_tables))
                   if view is not None}
        codes = link_views(scaled, self.views, self.schema.sizes, rng, filters, self.config)
        return one_hot(codes, self.schema), codes.astype(np.int16)
