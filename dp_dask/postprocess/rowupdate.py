"""Synthetic rows that match their targets: a tree start, then row updates (PrivSyn's GUM).

Both work on one output partition's codes (rows × m) against integer targets already scaled to
the partition's rows, so partitions never communicate and the output depends only on the seed.

* :func:`sample_tree` draws a start from a maximum spanning tree of the attributes (by mutual
  information of the consistent tables): the root's counts and each child's counts within each
  value of its parent are rounded to their targets (largest remainder), and values are shuffled
  within each parent group, so the start carries no i.i.d. sampling error on the tree's tables.
* :func:`update_rows` then repeatedly moves rows out of over-full cells of each 2-way table into
  deficient ones (Zhang et al., "PrivSyn", USENIX Security 2021): half of the moved rows change
  only the two attributes, half are replaced by a copy of a row already in the deficient cell,
  which keeps that row's other attributes consistent with it. With :func:`possible_cells`, no
  move puts a row into a cell another table's target rules out (never-married husbands).
* :func:`match_one_way` finally makes every attribute's counts equal their targets.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dp_dask.postprocess.consistency import Marginals

# GUM's schedule: the share of a table's excess moved per visit starts at 1 and decays, so that
# tables pulling the same rows different ways settle. On Adult (ε = 1, 3 seeds) the 2-way error
# was 9.0 / 9.1 / 9.1 after 5 / 10 / 30 sweeps and 9.2 after 3, with larger maxima.
UPDATE_SWEEPS = 5
UPDATE_DECAY = 0.9
# Past UPDATE_SWEEPS, sweeping goes on while the rows' total excess over all targets still falls
# by KEEP_SWEEPING per sweep, the share moved no lower than RATE_FLOOR. Where the tree start is
# far from the tables (nycflights13: strong 3-way structure) five sweeps left the synthetic
# 2-way error 43 % above the targets' own; Adult and Bank stop after 5–11 sweeps (ε = 1:
# docs/method.md).
MAX_SWEEPS = 40
KEEP_SWEEPING = 0.02
RATE_FLOOR = 0.5
DUPLICATE_SHARE = 0.5
# A table whose over-full cells hold at most this share of the rows in excess is left alone for
# the sweep: a tenth of a percent is far below the noise of any table at useful ε.
SETTLED_SHARE = 1e-3
SWAP_ROUNDS = 10
# The bound on a deficient cell's copy rate that one pass over the rows picks candidates by: as
# if up to this many times its deficit arrived (more is checked for, and costs a second pass).
COPY_BOUND = 1.25


def round_to_total(values: np.ndarray, total: int) -> np.ndarray:
    """Integers ≥ 0 summing to ``total``, proportional to ``values`` (largest remainder)."""
    values = np.asarray(values, dtype=np.float64)
    mass = values.sum()
    scaled = values * (total / mass) if mass > 0 else np.full(values.shape, total / values.size)
    counts = np.floor(scaled).astype(np.int64)
    short = int(total - counts.sum())
    if short > 0:
        counts[np.argsort(counts - scaled, kind="stable")[:short]] += 1
    return counts


def round_rows(blocks: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each row rounded to its total by largest remainder: :func:`round_to_total` row by row,
    vectorised because a view has up to millions of blocks and a tree parent thousands of
    values. A row with no mass but a positive total takes the shape of the column sums (uniform
    if those are 0 too)."""
    blocks = np.asarray(blocks, dtype=np.float64)
    totals = np.asarray(totals, dtype=np.int64)
    columns = blocks.sum(axis=0, keepdims=True)
    fallback = columns if columns.sum() > 0 else np.ones_like(columns)
    shape = np.where(blocks.sum(axis=1, keepdims=True) > 0, blocks, fallback)
    scaled = shape * (totals[:, None] / shape.sum(axis=1, keepdims=True))
    counts = np.floor(scaled).astype(np.int64)
    short = totals - counts.sum(axis=1)
    order = np.argsort(counts - scaled, axis=1, kind="stable")  # largest remainder first
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(blocks.shape[1])[None, :], axis=1)
    return counts + (ranks < short[:, None])


def code_dtype(sizes: Iterable[int]) -> np.dtype:
    """The dtype of the codes row updates work on: the narrowest unsigned one holding every
    attribute's codes. They gather whole rows (copies, the guard) and read two columns per
    table: a narrow dtype keeps the codes in cache, row-major (C) order a row on one line."""
    return np.min_scalar_type(max(sizes) - 1)


def sample_tree(targets: Marginals, order: np.ndarray, parents: np.ndarray, rows: int,
                rng: np.random.Generator) -> np.ndarray:
    """Codes (rows, m) whose root and parent→child counts equal their targets up to rounding."""
    m = len(order)
    codes = np.empty((rows, m), dtype=code_dtype(len(counts) for counts in targets.one_way),
                     order="C")
    root = order[0]
    codes[:, root] = rng.permutation(_repeat(round_to_total(targets.one_way[root], rows)))
    for child in order[1:]:
        parent = parents[child]
        table = targets.table(parent, child)
        by_parent = np.argsort(codes[:, parent], kind="stable")
        group_sizes = np.bincount(codes[:, parent], minlength=table.shape[0])
        present = np.flatnonzero(group_sizes)
        shape = table[present]
        shape = np.where(shape.sum(axis=1, keepdims=True) > 0, shape, targets.one_way[child])
        # All groups rounded at once (a 5,000-value parent made this loop most of a wide
        # partition's start); each group is then shuffled in place in the same order as before.
        values = _repeat_rows(round_rows(shape, group_sizes[present]))
        for start, stop in zip(*_bounds(group_sizes[present])):
            rng.shuffle(values[start:stop])
        codes[by_parent, child] = values
    return codes


def _repeat(counts: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


def _repeat_rows(counts: np.ndarray) -> np.ndarray:
    """:func:`_repeat` of each row of ``counts``, concatenated."""
    return np.repeat(np.tile(np.arange(counts.shape[1]), counts.shape[0]), counts.ravel())


def _bounds(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and stop of consecutive segments of the given sizes."""
    stops = np.cumsum(sizes)
    return stops - sizes, stops


def cell_keys(codes: np.ndarray, attributes: tuple[int, ...], sizes: np.ndarray) -> np.ndarray:
    """Each row's cell of the table (row-major), as intp: bincount and take would convert."""
    keys = codes[:, attributes[0]].astype(np.intp)
    for a in attributes[1:]:
        keys *= sizes[a]
        keys += codes[:, a]
    return keys


def _at_least_float32(x: np.ndarray) -> np.ndarray:
    """The smallest float32 ≥ each value: for a float32 coin c, c < it exactly when c < x."""
    y = x.astype(np.float32)
    return np.where(y < x, np.nextafter(y, np.float32(np.inf)), y)


def _below_leave_rate(coin: np.ndarray, keys: np.ndarray, leave_rate: np.ndarray,
                      copy_bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose coin is below their cell's leave rate, and the candidates for copying:
    the other rows whose coin is below their cell's ``copy_bound``.

    Copy rates depend on how many rows leave, so one pass over the rows takes both sets at
    once; :func:`_below_copy_rate` then picks among the few candidates.
    """
    bound = _at_least_float32(np.where(leave_rate > 0, leave_rate, copy_bound))
    picked = np.flatnonzero(coin < np.take(bound, keys))
    leaving = leave_rate[keys[picked]] > 0
    return picked[leaving], picked[~leaving]


def _below_copy_rate(coin: np.ndarray, keys: np.ndarray, candidates: np.ndarray,
                     copy_rate: np.ndarray, copy_bound: np.ndarray) -> np.ndarray:
    """The rows whose coin is below their cell's copy rate: among the candidates where the
    rates stay within the bound, else (more rows left than it allowed for) a pass over all."""
    if (copy_rate <= copy_bound).all():
        return candidates[coin[candidates] < copy_rate[keys[candidates]]]
    return np.flatnonzero(coin < copy_rate[keys])


def _update_table(codes: np.ndarray, attributes: tuple[int, ...], target: np.ndarray,
                  sizes: np.ndarray, rng: np.random.Generator, rate: float,
                  duplicate_share: float, guard: _Guard | None = None) -> int:
    """Move about ``rate`` of each over-full cell's excess rows into the deficient cells.

    Rows are picked by independent coin flips at their cell's rate (a few passes over the rows,
    no sort), so counts are right in expectation; the sweeps correct what one visit leaves.
    Returns the table's excess rows found on arrival.
    """
    keys = cell_keys(codes, attributes, sizes)
    current = np.bincount(keys, minlength=target.size)
    excess = current - target
    over = np.maximum(excess, 0)
    arrived = int(over.sum())
    if arrived <= SETTLED_SHARE * len(keys):
        return arrived
    deficit = np.maximum(-excess, 0)
    leave_rate = rate * over / np.maximum(current, 1)
    # One coin per row serves both draws: rows leave only over-full cells and are copied only
    # from deficient ones, so no row's coin decides twice.
    copy_bound = np.where(deficit > 0, duplicate_share * (COPY_BOUND * deficit + 1)
                          / np.maximum(current, 1), 0.0)
    coin = rng.random(len(keys), dtype=np.float32)  # float32: half the cost of float64
    movers, candidates = _below_leave_rate(coin, keys, leave_rate, copy_bound)
    if len(movers) == 0:
        return arrived
    movers = rng.permutation(movers)
    arriving = round_to_total(deficit, len(movers))
    # Copies: whole rows already in a deficient cell, picked at the cell's copy rate.
    copy_rate = np.where(over > 0, 0.0, duplicate_share * arriving / np.maximum(current, 1))
    donors = _below_copy_rate(coin, keys, candidates, copy_rate, copy_bound)
    donors = rng.permutation(donors)[: len(movers)]
    _copy_rows(codes, movers[: len(donors)], donors)
    changed = movers[len(donors):]
    rest = np.maximum(arriving - np.bincount(keys[donors], minlength=target.size), 0)
    if len(attributes) == 2 and rest.any():
        cells = _nearby_cells(keys[changed], rest.reshape(sizes[list(attributes)]), rng)
    else:
        cells = rng.permutation(_repeat(round_to_total(rest, len(changed))))
    values = np.unravel_index(cells, tuple(sizes[list(attributes)]))  # each attribute's value
    if guard is not None:
        keep = _stays_possible(np.take(codes, changed, axis=0), attributes, values, guard)
        changed, values = changed[keep], [value[keep] for value in values]
    for a, value in zip(attributes, values):
        codes[changed, a] = value
    return arrived


def _copy_rows(codes: np.ndarray, to: np.ndarray, source: np.ndarray) -> None:
    """``codes[to] = codes[source]``, row by row where rows are contiguous: numpy's 2-D fancy
    indexing copies value by value, several times slower."""
    if codes.flags.c_contiguous:
        whole_rows = codes.view(np.dtype((np.void, codes.shape[1] * codes.itemsize))).ravel()
        np.put(whole_rows, to, np.take(whole_rows, source))
    else:
        codes[to] = codes[source]


def _stays_possible(row_codes: np.ndarray, attributes: tuple[int, ...],
                    values: tuple[np.ndarray, ...], guard: _Guard) -> np.ndarray:
    """Which moves put no row (its codes ``row_codes``) into a cell whose target is zero in
    another table.

    A move for one table changes an attribute without looking at the row's other values; where
    another table says a combination does not occur (never-married husbands), the row stays put
    and later sweeps move another one.
    """
    keep = np.ones(len(row_codes), dtype=bool)
    for a, value in zip(attributes, values):
        moved = np.flatnonzero(value != row_codes[:, a])
        keep[moved] &= guard.possible(row_codes[moved], a, value[moved], attributes)
    return keep


class _Guard:
    """:func:`possible_cells` as one boolean lookup over the d dummy columns of all attributes.

    Checking a row set against every table of an attribute is then one gather per restricting
    table's other attribute and one lookup, instead of one 2-D fancy index per table (26 per
    attribute on DSS), which took over half of the sampling time. Tables without an impossible
    cell are skipped.
    """

    def __init__(self, possible: dict[tuple[int, int], np.ndarray], sizes: np.ndarray) -> None:
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.d = int(np.sum(sizes))
        allowed = np.ones((self.d, self.d), dtype=bool)
        others: list[list[int]] = [[] for _ in sizes]
        for (x, y), mask in possible.items():
            if mask.all():
                continue
            ox, oy = self.offsets[x], self.offsets[y]
            allowed[ox : ox + sizes[x], oy : oy + sizes[y]] = mask
            allowed[oy : oy + sizes[y], ox : ox + sizes[x]] = mask.T
            others[x].append(y)
            others[y].append(x)
        self.allowed = allowed.ravel()
        self.others = [sorted(o) for o in others]

    def possible(self, row_codes: np.ndarray, a: int, values: np.ndarray,
                 fixed: tuple[int, ...] = ()) -> np.ndarray:
        """Whether each row (its codes ``row_codes``), given ``values`` for attribute a, has a
        non-zero target in every table of a with an attribute outside ``fixed``."""
        others = [y for y in self.others[a] if y not in fixed]
        if not others or len(row_codes) == 0:
            return np.ones(len(row_codes), dtype=bool)
        # (rows, others) positions in the flat (d × d) lookup: row = a's value, column = y's.
        where = row_codes[:, others] + self.offsets[others]
        where += ((self.offsets[a] + values) * self.d)[:, None]
        return self.allowed[where].all(axis=1)


def _nearby_cells(sources: np.ndarray, deficit: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """A deficient cell for each row leaving cell ``sources`` (row-major) of a 2-way table,
    changing one attribute where it can: a cell of the same row or column (a coin decides which,
    when both have deficit), drawn ∝ deficit; any cell only when neither line has any.

    Changing one attribute keeps the row's other pairs as they were: moving a husband's age
    never makes him a never-married husband.
    """
    rows, cols = deficit.shape
    i, j = np.divmod(sources, cols)
    row_total, col_total = deficit.sum(axis=1), deficit.sum(axis=0)
    along_row = np.where(row_total[i] == 0, False,
                         np.where(col_total[j] == 0, True, rng.random(len(sources)) < 0.5))
    anywhere = (row_total[i] == 0) & (col_total[j] == 0)
    along_col = ~along_row & ~anywhere
    by_rows, by_cols = deficit.ravel(), deficit.T.ravel()
    cells = np.empty(len(sources), dtype=np.int64)
    cells[along_row] = _draw_within(by_rows, i[along_row] * cols, row_total[i[along_row]], rng)
    column_major = _draw_within(by_cols, j[along_col] * rows, col_total[j[along_col]], rng)
    cells[along_col] = (column_major % rows) * cols + column_major // rows
    cells[anywhere] = _draw_within(by_rows, np.zeros(anywhere.sum(), dtype=np.int64),
                                   np.full(anywhere.sum(), by_rows.sum()), rng)
    return cells


def _draw_within(weights: np.ndarray, first: np.ndarray, total: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Indices drawn ∝ the integer ``weights`` within segments starting at ``first`` whose
    sums are ``total``."""
    if len(first) == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(weights)])[first]
    # weights are integers: staying half a unit below the segment's end keeps the draw inside
    point = np.minimum(before + rng.random(len(first)) * total, before + total - 0.5)
    # The index owning each unit of weight: one lookup instead of a binary search per draw
    # (the weights sum to the rows arriving, so this is short).
    return _repeat(weights)[point.astype(np.intp)]


def possible_cells(targets: dict[tuple[int, ...], np.ndarray], sizes: np.ndarray,
                   floors: dict[tuple[int, ...], float] | None = None
                   ) -> dict[tuple[int, int], np.ndarray]:
    """For each 2-way target, which cells may receive moved rows: target above its floor (0 by
    default; a noise-derived floor also rules out cells that noise alone may have filled)."""
    floors = floors or {}
    return {clique: (target > max(floors.get(clique, 0.0), 0.0)).reshape(sizes[list(clique)])
            for clique, target in targets.items() if len(clique) == 2}


def update_rows(codes: np.ndarray, targets: dict[tuple[int, ...], np.ndarray],
                sizes: np.ndarray, rng: np.random.Generator, *, sweeps: int = UPDATE_SWEEPS,
                decay: float = UPDATE_DECAY, duplicate_share: float = DUPLICATE_SHARE,
                possible: dict[tuple[int, int], np.ndarray] | None = None,
                max_sweeps: int = MAX_SWEEPS) -> int:
    """Row updates in place: each sweep visits every target table once, in random order.

    ``sweeps`` sweeps, then more (up to ``max_sweeps``) while the excess rows summed over the
    tables' visits fall by KEEP_SWEEPING per sweep. With ``possible`` (:func:`possible_cells`),
    no move creates a pair another table rules out. Returns the number of sweeps made.
    """
    cliques = list(targets)
    guard = None if possible is None else _Guard(possible, sizes)
    rate, previous = 1.0, None
    for sweep in range(1, max(sweeps, max_sweeps) + 1):
        excess = sum(_update_table(codes, cliques[index], targets[cliques[index]], sizes, rng,
                                   rate, duplicate_share, guard)
                     for index in rng.permutation(len(cliques)))
        if sweep >= sweeps and (previous is None or excess >= (1 - KEEP_SWEEPING) * previous):
            return sweep
        previous = excess
        rate = max(rate * decay, RATE_FLOOR) if sweep >= sweeps else rate * decay
    return sweep


def match_one_way(codes: np.ndarray, one_way: list[np.ndarray], sizes: np.ndarray,
                  rng: np.random.Generator,
                  possible: dict[tuple[int, int], np.ndarray] | None = None) -> None:
    """Change just enough values that each attribute's counts equal their integer targets.

    The rows leaving an over-full value are a random subset of exactly its excess; with
    ``possible``, rows whose new value would be impossible are swapped for others of their value.
    """
    guard = None if possible is None else _Guard(possible, sizes)
    for a, target in enumerate(one_way):
        excess = np.bincount(codes[:, a], minlength=len(target)) - target
        if not excess.any():
            continue
        shuffled = rng.permutation(len(codes))
        values = codes[shuffled, a]
        grouped = shuffled[np.argsort(values, kind="stable")]
        current = excess + target
        starts = np.cumsum(current) - current
        leaving = np.concatenate([grouped[s : s + e] for s, e in zip(starts, excess) if e > 0])
        arriving = rng.permutation(_repeat(np.maximum(-excess, 0)))
        if guard is not None:
            _swap_impossible(codes, a, leaving, arriving, grouped, starts, current, guard, rng)
        codes[leaving, a] = arriving


def _swap_impossible(codes: np.ndarray, a: int, leaving: np.ndarray, arriving: np.ndarray,
                     grouped: np.ndarray, starts: np.ndarray, current: np.ndarray,
                     guard: _Guard, rng: np.random.Generator) -> None:
    """Replace, in place, leaving rows whose arriving value is impossible by other rows of the
    same value drawn at random (a few rounds; what is left stays as drawn)."""
    left = np.zeros(len(codes), dtype=bool)
    left[leaving] = True
    for _ in range(SWAP_ROUNDS):
        bad = np.flatnonzero(~guard.possible(codes[leaving], a, arriving))
        if len(bad) == 0:
            return
        value = codes[leaving[bad], a]
        offset = (rng.random(len(bad)) * current[value]).astype(np.int64)
        candidate = grouped[starts[value] + offset]
        candidate, first = np.unique(candidate, return_index=True)
        bad = bad[first]
        good = ~left[candidate] & guard.possible(codes[candidate], a, arriving[bad])
        left[leaving[bad[good]]] = False
        left[candidate[good]] = True
        leaving[bad[good]] = candidate[good]
